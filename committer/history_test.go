package committer

import (
	"strings"
	"testing"
	"time"

	"cellguard/internal/natstest"
	"cellguard/proto/cellguardpb"
)

// TestUnreadableCheckpointIsNotTooOld: the checkpoint a read version
// out of the window is rebuilt from cannot be read, and the log from
// version 1 is longer than a decision replays. The transaction is not
// rejected READ_VERSION_TOO_OLD, which would say its read version is no
// longer kept, but INTERNAL (retryable): the checkpoint did not read.
func TestUnreadableCheckpointIsNotTooOld(t *testing.T) {
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
	if got.TxnUuid != id || got.Reason != cellguardpb.Reason_INTERNAL || !strings.Contains(got.Message, "checkpoint cities@20") {
		t.Errorf("delete read at 22: %s %s %s (%s), want %s rejected INTERNAL naming checkpoint 20", got.TxnUuid, got.Outcome, got.Reason, got.Message, id)
	}
}
