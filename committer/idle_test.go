package committer

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"cellguard/internal/natstest"
)

// waitState polls ds's status until it is want.
func waitState(t *testing.T, c *Committer, ds string, want DatasetState) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range c.DatasetStatuses() {
			if s.Dataset == ds && s.State == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("dataset %s never %s: %+v", ds, want, c.DatasetStatuses())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIdleDatasetEvictedAndReloaded: an idle dataset's state is dropped,
// and the next staged message reloads it and is decided against the
// right head; a republished transaction is still recognized.
func TestIdleDatasetEvictedAndReloaded(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := retentionConfig()
	cfg.IdleEvict = 100 * time.Millisecond
	r := start(t, srv.URL(), cfg)
	ds := "sleepy"
	create := newUUID()
	stage(t, js, ds, create, mustMarshal(t, createTxn(create)))
	stageAppends(t, js, ds, 1, 24)
	waitVersion(t, js, ds, 25)
	waitState(t, r.c, ds, DatasetIdle)
	if n := testutil.ToFloat64(r.c.metrics.evictions.WithLabelValues(ds)); n < 1 {
		t.Errorf("evictions = %v, want ≥ 1", n)
	}
	stageAppends(t, js, ds, 25, 1)
	waitVersion(t, js, ds, 26)
	// The last append again, under another message id (as if past the
	// stream's dedupe window): the reloaded state knows its uuid, so there
	// is no second decision.
	waitState(t, r.c, ds, DatasetIdle)
	l := readLog(t, js, ds)
	again := l[len(l)-1].rec.TxnUuid
	id := newUUID()
	stage(t, js, ds, "restaged-"+again, mustMarshal(t, appendTxn(again, 25)))
	stage(t, js, ds, id, mustMarshal(t, appendTxn(id, 26)))
	waitVersion(t, js, ds, 27)
	seen := 0
	for _, e := range readLog(t, js, ds) {
		if e.rec.TxnUuid == again {
			seen++
		}
	}
	if seen != 1 {
		t.Errorf("transaction %s decided %d times after reload, want 1", again, seen)
	}
}

// TestQuietDatasetPackedThenDecided: a sweep after quietAfter packs a
// dataset's head and drops its window's manifests without evicting it;
// the next transactions, one protecting a fragment with a
// precondition, are decided on the decoded head as usual.
func TestQuietDatasetPackedThenDecided(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := retentionConfig()
	cfg.IdleEvict = time.Hour
	r := start(t, srv.URL(), cfg)
	ds := "hush"
	create := newUUID()
	stage(t, js, ds, create, mustMarshal(t, createTxn(create)))
	stageAppends(t, js, ds, 1, 5)
	waitVersion(t, js, ds, 6)
	head := func() (packed bool, window int, ok bool) {
		for _, w := range r.c.workerList() {
			if w.ds != ds {
				continue
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.st == nil || w.st.Head == nil {
				return false, 0, false
			}
			return w.st.Head.IsPacked(), w.st.WindowManifests(), true
		}
		return false, 0, false
	}
	r.c.sweepDatasets(time.Now().Add(quietAfter(cfg.IdleEvict) + time.Second))
	packed, window, ok := head()
	if !ok || !packed || window != 0 {
		t.Fatalf("after a quiet sweep: state kept %t, head packed %t, %d window manifests; want kept, packed, none", ok, packed, window)
	}
	id := newUUID()
	stage(t, js, ds, id, mustMarshal(t, withPre(appendTxn(id, 6), cellsUnchanged([]int32{1}, wholeFragment(0)))))
	stageAppends(t, js, ds, 7, 1)
	waitVersion(t, js, ds, 8)
	if packed, _, ok := head(); !ok || packed {
		t.Fatalf("after two more versions: state kept %t, head packed %t; want a decoded head", ok, packed)
	}
	l := readLog(t, js, ds)
	if got := l[len(l)-2].rec; got.TxnUuid != id || got.Version != 7 {
		t.Fatalf("the protected append: %v, want version 7", got)
	}
}

// TestCreationIsQuietAtOnce: the batch that creates a dataset, with
// nothing of it queued after, leaves its state quiet (head packed,
// decoder dropped) without waiting for a sweep, and already while the
// creation appends; a later append, which reads nothing of the head,
// leaves it to the sweep.
func TestCreationIsQuietAtOnce(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	cfg.noSweep = true
	ds := "fresh"
	var running atomic.Pointer[Committer]
	var appended, quietAtAppend atomic.Bool
	cfg.hook = func(s Step, d string) error {
		if c := running.Load(); s == StepAppended && d == ds && c != nil && !appended.Load() {
			c.mu.Lock()
			w := c.workers[ds]
			c.mu.Unlock()
			// The decider calls the hook holding w.mu: w.st is its own.
			quietAtAppend.Store(w.st != nil && w.st.IsQuiet())
			appended.Store(true)
		}
		return nil
	}
	r := start(t, srv.URL(), cfg)
	running.Store(r.c)
	ids := createAll(t, js, []string{ds})
	checkLogWait(t, js, ds, ids[ds])
	if !appended.Load() || !quietAtAppend.Load() {
		t.Errorf("when the creation's record was appended: seen %t, quiet %t; want a state made quiet while it appended", appended.Load(), quietAtAppend.Load())
	}
	r.c.mu.Lock()
	w := r.c.workers[ds]
	r.c.mu.Unlock()
	// The decider holds w.mu from before the append to after the batch:
	// loaded waits for it.
	if ok, quiet := loaded(w); !ok || !quiet {
		t.Errorf("after its creation: loaded %t, quiet %t; want a quiet state", ok, quiet)
	}
	id := newUUID()
	ids[ds] = append(ids[ds], id)
	stage(t, js, ds, id, mustMarshal(t, appendTxn(id, 1)))
	checkLogWait(t, js, ds, ids[ds])
	if ok, quiet := loaded(w); !ok || quiet {
		t.Errorf("after an append: loaded %t, quiet %t; want a state the sweep quiets", ok, quiet)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// TestCacheRequestsServedWithoutASweep: datasets the budget asks to drop
// their caches do so before any sweep (the committer's loop is woken),
// though none of them gets another batch.
func TestCacheRequestsServedWithoutASweep(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	cfg.noSweep = true
	cfg.CacheBytes = 1 << 10
	r := start(t, srv.URL(), cfg)
	datasets := dsNames("b", 12)
	ids := createAll(t, js, datasets)
	for _, ds := range datasets {
		checkLogWait(t, js, ds, ids[ds])
	}
	b := r.c.budget
	unserved := func() int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.asked
	}
	deadline := time.Now().Add(10 * time.Second)
	for unserved() > 0 || b.used() > cfg.CacheBytes {
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the last creation, %d bytes of caches asked to go are not dropped; %d held against a budget of %d", unserved(), b.used(), cfg.CacheBytes)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
