package committer

import (
	"testing"
	"time"

	"cellguard/internal/natstest"
	"cellguard/proto/cellguardpb"
)

// TestPrunedCheckpointFallsBackToAnOlderOne: the checkpoint a read
// version out of the window would be rebuilt from is gone (another
// committer pruned it after this one listed it), and the log from version
// 1 is longer than a decision replays. The history forgets it and
// rebuilds the version from the next older checkpoint instead: the
// transaction commits, neither READ_VERSION_TOO_OLD (its read version is
// kept) nor INTERNAL.
func TestPrunedCheckpointFallsBackToAnOlderOne(t *testing.T) {
	srv := runServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig() // CheckpointEvery 10: a decision replays at most 20 versions
	r := start(t, srv.URL(), cfg)
	const ds = "cities"
	id := newUUID()
	stage(t, js, ds, id, mustMarshal(t, createTxn(id)))
	decidedAs(t, js, ds, 1, id, 1)
	for v := uint64(1); v < 25; v++ {
		id := newUUID()
		stage(t, js, ds, id, mustMarshal(t, appendTxn(id, v)))
		decidedAs(t, js, ds, int(v)+1, id, v+1)
	}
	waitFor(t, "checkpoint 20", func() bool { v, ok := r.c.latestCheckpoint(ds, 25); return ok && v == 20 })

	w, unlock := workerOf(t, r.c, ds)
	w.st.Quiet()
	if err := r.c.dl.DeleteCheckpoint(t.Context(), ds, 20); err != nil {
		t.Fatal(err)
	}
	unlock()

	id = newUUID()
	stage(t, js, ds, id, mustMarshal(t, deleteFragmentTxn(id, 22, 0)))
	l := waitDecided(t, js, ds, 26, 30*time.Second)
	got := l[25].rec
	if got.TxnUuid != id || got.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED || got.Version != 26 {
		t.Errorf("delete read at 22: %s %s %s v%d (%s), want %s committed as version 26", got.TxnUuid, got.Outcome, got.Reason, got.Version, got.Message, id)
	}
	if v, ok := r.c.latestCheckpoint(ds, 25); !ok || v != 10 {
		t.Errorf("the newest checkpoint known at or below 25: %d, %t; want 10, the pruned one forgotten", v, ok)
	}
}
