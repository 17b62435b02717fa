package committer

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
	"cellguard/internal/subject"
)

// TestAnnouncementsGoOnWhileTakingOver: a takeover stuck on the server
// (requests for a consumer that is gone go unanswered on a cluster) must
// not stop the committer's announcements. Silent, it would be taken for
// dead by the others, who would take its partitions, and a committer
// joining then would take every partition.
func TestAnnouncementsGoOnWhileTakingOver(t *testing.T) {
	srv := natstest.RunServer(t)
	release := make(chan struct{})
	var stuck atomic.Int32
	cfg := testConfig()
	cfg.takeOverHook = func() {
		stuck.Add(1)
		<-release
	}
	r := start(t, srv.URL(), cfg)
	defer close(release) // before the committer stops (cleanups run after)
	var heard atomic.Int32
	sub, err := r.nc.Subscribe(subject.Scheme{}.Beacon(), func(*nats.Msg) { heard.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	deadline := time.Now().Add(10 * time.Second)
	for stuck.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the takeover never looked")
		}
		time.Sleep(10 * time.Millisecond)
	}
	heard.Store(0)
	time.Sleep(6 * beaconEvery)
	if n := heard.Load(); n < 3 {
		t.Fatalf("%d announcements in %v with the takeover stuck, want one every %v", n, 6*beaconEvery, beaconEvery)
	}
}

// TestResetOfARetiredConsumerOnACluster: on a 3-node cluster, resetting
// a partition consumer that no longer exists (one of an earlier
// partition count, retired) reports ErrConsumerNotFound instead of
// waiting for an answer no server sends.
func TestResetOfARetiredConsumerOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster")
	}
	cl := natstest.StartCluster(t, 3)
	cfg := testConfig()
	cfg.Replicas = 3
	r := start(t, cl.URLs(), cfg)
	gone := r.c.sc.PartitionConsumer(64, 3) // the running count is 8
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.c.resetIfExists(ctx, gone); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("reset of %s: %v, want %v", gone, err, jetstream.ErrConsumerNotFound)
	}
	// A consumer that exists is reset (once it has a leader: a fresh
	// one's first requests may go unanswered).
	live := r.c.sc.PartitionConsumer(8, 0)
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		err := r.c.resetIfExists(rctx, live)
		rcancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("reset of a live partition: %v", err)
		}
	}
	// Why the lookup comes first: a reset alone is not answered.
	rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
	defer rcancel()
	_, err := r.c.txn.ResetConsumer(rctx, gone)
	t.Logf("a reset alone of a consumer that is gone: %v", err)
}
