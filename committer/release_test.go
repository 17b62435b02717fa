package committer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"cellguard/internal/natstest"
)

// setUpCommitter returns a Committer whose streams are set up on url, as
// Run's setup leaves them, without running it: the test drives its
// partitions itself.
func setUpCommitter(t *testing.T, url string) *Committer {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := New(nc, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	return c
}

// stopWithin stops p and fails the test when stop panics or has not
// returned after a bound far above the few seconds a stop may take (a
// stop that blocks on a done channel nothing closes never returns).
func stopWithin(t *testing.T, p *partition, unpin bool) {
	t.Helper()
	res := make(chan any, 1)
	go func() {
		defer func() { res <- recover() }()
		p.stop(unpin)
	}()
	select {
	case r := <-res:
		if r != nil {
			t.Fatalf("stop(%v) of partition %s panicked: %v", unpin, p.name, r)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("stop(%v) of partition %s did not return", unpin, p.name)
	}
}

// TestPartitionStopInEveryState stops (and releases) a partition in each
// state it can be in when reassignment or shutdown reaches it: never
// started, its consumer never created because the creation failed, the
// server away before the creation, stopped while the creation is under
// way, and consuming. None may panic or block.
func TestPartitionStopInEveryState(t *testing.T) {
	srv := natstest.RunServer(t)
	c := setUpCommitter(t, srv.URL())
	n := c.partitionCount()
	var wg sync.WaitGroup
	defer wg.Wait()

	t.Run("never started", func(t *testing.T) {
		for _, unpin := range []bool{true, false} {
			stopWithin(t, newPartition(c, n, 0), unpin)
		}
	})
	t.Run("creation failed", func(t *testing.T) {
		// A partition of another count is looked up, never created: its
		// consumer does not exist, so every start fails.
		p := newPartition(c, n+1, 0)
		p.start(t.Context(), &wg)
		waitFor(t, "a failed start", func() bool { return p.failures.Load() > 0 })
		stopWithin(t, p, true)
	})
	t.Run("stop during start", func(t *testing.T) {
		p := newPartition(c, n+1, 1)
		p.start(t.Context(), &wg)
		stopWithin(t, p, true)
	})
	t.Run("consuming", func(t *testing.T) {
		p := newPartition(c, n, 2)
		p.start(t.Context(), &wg)
		waitFor(t, "consuming", p.consuming.Load)
		stopWithin(t, p, true)
	})
}

// TestReleaseWithServerAway has reconcile start partitions while the
// server is away, so that no consumer is ever created, and then release
// them (as a change of the assignment does when the server comes back).
func TestReleaseWithServerAway(t *testing.T) {
	srv := natstest.RunServer(t)
	c := setUpCommitter(t, srv.URL())
	srv.Shutdown()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	c.reconcile(ctx)
	c.partMu.Lock()
	started := len(c.parts)
	c.gens = nil // nothing assigned any more: every partition is released
	c.partMu.Unlock()
	if started == 0 {
		t.Fatal("reconcile started no partition")
	}
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		c.reconcile(ctx)
	}()
	select {
	case r := <-done:
		if r != nil {
			t.Fatalf("reconcile releasing %d partitions without consumers panicked: %v", started, r)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("reconcile releasing %d partitions without consumers did not return", started)
	}
	if n := len(c.parts); n != 0 {
		t.Fatalf("after the release %d partitions remain; want 0", n)
	}
	c.stopPartitions()
	c.wg.Wait()
}
