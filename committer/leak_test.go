package committer

import (
	"testing"
	"time"

	"cellguard/internal/natstest"
)

// TestNoGoroutinesAfterRun: once Run has returned, no goroutine of the
// committer is left: workers, checkpoint writers, consume callbacks, the
// advisory watcher and the stray sweeper have all ended.
func TestNoGoroutinesAfterRun(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	cfg.CheckpointEvery = 2
	r := start(t, srv.URL(), cfg)
	for _, ds := range []string{"l1", "l2"} {
		id := newUUID()
		stage(t, js, ds, id, mustMarshal(t, createTxn(id)))
		for range 4 {
			id := newUUID()
			stage(t, js, ds, id, mustMarshal(t, appendTxn(id, 1)))
		}
	}
	publishRaw(t, js, "cg.txn.*", newUUID(), []byte("stray"))
	waitDecided(t, js, "l1", 5, 20*time.Second)
	waitDecided(t, js, "l2", 5, 20*time.Second)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	natstest.CheckNoGoroutines(t, "cellguard/committer")
}
