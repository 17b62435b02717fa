package committer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/evaluator"
	"cellguard/internal/dataplane"
	"cellguard/internal/declog"
	"cellguard/internal/retry"
	"cellguard/internal/subject"
)

// Committer decides the staged transactions of every dataset it serves. It
// is safe to run any number of Committers against the same streams: each
// dataset's consumer pins one of them, and the fenced append keeps any other
// from writing.
type Committer struct {
	cfg     Config
	sc      subject.Scheme
	log     *slog.Logger
	nc      *nats.Conn
	js      jetstream.JetStream
	txn     jetstream.Stream
	dec     jetstream.Stream
	obj     jetstream.ObjectStore
	dl      *declog.Log // the decision log over dec and obj
	metrics *metrics
	plane   DataPlane // dataset locations: deletion files
	policy  evaluator.DeletionPolicy
	budget  *cacheBudget // nil: no shared cache budget

	ready   atomic.Bool
	mu      sync.Mutex
	workers map[string]*worker
	owned   ownership           // which datasets this replica owns, for the metrics
	cps     map[string][]uint64 // known checkpoint versions per dataset, ascending
	wg      sync.WaitGroup
	fatal   chan error
	strays  strays
	pinKick chan struct{} // a worker learnt a new pin id: announce it

	phaseMu    sync.Mutex
	phase      int // phaseStarting, phaseRunning, phaseStopped
	phaseSince time.Time
	setupErr   error // the last failed setup attempt's error
}

// New returns a Committer that talks to JetStream over nc. It checks the
// configuration and registers the metrics; Run does the rest.
func New(nc *nats.Conn, cfg Config) (*Committer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	sc, _ := subject.NewScheme(cfg.Prefix)
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("committer: %w", err)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("committer: register metrics: %w", err)
	}
	c := &Committer{
		cfg: cfg, sc: sc, log: cfg.Logger, nc: nc, js: js, metrics: m,
		workers: map[string]*worker{}, cps: map[string][]uint64{}, fatal: make(chan error, 1),
		pinKick: make(chan struct{}, 1),
	}
	c.strays.c = c
	if err := cfg.Registerer.Register(newOwnerCollector(c)); err != nil {
		return nil, fmt.Errorf("committer: register metrics: %w", err)
	}
	c.policy, _ = evaluator.ParseDeletionPolicy(cfg.DeletionPolicy)
	if cfg.CacheBytes > 0 {
		c.budget = newCacheBudget(cfg.CacheBytes)
	}
	c.plane = cfg.DataPlane
	if c.plane == nil {
		c.plane = blobPlane{b: &dataplane.Blob{}}
	}
	return c, nil
}

// Run creates or verifies the streams, then serves datasets until ctx is
// done or a fatal error occurs. Setting up is retried with backoff until
// it succeeds or ctx ends (several committers starting together on a
// fresh cluster race to create the streams, and a cluster still forming
// times requests out). On cancellation each worker finishes the batch in
// hand (append and ack) before Run returns. Run blocks; every goroutine
// it starts has exited when it returns.
func (c *Committer) Run(ctx context.Context) error {
	c.setPhase(phaseStarting, nil)
	defer c.setPhase(phaseStopped, nil)
	if err := c.setup(ctx); err != nil || ctx.Err() != nil {
		return err // nil when stopped during start-up
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	unsub, err := c.watchUnpinned(runCtx)
	if err != nil {
		return err
	}
	defer unsub()
	if c.cfg.TakeoverAfter > 0 {
		b := newBeacons(c)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			b.run(runCtx)
		}()
	}

	for _, ds := range c.cfg.Datasets {
		c.ensureWorker(runCtx, ds)
	}
	if err := c.discover(runCtx); err != nil && runCtx.Err() == nil {
		c.log.Warn("discover datasets", "err", err)
	}
	c.setPhase(phaseRunning, nil)
	c.ready.Store(true)
	c.log.Info("committer running", "prefix", c.sc.Prefix(), "batch", c.cfg.BatchSize)
	tick := time.NewTicker(c.cfg.DiscoverEvery)
	defer tick.Stop()
	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case runErr = <-c.fatal:
			break loop
		case <-tick.C:
			if err := c.discover(runCtx); err != nil && runCtx.Err() == nil {
				c.log.Warn("discover datasets", "err", err)
			}
		}
	}
	c.ready.Store(false)
	stop()
	c.wg.Wait()
	_ = c.plane.Close()
	return runErr
}

// setupAttemptTimeout bounds one attempt at setting up the streams.
const setupAttemptTimeout = 10 * time.Second

// setupRetry paces the attempts: jittered, so committers that failed
// together do not retry together.
var setupRetry = retry.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: true}

// setup creates or verifies the streams, consumers and checkpoint store,
// retrying until it succeeds, ctx ends, or the streams are configured in
// a way the protocol cannot work with.
func (c *Committer) setup(ctx context.Context) error {
	attempt := 0
	err := retry.Do(ctx, math.MaxInt, setupRetry, func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, setupAttemptTimeout)
		defer cancel()
		err := c.openStreams(actx)
		if err == nil {
			err = c.dropWildcardConsumers(actx)
		}
		if err != nil && ctx.Err() == nil {
			attempt++
			c.setPhase(phaseStarting, err)
			c.log.Warn("set up streams; retrying", "attempt", attempt, "err", err)
		}
		return err
	}, func(err error) bool {
		return !errors.Is(err, ErrStreamMismatch) && !errors.Is(err, ErrInvalidConfig)
	})
	if err != nil && ctx.Err() != nil {
		return nil // stopped while starting: a clean exit
	}
	return err
}

// Run phases, for /healthz.
const (
	phaseStarting = iota
	phaseRunning
	phaseStopped
)

func (c *Committer) setPhase(p int, err error) {
	c.phaseMu.Lock()
	defer c.phaseMu.Unlock()
	if c.phase != p || c.phaseSince.IsZero() {
		c.phaseSince = time.Now()
	}
	c.phase, c.setupErr = p, err
}

// discover starts a worker for every dataset with staged messages (all
// datasets, unless Datasets restricts them) and sweeps stray messages
// (see strays.go) when the stream holds any.
func (c *Committer) discover(ctx context.Context) error {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := c.txn.Info(ictx, jetstream.WithSubjectFilter(c.sc.TxnTree()))
	if err != nil {
		return err
	}
	stray := false
	for subj := range info.State.Subjects {
		ds, err := c.sc.ParseStaged(subj)
		switch {
		case errors.Is(err, subject.ErrNotOurs):
		case subject.IsWildcardToken(ds):
			stray = true
		case len(c.cfg.Datasets) == 0:
			// An invalid but literal token gets a worker too: its
			// messages are rejected with INVALID_DATASET_NAME there.
			c.ensureWorker(ctx, ds)
		}
	}
	if stray {
		return c.strays.sweep(ctx)
	}
	return nil
}

// dropWildcardConsumers deletes dataset consumers filtered on a wildcard
// token, which earlier versions created for a literal "*" or ">" subject:
// they overlap every dataset's consumer.
func (c *Committer) dropWildcardConsumers(ctx context.Context) error {
	lister := c.txn.ListConsumers(ctx)
	var bad []string
	for ci := range lister.Info() {
		if tok, err := c.sc.ParseStaged(ci.Config.FilterSubject); err != nil && subject.IsWildcardToken(tok) {
			bad = append(bad, ci.Name)
		}
	}
	if err := lister.Err(); err != nil {
		return fmt.Errorf("committer: list consumers: %w", err)
	}
	for _, name := range bad {
		if err := c.txn.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("committer: delete wildcard consumer %s: %w", name, err)
		}
		c.log.Warn("deleted a consumer filtered on a wildcard dataset token", "consumer", name)
	}
	return nil
}

// ensureWorker starts the worker of ds unless one runs. A worker that
// fails is restarted after a pause; it exits when ctx is done.
func (c *Committer) ensureWorker(ctx context.Context, ds string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.workers[ds]; ok || ctx.Err() != nil {
		return
	}
	w := newWorker(c, ds)
	c.workers[ds] = w
	c.metrics.datasets.Inc()
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.metrics.datasets.Dec()
		for attempt := 0; ; attempt++ {
			began := time.Now()
			err := w.run(ctx)
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, errCrash) {
				c.signalFatal(err)
				return
			}
			if time.Since(began) > workerRestart.Max {
				attempt = 0 // it ran a while: a new failure, not the same one again
			}
			pause := workerRestart.Delay(attempt)
			c.log.Error("dataset worker failed; restarting", "dataset", ds, "attempt", attempt, "pause", pause, "err", err)
			if retry.Sleep(ctx, pause) != nil {
				return
			}
		}
	}()
}

// workerRestart paces the restarts of a failed worker: a worker that
// fails again right after restarting (a broken committed state, an
// unreachable log) backs off up to Max instead of spinning.
var workerRestart = retry.Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second}

func (c *Committer) signalFatal(err error) {
	select {
	case c.fatal <- err:
	default:
	}
}

// watchUnpinned subscribes to the UNPINNED advisories of the dataset
// consumers: when a pinned committer went silent (reason "timeout"), the
// consumer is reset so its unacked messages go to the next committer now
// instead of after AckWait. The subscription only queues the consumer's
// name; a goroutine of Run's (ended with ctx, waited for by Run) resets
// it: nothing outlives Run.
func (c *Committer) watchUnpinned(ctx context.Context) (func(), error) {
	subj := "$JS.EVENT.ADVISORY.CONSUMER.UNPINNED." + c.sc.TxnStream() + ".*"
	resets := make(chan string, 64)
	sub, err := c.nc.Subscribe(subj, func(m *nats.Msg) {
		var adv struct {
			Consumer string `json:"consumer"`
			Reason   string `json:"reason"`
		}
		if json.Unmarshal(m.Data, &adv) != nil || adv.Reason != "timeout" || !strings.HasPrefix(adv.Consumer, "commit-") {
			return
		}
		select {
		case resets <- adv.Consumer:
		default: // a burst: the consumers queued already get reset
		}
	})
	if err != nil {
		return nil, fmt.Errorf("committer: watch advisories: %w", err)
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case name := <-resets:
				c.resetConsumer(ctx, name)
			}
		}
	}()
	return func() { _ = sub.Unsubscribe() }, nil
}

func (c *Committer) resetConsumer(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.txn.ResetConsumer(ctx, name); err != nil {
		c.log.Warn("reset consumer after unpin", "consumer", name, "err", err)
		return
	}
	c.log.Info("consumer reset after pinned committer timed out", "consumer", name)
}

// step runs the crash-injection hook.
func (c *Committer) step(s Step, ds string) error {
	if c.cfg.hook == nil {
		return nil
	}
	if err := c.cfg.hook(s, ds); err != nil {
		return fmt.Errorf("%w at %s: %v", errCrash, s, err)
	}
	return nil
}

// errCrash marks a crash injected by a test hook: the worker stops dead.
var errCrash = errors.New("committer: injected crash")

// Ready reports whether the committer has set up its streams and serves.
// It does not say that every dataset is deciding: /readyz (Readyz) does.
func (c *Committer) Ready() bool { return c.ready.Load() }
