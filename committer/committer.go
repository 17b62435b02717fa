package committer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
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
	cps     map[string][]uint64 // known checkpoint versions per dataset, ascending
	wg      sync.WaitGroup
	fatal   chan error
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
// done or a fatal error occurs. On cancellation each worker finishes the
// batch in hand (append and ack) before Run returns. Run blocks; every
// goroutine it starts has exited when it returns.
func (c *Committer) Run(ctx context.Context) error {
	var err error
	setup, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = c.openStreams(setup)
	cancel()
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	unsub, err := c.watchUnpinned(runCtx)
	if err != nil {
		return err
	}
	defer unsub()

	for _, ds := range c.cfg.Datasets {
		c.ensureWorker(runCtx, ds)
	}
	if err := c.discover(runCtx); err != nil && runCtx.Err() == nil {
		c.log.Warn("discover datasets", "err", err)
	}
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

// discover starts a worker for every dataset with staged messages.
func (c *Committer) discover(ctx context.Context) error {
	if len(c.cfg.Datasets) > 0 {
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := c.txn.Info(ictx, jetstream.WithSubjectFilter(c.sc.TxnAll()))
	if err != nil {
		return err
	}
	for subj := range info.State.Subjects {
		ds, err := c.sc.ParseTxn(subj)
		if err != nil {
			continue
		}
		c.ensureWorker(ctx, ds)
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
// instead of after AckWait. The reset runs on the subscription's own
// delivery goroutine, bounded and ended with ctx: nothing outlives Run.
func (c *Committer) watchUnpinned(ctx context.Context) (func(), error) {
	subj := "$JS.EVENT.ADVISORY.CONSUMER.UNPINNED." + c.sc.TxnStream() + ".*"
	sub, err := c.nc.Subscribe(subj, func(m *nats.Msg) {
		var adv struct {
			Consumer string `json:"consumer"`
			Reason   string `json:"reason"`
		}
		if json.Unmarshal(m.Data, &adv) != nil || adv.Reason != "timeout" || !strings.HasPrefix(adv.Consumer, "commit-") {
			return
		}
		c.resetConsumer(ctx, adv.Consumer)
	})
	if err != nil {
		return nil, fmt.Errorf("committer: watch advisories: %w", err)
	}
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
func (c *Committer) Ready() bool { return c.ready.Load() }

// Healthz answers 200 while the process runs.
func (c *Committer) Healthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
}

// Readyz answers 200 once Run has set up the streams and while the NATS
// connection is up, 503 otherwise.
func (c *Committer) Readyz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !c.Ready() || !c.nc.IsConnected() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
}
