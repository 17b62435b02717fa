package committer

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cellguard/internal/natstest"
)

// TestPipelineDecidesWhileAppending holds the first batch of appends
// (at StepDecided, before its append is sent) until more of the dataset's
// messages are queued, so that the next batch is certain to be decided
// while the first one appends: the steps must show a second decided batch
// before the first one's append is committed. The log must still hold
// exactly one decision per staged transaction, in staging order, with
// contiguous versions.
func TestPipelineDecidesWhileAppending(t *testing.T) {
	srv := runServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	ds := "pipelined"
	cfg.Datasets = []string{ds}
	cfg.BatchSize = 4
	cfg.Deciders = 1
	cfg.CheckpointEvery = 1000
	ensureStreamsFor(t, js, cfg)

	create := newUUID()
	ids := []string{create}
	stage(t, js, ds, create, mustMarshal(t, createTxn(create)))

	var (
		mu    sync.Mutex
		steps []Step
		held  atomic.Bool
		c     atomic.Pointer[Committer]
		fail  atomic.Value // string: what went wrong inside the hook
	)
	queued := func() int {
		cm := c.Load()
		if cm == nil {
			return 0
		}
		cm.mu.Lock()
		w := cm.workers[ds]
		cm.mu.Unlock()
		if w == nil {
			return 0
		}
		w.qmu.Lock()
		defer w.qmu.Unlock()
		return len(w.queue)
	}
	cfg.hook = func(s Step, d string) error {
		if d != ds {
			return nil
		}
		mu.Lock()
		steps = append(steps, s)
		n := len(steps)
		mu.Unlock()
		// Hold the first batch decided after the creation until at
		// least a batch's worth of messages waits behind it.
		if s == StepDecided && n > 1 && held.CompareAndSwap(false, true) {
			deadline := time.Now().Add(30 * time.Second)
			for queued() < cfg.BatchSize {
				if time.Now().After(deadline) {
					fail.Store("no messages queued behind the held batch")
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		return nil
	}
	r := start(t, srv.URL(), cfg)
	c.Store(r.c)
	waitDecided(t, js, ds, 1, 30*time.Second) // created
	for range 40 {
		id := newUUID()
		ids = append(ids, id)
		stage(t, js, ds, id, mustMarshal(t, appendTxn(id, 1)))
	}
	l := waitDecided(t, js, ds, len(ids), 60*time.Second)
	if err := r.stop(t); err != nil && !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	checkLog(t, l, ids)
	if f := fail.Load(); f != nil {
		t.Fatal(f)
	}
	mu.Lock()
	defer mu.Unlock()
	if !pipelined(steps) {
		t.Errorf("no batch was decided while another appended; steps: %v", steps)
	}
}

// pipelined reports whether steps show two batches decided before the
// first of them is committed.
func pipelined(steps []Step) bool {
	decided := 0
	for _, s := range steps {
		switch s {
		case StepDecided:
			decided++
			if decided == 2 {
				return true
			}
		case StepAppended, StepAcked:
			decided = 0
		}
	}
	return false
}
