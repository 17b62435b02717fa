package committer

import (
	"math"
	"testing"
	"time"

	"cellguard/internal/declog"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
)

// TestLoadFromCheckpointTail: a checkpoint carries the decided ids and
// the version index, so a restarted committer reads only the records
// after it; the state it builds knows every decision (a republished
// uuid decided before the checkpoint gets no second decision) and the
// version index equals the log's.
func TestLoadFromCheckpointTail(t *testing.T) {
	srv := runServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	cfg.CheckpointEvery = 5
	ds := "tail"
	r := start(t, srv.URL(), cfg)
	create := newUUID()
	stage(t, js, ds, create, mustMarshal(t, createTxn(create)))
	ids := []string{create}
	for i := range 12 {
		id := newUUID()
		ids = append(ids, id)
		stage(t, js, ds, id, mustMarshal(t, appendTxn(id, uint64(i+1))))
	}
	waitVersion(t, js, ds, 13)
	deadline := time.Now().Add(20 * time.Second)
	var cpv uint64
	for {
		if v, ok := r.c.latestCheckpoint(ds, 13); ok && v >= 10 {
			cpv = v // the head after the batch that crossed 10
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint at or after version 10")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	var sc subject.Scheme
	dl, err := declog.Open(t.Context(), js, sc, declog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cp, err := dl.ReadCheckpoint(t.Context(), ds, cpv)
	if err != nil {
		t.Fatal(err)
	}
	if !usableLogState(cp) || uint64(len(cp.Log.UUIDs)) < cpv { // one uuid per version, at least
		t.Fatalf("checkpoint %d carries no usable log state: %+v", cpv, cp.Log)
	}

	r2 := start(t, srv.URL(), cfg)
	if v, ok := r2.c.latestCheckpoint(ds, math.MaxUint64); !ok || v != cpv {
		t.Fatalf("a restarted committer knows checkpoint %d (%v); want %d", v, ok, cpv)
	}
	stage(t, js, ds, "re-"+newUUID(), mustMarshal(t, appendTxn(ids[3], 3))) // decided before the checkpoint
	last := newUUID()
	ids = append(ids, last)
	stage(t, js, ds, last, mustMarshal(t, appendTxn(last, 13)))
	l := waitDecided(t, js, ds, len(ids), 20*time.Second)
	checkLog(t, l, ids)
	if len(l) != len(ids) {
		t.Fatalf("%d decisions, want %d: the republished uuid was decided again", len(l), len(ids))
	}
	var want []uint64
	for _, e := range l {
		want = append(want, e.seq)
	}
	w := r2.c.worker(ds)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.st == nil {
		t.Fatal("no state")
	}
	if got := w.st.VersionSeq.Seqs; w.st.VersionSeq.First != 1 || len(got) != len(want) {
		t.Errorf("version index %v (first %d), log %v", got, w.st.VersionSeq.First, want)
	}
	if w.st.HeadVersion() != 14 || !w.st.Decided.Has(ids[3]) {
		t.Errorf("head %d, decided(ids[3]) %v", w.st.HeadVersion(), w.st.Decided.Has(ids[3]))
	}
}
