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
	"cellguard/internal/natsperm"
	"cellguard/internal/retry"
	"cellguard/internal/subject"
)

// Committer decides the staged transactions of every dataset it serves. It
// is safe to run any number of Committers against the same streams: each
// dataset's consumer pins one of them, and the fenced append keeps any other
// from writing.
type Committer struct {
	// stepdown paces the stepdowns of CG_DEC's leader asked for datasets
	// whose log did not replay at the leader (leader.go).
	stepdown stepdowns

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
	// limits are the decision core's settings, built once (stateLimits)
	// and shared by every dataset's state.
	limits func() *limits
	// atomicMin is the smallest group appended as one atomic batch:
	// Config.AtomicBatchMin, or AtomicBatchMinFor the decision log (useStreams).
	atomicMin int
	// groups is the group commit across datasets (coalesce.go).
	groups coalescer

	ready    atomic.Bool
	mu       sync.Mutex
	workers  map[string]*worker
	act      activity            // the workers with a state, in activity order (activity.go)
	owned    ownership           // which datasets this replica owns, for the metrics
	cps      map[string][]uint64 // known checkpoint versions per dataset, ascending
	wg       sync.WaitGroup
	fatal    chan error
	strays   strays
	pinKick  chan struct{} // a partition learnt a new pin id: announce it
	beacons  *beacons      // nil when fast takeover is off
	cpw      *checkpointWriter
	deciders *deciders
	holds    holds           // delivered messages held undecided (hold.go)
	runCtx   context.Context // Run's, for the deciders

	// Partitions (partition.go, assign.go). gens are the partition counts
	// that have consumers: the current one (the stream's transform) first,
	// then earlier ones still being drained. parts are the partitions this
	// committer consumes, by consumer name; only Run's goroutine touches it.
	partMu   sync.Mutex
	gens     []int
	parts    map[string]*partition
	released map[string]time.Time // partitions given up, when (for the beacons)
	joining  *joining             // set while this committer joins (join.go)
	legacy   atomic.Bool          // CG_TXN holds messages staged before it was partitioned
	draining atomic.Bool          // a goroutine drains them
	epochs   atomic.Uint64

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
		pinKick: make(chan struct{}, 1), parts: map[string]*partition{},
	}
	c.strays.c = c
	c.holds.onChange = func(n int) { m.held.Set(float64(n)) }
	c.groups.c = c
	if err := cfg.Registerer.Register(newOwnerCollector(c)); err != nil {
		return nil, fmt.Errorf("committer: register metrics: %w", err)
	}
	c.policy, _ = evaluator.ParseDeletionPolicy(cfg.DeletionPolicy)
	if cfg.CacheBytes > 0 {
		c.budget = newCacheBudget(cfg.CacheBytes)
	}
	c.limits = sync.OnceValue(c.newLimits)
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
// times requests out). On cancellation each partition finishes the batch
// in hand (append and ack) before Run returns. Run blocks; every
// goroutine it starts has exited when it returns.
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
	c.cpw = newCheckpointWriter(c)
	defer c.cpw.close()
	c.runCtx = runCtx
	c.deciders = newDeciders(c, c.cfg.Deciders)
	stopKeeper := c.startKeeper()
	if c.cfg.TakeoverAfter > 0 {
		c.beacons = newBeacons(c)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.beacons.run(runCtx)
		}()
		// Hear the other committers before taking a share of the
		// partitions, so that a joining committer does not take them all
		// for a moment (join.go). A committer told to take every
		// partition over at start (a single replica) has no one to hear.
		if !c.cfg.TakeoverOnStart {
			c.join(runCtx)
		}
	}
	c.preload(runCtx)
	if err := c.discover(runCtx); err != nil && runCtx.Err() == nil {
		c.log.Warn("discover", "err", err)
	}
	c.reconcile(runCtx)
	c.setPhase(phaseRunning, nil)
	c.ready.Store(true)
	c.log.Info("committer running", "prefix", c.sc.Prefix(), "batch", c.cfg.BatchSize, "partitions", c.partitionCount(), "consuming", len(c.parts))
	tick := time.NewTicker(c.cfg.DiscoverEvery)
	defer tick.Stop()
	sweep := time.NewTicker(sweepEvery(c.cfg.IdleEvict))
	defer sweep.Stop()
	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case runErr = <-c.fatal:
			break loop
		case now := <-sweep.C:
			if !c.cfg.noSweep {
				c.sweepDatasets(now)
			}
		case <-c.budget.askedSignal():
			c.honorCacheRequests()
		case <-tick.C:
			if err := c.discover(runCtx); err != nil && runCtx.Err() == nil {
				c.log.Warn("discover", "err", err)
			}
			c.reconcile(runCtx)
		}
	}
	c.ready.Store(false)
	stop()
	c.stopPartitions()
	c.deciders.close()
	stopKeeper()
	c.wg.Wait()
	c.groups.wait()
	c.clearStopped()
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
		// A request the user may not send is refused by the server on
		// the side (the request itself just goes unanswered): the guard
		// ends the attempt at once with the refusal, which names the
		// subject, instead of a timeout that names nothing.
		actx, refused := natsperm.For(c.nc).Guard(actx, append([]string{c.sc.Prefix() + ".>"}, natsperm.JetStream...)...)
		err := c.openStreams(actx)
		if err == nil {
			err = c.ensurePartitioned(actx)
		}
		err = refused(err)
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

// discover looks at what CG_TXN holds outside the partitions: stray
// messages on wildcard subjects (rejected, see strays.go) and messages
// staged before the stream was partitioned (each such dataset drains
// them, in order); and it follows a change of the partition count.
func (c *Committer) discover(ctx context.Context) error {
	if err := c.followPartitionCount(ctx); err != nil {
		return err
	}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := c.txn.Info(ictx, jetstream.WithSubjectFilter(c.sc.TxnTree()))
	if err != nil {
		return err
	}
	stray := false
	var legacy []string
	for subj := range info.State.Subjects {
		ds, err := c.sc.ParseStaged(subj)
		switch {
		case errors.Is(err, subject.ErrNotOurs):
		case subject.IsWildcardToken(ds):
			stray = true
		default:
			legacy = append(legacy, ds)
		}
	}
	c.legacy.Store(len(legacy) > 0)
	if len(legacy) > 0 && c.draining.CompareAndSwap(false, true) {
		// Off Run's goroutine: a dataset's drain may take as long as a
		// batch does.
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer c.draining.Store(false)
			for _, ds := range legacy {
				if c.worker(ds).drain(ctx) != nil || ctx.Err() != nil {
					return
				}
			}
		}()
	}
	if stray {
		return c.strays.sweep(ctx)
	}
	return nil
}

// preload loads the state of Config.Datasets before serving, so that they
// decide their first message at once and count for readiness.
func (c *Committer) preload(ctx context.Context) {
	for _, ds := range c.cfg.Datasets {
		w := c.worker(ds)
		w.mu.Lock()
		if err := w.ensureLoaded(ctx); err != nil && ctx.Err() == nil {
			_ = w.failed(ctx, err, nil)
		} else if err == nil {
			w.setLoadedStatus()
		}
		w.mu.Unlock()
	}
}

// worker returns the worker of ds, creating it on first use.
func (c *Committer) worker(ds string) *worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.workers[ds]
	if !ok {
		w = newWorker(c, ds)
		c.workers[ds] = w
		c.metrics.datasets.Inc()
	}
	return w
}

// workerList returns every worker.
func (c *Committer) workerList() []*worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := make([]*worker, 0, len(c.workers))
	for _, w := range c.workers {
		ws = append(ws, w)
	}
	return ws
}

// clearStopped resets the stopped gauge of every stopped dataset when Run
// ends: a stopped dataset is stopped only while this committer runs.
func (c *Committer) clearStopped() {
	for _, w := range c.workerList() {
		w.mu.Lock()
		if w.stopped {
			c.metrics.stopped.WithLabelValues(w.ds, reasonUntrustedLog).Set(0)
		}
		w.mu.Unlock()
	}
}

// drain decides the dataset's undecided messages that no partition
// consumer delivers (staged before CG_TXN was partitioned), up to maxFill
// of them per call.
func (w *worker) drain(ctx context.Context) error {
	return w.handle(ctx, nil)
}

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
		if json.Unmarshal(m.Data, &adv) != nil || adv.Reason != "timeout" || !strings.HasPrefix(adv.Consumer, "partition-") {
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
		// Several at a time: a partition count change unpins every
		// consumer of the old count at once, and one reset must not
		// wait for another's answer.
		sem := make(chan struct{}, takeOverParallel)
		var wg sync.WaitGroup
		defer wg.Wait()
		for {
			select {
			case <-ctx.Done():
				return
			case name := <-resets:
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer func() { <-sem; wg.Done() }()
					c.resetConsumer(ctx, name)
				}()
			}
		}
	}()
	return func() { _ = sub.Unsubscribe() }, nil
}

func (c *Committer) resetConsumer(ctx context.Context, name string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	switch err := c.resetIfExists(ctx, name); {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		c.log.Debug("unpinned consumer is gone (retired)", "consumer", name)
	case err != nil:
		c.log.Warn("reset consumer after unpin", "consumer", name, "err", err)
	default:
		c.log.Info("consumer reset after pinned committer timed out", "consumer", name)
	}
}

// resetIfExists resets a partition consumer (its unacked messages are
// delivered again at once), or returns ErrConsumerNotFound when there is
// none: on a cluster, a reset of a consumer that is gone (a partition of
// an earlier count, retired) is answered by no server and would wait out
// ctx, while its info is answered "not found" at once.
func (c *Committer) resetIfExists(ctx context.Context, name string) error {
	if _, err := c.txn.Consumer(ctx, name); err != nil {
		return err
	}
	_, err := c.txn.ResetConsumer(ctx, name)
	return err
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
