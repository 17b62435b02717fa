package committer

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"cellguard/internal/natstest"
	"cellguard/proto/cellguardpb"
)

// TestZombieCannotAppend freezes committer A after it decided a batch,
// lets committer B take the dataset over and decide the same messages,
// then releases A: A's fenced append is refused, nothing is duplicated.
func TestZombieCannotAppend(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	ds := "zombie"
	cfgA := testConfig()
	cfgA.Datasets = []string{ds}
	frozen, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	cfgA.hook = func(s Step, _ string) error {
		if s == StepDecided {
			once.Do(func() { close(frozen); <-release })
		}
		return nil
	}
	ensureStreamsFor(t, js, cfgA)
	create := newUUID()
	ids := []string{create}
	stage(t, js, ds, create, mustMarshal(t, createTxn(create)))
	for i := 0; i < 5; i++ {
		id := newUUID()
		ids = append(ids, id)
		stage(t, js, ds, id, mustMarshal(t, appendTxn(id, 1)))
	}
	a := start(t, srv.URL(), cfgA)
	select {
	case <-frozen:
	case <-time.After(10 * time.Second):
		t.Fatal("A never decided")
	}
	// A is a zombie: alive, holding decided-but-unappended work, no longer
	// pulling or announcing itself (as a paused process would not).
	pause(t, a.c, ds)

	cfgB := testConfig()
	cfgB.Datasets = []string{ds}
	start(t, srv.URL(), cfgB)
	l := waitDecided(t, js, ds, len(ids), 15*time.Second)
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(a.c.metrics.fencing.WithLabelValues(ds)) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("zombie A was never fenced")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// More work after the fence still lands exactly once.
	id := newUUID()
	ids = append(ids, id)
	stage(t, js, ds, id, mustMarshal(t, appendTxn(id, 1)))
	l = waitDecided(t, js, ds, len(ids), 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	l = readLog(t, js, ds)
	checkLog(t, l, ids)
	if got := len(l); got != len(ids) {
		t.Errorf("log has %d decisions, want %d", got, len(ids))
	}
	for _, e := range l {
		if e.rec.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED {
			t.Errorf("decision %v, want committed", e.rec)
		}
	}
}

// TestRepublishOneDecision republishes decided uuids with fresh message
// ids (as after the duplicate window) and within the window: no second
// decision, and the queue moves on.
func TestRepublishOneDecision(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	ds := "republish"
	start(t, srv.URL(), testConfig())
	create := newUUID()
	ids := []string{create}
	stage(t, js, ds, create, mustMarshal(t, createTxn(create)))
	a := newUUID()
	ids = append(ids, a)
	body := mustMarshal(t, appendTxn(a, 1))
	for i := 0; i < 3; i++ {
		stage(t, js, ds, a, body)               // same msg id: dropped by JetStream
		stage(t, js, ds, newUUID()+"-re", body) // new msg id: reaches the committer
	}
	b := newUUID()
	ids = append(ids, b)
	stage(t, js, ds, b, mustMarshal(t, appendTxn(b, 1)))
	l := waitDecided(t, js, ds, len(ids), 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	l = readLog(t, js, ds)
	checkLog(t, l, ids)
	if len(l) != 3 {
		t.Errorf("%d decisions, want 3", len(l))
	}
}

// TestPinnedLeaderDiesFastTakeover kills the pinned committer while it
// holds an unacked transaction. With AckWait far away, the survivor gets
// the transaction through the UNPINNED advisory and a consumer reset,
// about PinnedTTL later.
func TestPinnedLeaderDiesFastTakeover(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	ds := "takeover"
	cfg := testConfig()
	cfg.Datasets = []string{ds}
	cfg.TakeoverOnStart = false
	cfg.AckWait = time.Minute
	ensureStreamsFor(t, js, cfg)
	create := newUUID()
	stage(t, js, ds, create, mustMarshal(t, createTxn(create)))

	stuck, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	var once sync.Once
	cfgA := cfg
	cfgA.hook = func(s Step, _ string) error {
		if s == StepDecided {
			once.Do(func() { close(stuck); <-release })
		}
		return nil
	}
	a := start(t, srv.URL(), cfgA)
	select {
	case <-stuck:
	case <-time.After(10 * time.Second):
		t.Fatal("A never received the transaction")
	}
	start(t, srv.URL(), cfg) // B: a standby with a waiting pull
	begin := time.Now()
	a.nc.Close() // A dies holding the unacked transaction
	waitDecided(t, js, ds, 1, 20*time.Second)
	took := time.Since(begin)
	t.Logf("takeover after %v (PinnedTTL %v, AckWait %v)", took, cfg.PinnedTTL, cfg.AckWait)
	if took > cfg.AckWait/2 {
		t.Errorf("takeover took %v: waited for AckWait, not the unpin", took)
	}
}

// TestNoPinFlappingWhenIdle runs two committers with idle gaps longer than
// PinnedTTL: one committer keeps deciding everything.
func TestNoPinFlappingWhenIdle(t *testing.T) {
	if testing.Short() {
		t.Skip("idles for several PinnedTTLs")
	}
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	ds := "idle"
	cfg := testConfig()
	cfg.Datasets = []string{ds}
	cfg.TakeoverOnStart = false
	// Under -race on a loaded machine an announcement can be late by more
	// than the default 1.5 s, which moves partitions (as a real silence
	// should); this test is about pins over idle periods.
	cfg.TakeoverAfter = 4 * time.Second
	ensureStreamsFor(t, js, cfg)
	a := start(t, srv.URL(), cfg)
	b := start(t, srv.URL(), cfg)
	waitShared(t, a.c, b.c) // B took its share: from here on, nothing moves
	ids := []string{newUUID()}
	stage(t, js, ds, ids[0], mustMarshal(t, createTxn(ids[0])))
	waitDecided(t, js, ds, 1, 10*time.Second)
	for i := 0; i < 3; i++ {
		time.Sleep(cfg.PinnedTTL + time.Second) // idle longer than the pin's TTL
		id := newUUID()
		ids = append(ids, id)
		stage(t, js, ds, id, mustMarshal(t, appendTxn(id, 1)))
		waitDecided(t, js, ds, len(ids), 10*time.Second)
	}
	count := func(r *running) float64 {
		return testutil.ToFloat64(r.c.metrics.decisions.WithLabelValues(ds, "committed", ""))
	}
	// A decision is in the log (waitDecided) a moment before its
	// committer counts it: wait for the counts to add up.
	na, nb := count(a), count(b)
	for deadline := time.Now().Add(5 * time.Second); na+nb < float64(len(ids)) && time.Now().Before(deadline); na, nb = count(a), count(b) {
		time.Sleep(10 * time.Millisecond)
	}
	if !(na == float64(len(ids)) && nb == 0) && !(nb == float64(len(ids)) && na == 0) {
		t.Errorf("decisions split between committers: A %v, B %v (pin flapped)", na, nb)
	}
}
