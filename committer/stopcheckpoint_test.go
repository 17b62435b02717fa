package committer

import (
	"testing"

	"cellguard/internal/natstest"
)

// TestStopAbandonsCheckpointWrites: a committer stops promptly while a
// checkpoint cannot be written (its server is gone, so the write would
// wait out its 30 s timeout): the write is abandoned, not waited for.
func TestStopAbandonsCheckpointWrites(t *testing.T) {
	srv := runServer(t)
	cfg := testConfig()
	r := start(t, srv.URL(), cfg)
	ds := "stopping"
	create := newUUID()
	_, js := natstest.Connect(t, srv.URL())
	stage(t, js, ds, create, mustMarshal(t, createTxn(create)))
	waitVersion(t, js, ds, 1)
	w := r.c.worker(ds)
	w.mu.Lock()
	head := w.st.Head
	w.mu.Unlock()
	srv.Stop()
	for i := range 4 { // more than the writers, so some wait too
		r.c.cpw.offer(cpReq{ds: ds + string(rune('a'+i)), m: head, decSeq: 1})
	}
	// stop fails the test if Run does not return within its bound,
	// which is well under the write's own timeout.
	if err := r.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
}
