package committer

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
)

// loadGen stages a creation and then n appends from a goroutine, retrying
// each publish (same message id) until it lands. It returns the uuids once
// all are staged.
func loadGen(t *testing.T, js jetstream.JetStream, ds string, n int, every time.Duration) func() []string {
	ids := []string{newUUID()}
	stage(t, js, ds, ids[0], mustMarshal(t, createTxn(ids[0])))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			id := newUUID()
			// Read a recent version, as a producer would; some read
			// versions are ahead of the head and get rejected, which
			// is fine: every uuid still gets exactly one decision.
			stage(t, js, ds, id, mustMarshal(t, appendTxn(id, uint64(1+i*3/4))))
			ids = append(ids, id)
			time.Sleep(every)
		}
	}()
	return func() []string { wg.Wait(); return ids }
}

// TestNATSRestartDuringLoad restarts the (file-store) server while
// transactions are being staged and decided.
func TestNATSRestartDuringLoad(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	ensureStreamsFor(t, js, cfg)
	start(t, srv.URL(), cfg)
	ds := "restart"
	wait := loadGen(t, js, ds, 300, time.Millisecond)
	time.Sleep(150 * time.Millisecond)
	srv.Restart(t)
	ids := wait()
	l := waitDecided(t, js, ds, len(ids), 30*time.Second)
	checkLog(t, l, ids)
	if len(l) != len(ids) {
		t.Errorf("%d decisions, want %d", len(l), len(ids))
	}
}

// TestClusterStreamLeaderKilled runs on a 3-node cluster with R3 streams
// and shuts down the decision log's stream leader during load.
func TestClusterStreamLeaderKilled(t *testing.T) {
	c := natstest.RunCluster(t, 3)
	_, js := natstest.Connect(t, c.URLs())
	cfg := testConfig()
	cfg.Replicas = 3
	ensureStreamsFor(t, js, cfg)
	start(t, c.URLs(), cfg)
	ds := "cluster"
	wait := loadGen(t, js, ds, 150, 2*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	leader := c.WaitStreamLeader(t, "CG_DEC")
	t.Logf("killing CG_DEC leader %s", leader.Name())
	leader.Stop()
	ids := wait()
	l := waitDecided(t, js, ds, len(ids), 60*time.Second)
	checkLog(t, l, ids)
	if len(l) != len(ids) {
		t.Errorf("%d decisions, want %d", len(l), len(ids))
	}
}
