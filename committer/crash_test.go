package committer

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/natstest"
	"cellguard/proto/cellguardpb"
)

var (
	crashRuns = flag.Int("crash.runs", 100, "randomized crash-injection runs")
	crashSeed = flag.Uint64("crash.seed", 0, "seed of the crash-injection runs (0: random); a failure prints the seed to replay")
	crashRun1 = flag.Int("crash.run", -1, "replay only this run of the seed (-1: all runs)")
)

var crashSteps = []Step{StepDecided, StepMidBatch, StepAppended, StepPartialAck, StepAcked, StepCheckpoint}

// crashAt returns a hook that crashes the n-th time step is reached.
func crashAt(step Step, n int) (func(Step, string) error, *atomic.Bool) {
	var hits atomic.Int64
	var fired atomic.Bool
	return func(s Step, _ string) error {
		if s != step || fired.Load() {
			return nil
		}
		if hits.Add(1) == int64(n) {
			fired.Store(true)
			return errors.New("boom")
		}
		return nil
	}, &fired
}

// TestCrashInjection crashes a committer at a random protocol step in each
// of many randomized runs, restarts it, and checks the log: exactly one
// decision per staged uuid, txn sequences in order, contiguous versions,
// replay reproduces the manifest, and a reload from checkpoint + log equals
// the replay.
func TestCrashInjection(t *testing.T) {
	srv := natstest.RunServer(t, func(o *server.Options) { o.JetStreamLimits.MaxBatchTimeout = 2 * time.Second })
	url := srv.URL()
	_, js := natstest.Connect(t, url)
	ensureStreamsFor(t, js, testConfig())
	runs := *crashRuns
	if testing.Short() {
		runs = 20
	}
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d, %d runs (replay: go test ./committer -run TestCrashInjection -crash.seed %d)", seed, runs, seed)
	fired, ran, current := 0, 0, 0
	t.Cleanup(func() { // also when a helper stopped the test with Fatal
		if t.Failed() {
			t.Logf("FAILED: replay with -crash.seed %d -crash.run %d", seed, current)
		}
	})
	for run := range runs {
		if *crashRun1 >= 0 && run != *crashRun1 {
			continue
		}
		ran, current = ran+1, run
		rng := rand.New(rand.NewPCG(seed, uint64(run)))
		if crashRun(t, url, js, run, rng) {
			fired++
		}
		if t.Failed() {
			t.Fatalf("run %d failed; replay with -crash.seed %d -crash.run %d", run, seed, run)
		}
	}
	t.Logf("%d of %d runs crashed mid-protocol", fired, ran)
	if fired < ran/3 {
		t.Errorf("only %d of %d runs hit their crash point (seed %d)", fired, ran, seed)
	}
}

func crashRun(t *testing.T, url string, js jetstream.JetStream, run int, rng *rand.Rand) bool {
	ds := fmt.Sprintf("crash%d", run)
	step := crashSteps[rng.IntN(len(crashSteps))]
	cfg := testConfig()
	cfg.Datasets = []string{ds}
	cfg.BatchSize = 2 + rng.IntN(7)
	cfg.AtomicBatchMin = 1 + rng.IntN(4) // exercise both append paths
	cfg.MaxAckPending = 2 * cfg.BatchSize
	cfg.CheckpointEvery = 1 + rng.IntN(5)
	cfg.Window = 1 + rng.IntN(4)
	hook, fired := crashAt(step, 1+rng.IntN(3))
	cfg.hook = hook

	var ids []string
	create := newUUID()
	ids = append(ids, create)
	stage(t, js, ds, create, mustMarshal(t, createTxn(create)))
	r := start(t, url, cfg)
	n := 5 + rng.IntN(25)
	for i := 0; i < n; i++ {
		id := newUUID()
		ids = append(ids, id)
		rv := uint64(1 + rng.IntN(max(1, i/2+1)))
		stage(t, js, ds, id, mustMarshal(t, appendTxn(id, rv)))
		if rng.IntN(5) == 0 { // a producer republishing an earlier uuid
			old := ids[rng.IntN(len(ids))]
			stage(t, js, ds, "re-"+newUUID(), mustMarshal(t, appendTxn(old, 1)))
		}
		if rng.IntN(10) == 0 {
			junk := "junk-" + newUUID()
			ids = append(ids, junk)
			stage(t, js, ds, junk, []byte("junk"))
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for !fired.Load() {
		if time.Now().After(deadline) || len(readLog(t, js, ds)) >= len(ids) {
			goto restart // the crash point was never reached
		}
		time.Sleep(5 * time.Millisecond)
	}
	if step == StepCheckpoint {
		// The process dies as the checkpoint starts: Run returns.
		_ = r.stop(t)
	} else {
		r.crashed(t)
	}
restart:
	// Whatever happened (the hook may fire after the loop gave up on it,
	// e.g. at a checkpoint, which does not end Run), no committer of this
	// run may outlive it: with partitions it would serve the next runs'
	// datasets too.
	_ = r.stop(t)
	cfg.hook = nil
	r2 := start(t, url, cfg)
	l := waitDecided(t, js, ds, len(ids), 15*time.Second)
	_ = r2.stop(t)
	head := checkLog(t, l, ids)
	// The running committer's version → log sequence index (filled from
	// atomic batch acks, assumed contiguous) matches the log.
	var want []uint64
	for _, e := range l {
		if e.rec.Outcome == cellguardpb.Outcome_OUTCOME_COMMITTED {
			want = append(want, e.seq)
		}
	}
	r2.c.mu.Lock()
	w := r2.c.workers[ds]
	r2.c.mu.Unlock()
	if w != nil && w.st != nil { // nil if stopped before it loaded
		if got := w.st.VersionSeq.Seqs; w.st.VersionSeq.First != 1 || !slices.Equal(got, want) {
			var desc []string
			for _, e := range l {
				desc = append(desc, fmt.Sprintf("%d:v%d/t%d/%s", e.seq, e.rec.Version, e.rec.TxnSeq, e.rec.Outcome))
			}
			st := w.status.Load()
			t.Errorf("run %d (%s): in-memory version index %v, log has %v; state lastDecSeq %d lastTxnSeq %d head v%d; status %+v; log %v",
				run, step, got, want, w.st.LastDecSeq, w.st.LastTxnSeq, w.st.HeadVersion(), st, desc)
		}
	}
	st := loadForTest(t, url, cfg, ds)
	if head == nil || st.Head == nil || !proto.Equal(head.Proto(), st.Head.Proto()) {
		t.Errorf("run %d (%s): reloaded head differs from replayed head", run, step)
	}
	return fired.Load()
}

// loadForTest loads the state of ds the way a starting worker does.
func loadForTest(t testing.TB, url string, cfg Config, ds string) *state {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cfg.Registerer = nil
	c, err := New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.openStreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	w := newWorker(c, ds)
	if err := w.load(t.Context()); err != nil {
		t.Fatal(err)
	}
	return w.st
}
