package bench

// The many-datasets runs of `cellguard bench`: one committer (or the raw
// loop) serving many datasets. Every dataset is created first (the
// set-up, all creations staged at once), then gets -datasets-txns
// appends, offered in the run's loop:
//
//   - closed: -producers producers at once, each staging an append,
//     awaiting its decision, then staging its next, as the single-dataset
//     runs at full speed do. Producer p serves datasets p, p+producers, …
//     round after round (every one of its datasets' first append, then
//     every second), so a dataset's appends come from one producer, each
//     after the previous one is decided, and at most one producer serves
//     a dataset: with fewer datasets than -producers, as many producers as
//     datasets.
//   - open: staged on a schedule at a fixed offered rate (half the closed
//     loop's), round after round, whatever has been decided, by one
//     goroutine on one connection so that each dataset's appends are
//     staged in order: the latency of a committer that keeps up.
//   - burst: every append staged at once, round after round, then all
//     awaited (-datasets-burst; schema 1's only many-datasets mode). It
//     measures how fast a backlog drains; its latencies are mostly the
//     wait in the backlog.
//
// Append round i of a dataset reads version 1+i: the dataset's head once
// its earlier appends are decided, which they are when the committer
// decides it, since it decides a dataset's transactions in staging order.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/committer"
	"cellguard/internal/subject"
)

// manySpec is one many-datasets run.
type manySpec struct {
	raw      bool
	datasets int
	per      int     // appends per dataset
	loop     string  // loopClosed, loopOpen or loopBurst
	rate     float64 // offered transactions/s of an open loop
}

// manyTxn is append round (from 0) of dataset ds.
type manyTxn struct{ ds, round int }

func manyDataset(d int) string { return fmt.Sprintf("ds%04d", d) }

// byRound lists every dataset's first append, then every second, and so
// on: the order of the open and burst loops.
func byRound(datasets, per int) []manyTxn {
	out := make([]manyTxn, 0, datasets*per)
	for r := range per {
		for d := range datasets {
			out = append(out, manyTxn{ds: d, round: r})
		}
	}
	return out
}

// shares splits byRound's appends among at most producers closed-loop
// producers (and at most one per dataset): producer p takes datasets p,
// p+len(shares), … in byRound's order.
func shares(datasets, per, producers int) [][]manyTxn {
	out := make([][]manyTxn, min(producers, datasets))
	for _, x := range byRound(datasets, per) {
		p := x.ds % len(out)
		out[p] = append(out[p], x)
	}
	return out
}

// runMany measures spec: the datasets are created first (the set-up),
// then their appends are offered in spec's loop and every decision
// awaited; memory is measured while the committer still serves them all.
func (b *bencher) runMany(ctx context.Context, spec manySpec) (outcome, error) {
	b.runs++
	start := time.Now()
	prefix := fmt.Sprintf("many%d", b.runs)
	if spec.raw {
		prefix = fmt.Sprintf("rawmany%d", b.runs)
	}
	sc, _ := subject.NewScheme(prefix)
	nc, js, err := b.connect()
	if err != nil {
		return outcome{}, err
	}
	defer nc.Close()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	meter := newRunMeter(spec.raw)
	stop, err := b.startMany(rctx, &wg, sc, meter)
	if err != nil {
		return outcome{}, err
	}
	defer stop()
	tr := newTracker(spec.datasets * (spec.per + 1))
	sub, err := nc.Subscribe(sc.DecAll(), tr.onDecision)
	if err != nil {
		return outcome{}, err
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)
	b.prog.watch("create datasets", tr, spec.datasets)
	stopProfile, err := startCPUProfile(spec, "setup")
	if err != nil {
		return outcome{}, err
	}
	for d := range spec.datasets {
		if d >= setupWindow {
			if err := awaitDecided(ctx, tr, d-setupWindow+1, 5*time.Minute); err != nil {
				return outcome{}, err
			}
		}
		id := uuid.NewString()
		if err := publishAsync(js, sc, manyDataset(d), id, benchCreate(id), tr); err != nil {
			return outcome{}, err
		}
	}
	err = awaitDecided(ctx, tr, spec.datasets, 5*time.Minute)
	if err = errors.Join(err, stopProfile()); err != nil {
		return outcome{}, err
	}
	setup := time.Since(start)
	meter.mark(spec.datasets)
	tr.reset()
	n := spec.datasets * spec.per
	b.prog.watch("transactions", tr, n)
	stopProfile, err = startCPUProfile(spec, spec.loop)
	if err != nil {
		return outcome{}, err
	}
	err = b.offerMany(ctx, js, sc, tr, spec)
	if err == nil {
		err = awaitDecided(ctx, tr, n, 5*time.Minute)
	}
	if err = errors.Join(err, stopProfile()); err != nil {
		return outcome{}, err
	}
	b.prog.watch("", nil, 0)
	used := meter.since(spec.datasets + n) // before measureMemory's collections
	mem, err := measureMemory()
	if err != nil {
		return outcome{}, err
	}
	return outcome{res: tr.result(n), timeline: b.timeline(tr), setup: setup, replicas: streamReplicas(ctx, js, sc.DecStream()), mem: &mem, meter: used}, nil
}

// setupWindow is how many creations a many-datasets set-up keeps staged
// and undecided at once, as a fleet of producers that each await their
// decision does: the set-up measures how fast datasets are created, not
// how a staging stream refuses what it has no room for (256-fragment
// creations of 18.6 KB: 38 MB staged at most). It is the harness's
// offered load, the same for raw JetStream and for any -deciders.
const setupWindow = 2048

// startMany starts the raw loop (meter.reg nil), or one committer
// discovering every dataset, on sc's streams until ctx ends; stop closes
// the committer's connection.
func (b *bencher) startMany(ctx context.Context, wg *sync.WaitGroup, sc subject.Scheme, meter *runMeter) (stop func(), err error) {
	if meter.reg == nil {
		return func() {}, b.startRaw(ctx, wg, sc, manyBatch, &meter.raw)
	}
	cnc, err := nats.Connect(b.url, nats.MaxReconnects(-1))
	if err != nil {
		return nil, err
	}
	c, err := committer.New(cnc, committer.Config{
		Prefix: sc.Prefix(), Logger: b.log, TakeoverOnStart: true, DiscoverEvery: 100 * time.Millisecond, Replicas: b.replicas,
		BatchSize: manyBatch, Window: 16, TxnMaxBytes: 512 << 20, CacheBytes: b.cacheBytes, Partitions: b.partitions, MaxAckPending: b.maxAckPending, Deciders: b.deciders, AtomicBatchMin: b.atomicMin,
		Registerer: meter.reg,
	})
	if err == nil {
		err = startCommitter(ctx, wg, c)
	}
	if err != nil {
		cnc.Close()
		return nil, err
	}
	return cnc.Close, nil
}

// offerMany stages spec's appends in its loop; it returns once the last
// is staged (closed loop: decided).
func (b *bencher) offerMany(ctx context.Context, js jetstream.JetStream, sc subject.Scheme, tr *tracker, spec manySpec) error {
	switch spec.loop {
	case loopClosed:
		return closedLoop(ctx, js, sc, tr, shares(spec.datasets, spec.per, b.producers))
	case loopOpen, loopBurst:
		all := byRound(spec.datasets, spec.per)
		tokens := pace(ctx, spec.rate, len(all)) // nil for a burst: no wait
		for _, x := range all {
			if tokens != nil {
				select {
				case <-tokens:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			id := uuid.NewString()
			tr.inOrder(id, x)
			if err := publishAsync(js, sc, manyDataset(x.ds), id, benchAppend(id, 1+uint64(x.round), 0), tr); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("bench: no loop %q", spec.loop)
}

// closedLoop runs one producer per share at once, each with awaitEach.
func closedLoop(ctx context.Context, js jetstream.JetStream, sc subject.Scheme, tr *tracker, shares [][]manyTxn) error {
	errs := make([]error, len(shares))
	var wg sync.WaitGroup
	for p, share := range shares {
		wg.Go(func() { errs[p] = awaitEach(ctx, js, sc, tr, share) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// awaitEach stages the appends of share one at a time, each once the
// previous one's decision has come.
func awaitEach(ctx context.Context, js jetstream.JetStream, sc subject.Scheme, tr *tracker, share []manyTxn) error {
	done := make(chan struct{}, 1)
	for _, x := range share {
		id := uuid.NewString()
		tr.await(id, done)
		tr.inOrder(id, x)
		if err := publishAsync(js, sc, manyDataset(x.ds), id, benchAppend(id, 1+uint64(x.round), 0), tr); err != nil {
			return err
		}
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Minute):
			return fmt.Errorf("bench: no decision for append %d of %s after a minute", x.round, manyDataset(x.ds))
		}
	}
	return nil
}

// startCPUProfile profiles the process's CPU through one phase of spec's
// run (its set-up, "setup", or its transactions, named by their loop), if
// CELLGUARD_BENCH_CPU_PROFILE names a file prefix: the profile goes to
// PREFIX.<kind>-<phase>-<datasets> (for `go tool pprof`). stop ends the
// profile and closes its file.
func startCPUProfile(spec manySpec, phase string) (stop func() error, err error) {
	kind := kindCommitter
	if spec.raw {
		kind = kindRaw
	}
	return startPhaseProfile(fmt.Sprintf("%s-%s-%d", kind, phase, spec.datasets))
}

// startPhaseProfile profiles the process's CPU, if
// CELLGUARD_BENCH_CPU_PROFILE names a file prefix, into PREFIX.name
// until stop.
func startPhaseProfile(name string) (stop func() error, err error) {
	prefix := os.Getenv("CELLGUARD_BENCH_CPU_PROFILE")
	if prefix == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(prefix + "." + name)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error { pprof.StopCPUProfile(); return f.Close() }, nil
}
