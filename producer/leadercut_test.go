package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"cellguard/committer"
	"cellguard/internal/natstest"
	"cellguard/producer"
	"cellguard/table"
	"cellguard/table/data"
)

// TestOutcomeWhileStagingLeaderIsCut stages a transaction while the
// staging stream's leader has lost its routes to the other nodes (they
// are down: the leader stays leader for a while, without a quorum). Its
// publish is stored nowhere yet, and the retry is answered "duplicate
// message id is in process" (10158). Neither Commit nor Outcome may then
// answer ErrNotStaged: when the routes come back within the leader's
// lost-quorum interval, the leader replicates the proposal and the
// transaction commits.
func TestOutcomeWhileStagingLeaderIsCut(t *testing.T) {
	cl := natstest.RunCluster(t, 3)
	root := t.TempDir()
	cfg := committerConfig(root)
	cfg.Replicas = 3
	stop := runCommitter(t, cl.URLs(), cfg)
	defer stop()

	leader := cl.WaitStreamLeader(t, "CG_TXN")
	moveStreamLeader(t, cl, "CG_DEC", leader)
	nc, _ := natstest.Connect(t, leader.URL())
	c, err := producer.New(nc, producer.Config{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := data.Open(t.Context(), root+"/ds")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A cluster just formed, its leaders just moved, may time requests
	// out for a while: set up with retries.
	schema, err := table.NewSchema(fields)
	if err != nil {
		t.Fatal(err)
	}
	f, err := s.WriteFragment(t.Context(), schema, map[int32]arrow.Array{0: int64s(1, 2)})
	if err != nil {
		t.Fatal(err)
	}
	createTxn := producer.Create("ds", fields, f)
	var snap *producer.Snapshot
	settle(t, func(ctx context.Context) (err error) {
		if _, err = c.Commit(ctx, createTxn); err == nil { // the same Txn again: safe
			snap, err = c.Latest(ctx, "ds")
		}
		return err
	})
	txn := yTxn(t, s, snap, 0)

	var others []*natstest.Server
	for _, srv := range cl.Servers {
		if srv != leader {
			others = append(others, srv)
		}
	}
	for _, srv := range others {
		srv.Stop()
	}
	// Long enough for a first attempt to time out and a second to be
	// answered "in process"; short enough for the leader to keep its
	// leadership until the routes are back.
	cctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
	_, commitErr := c.Commit(cctx, txn)
	cancel()
	octx, cancel := context.WithTimeout(t.Context(), time.Second)
	_, outcomeErr := c.Outcome(octx, "ds", txn.ID(), txn.ReadVersion())
	cancel()
	for _, srv := range others {
		srv.Restart(t)
	}
	t.Logf("with the leader cut: Commit: %v; Outcome: %v", commitErr, outcomeErr)

	// As a worker does: ask again while the outcome is unknown.
	fctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	v, finalErr := c.Outcome(fctx, "ds", txn.ID(), txn.ReadVersion())
	for errors.Is(finalErr, producer.ErrOutcomeUnknown) && fctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		v, finalErr = c.Outcome(fctx, "ds", txn.ID(), txn.ReadVersion())
	}
	t.Logf("after the routes are back: Outcome = %d, %v", v, finalErr)
	for _, e := range []struct {
		call string
		err  error
	}{{"Commit", commitErr}, {"Outcome", outcomeErr}} {
		if errors.Is(e.err, producer.ErrNotStaged) {
			if finalErr == nil {
				t.Errorf("%s with the leader cut = %v; the transaction then committed as version %d", e.call, e.err, v)
			} else {
				t.Errorf("%s with the leader cut = %v; want ErrOutcomeUnknown", e.call, e.err)
			}
		} else if !errors.Is(e.err, producer.ErrOutcomeUnknown) {
			t.Errorf("%s with the leader cut = %v; want ErrOutcomeUnknown", e.call, e.err)
		}
	}
	switch {
	case finalErr == nil:
		if v != snap.Version()+1 {
			t.Errorf("committed as version %d; want %d", v, snap.Version()+1)
		}
	case errors.Is(finalErr, producer.ErrNotStaged):
		// Only right when the proposal was lost with the leadership:
		// then nothing of the transaction may commit, however long one
		// waits for its decision.
		for decisionsFor(t, c, "ds", txn.ID()) == 0 && fctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
		head, err := c.Latest(t.Context(), "ds")
		if err != nil {
			t.Fatal(err)
		}
		if head.Version() != snap.Version() {
			t.Errorf("Outcome answered ErrNotStaged, yet the head moved from %d to %d", snap.Version(), head.Version())
		}
	default:
		t.Errorf("Outcome after the routes are back = %v; want the decision", finalErr)
	}
	// The scan may be served by a replica behind: wait for it to have
	// the decision, then count.
	n := decisionsFor(t, c, "ds", txn.ID())
	for n == 0 && fctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		n = decisionsFor(t, c, "ds", txn.ID())
	}
	if n != 1 {
		t.Errorf("%d decisions for %s; want 1", n, txn.ID())
	}
}

// TestWithdrawnNeverCommits has Outcome withdraw a transaction that was
// never staged, then stages it: it does not commit, and committing it
// again answers ErrNotStaged.
func TestWithdrawnNeverCommits(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	c, _ := e.client(t)
	s := e.store(t, "ds")
	create(t, c, s, "ds", []int64{1, 2}, []int64{3})
	snap, err := c.Latest(ctx, "ds")
	if err != nil {
		t.Fatal(err)
	}
	txn := yTxn(t, s, snap, 0)
	if _, err := c.Outcome(ctx, "ds", txn.ID(), txn.ReadVersion()); !errors.Is(err, producer.ErrNotStaged) {
		t.Fatalf("Outcome(never staged) = %v; want ErrNotStaged", err)
	}
	if v, err := c.Commit(ctx, txn); !errors.Is(err, producer.ErrNotStaged) {
		t.Fatalf("Commit(withdrawn) = %d, %v; want ErrNotStaged", v, err)
	}
	if _, err := c.Outcome(ctx, "ds", txn.ID(), txn.ReadVersion()); !errors.Is(err, producer.ErrNotStaged) {
		t.Fatalf("Outcome(withdrawn) = %v; want ErrNotStaged", err)
	}
	head, err := c.Latest(ctx, "ds")
	if err != nil {
		t.Fatal(err)
	}
	if head.Version() != snap.Version() {
		t.Errorf("head %d after a withdrawn commit; want %d", head.Version(), snap.Version())
	}
	if n := decisionsFor(t, c, "ds", txn.ID()); n != 1 {
		t.Errorf("%d decisions for %s; want 1", n, txn.ID())
	}
}

// settle runs fn until it succeeds, for 30 s at most.
func settle(t *testing.T, fn func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, 5*time.Second)
		err := fn(actx)
		acancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("setting up: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runCommitter runs a committer on urls until the returned func is called.
func runCommitter(t *testing.T, urls string, cfg committer.Config) func() {
	t.Helper()
	nc, _ := natstest.Connect(t, urls)
	cm, err := committer.New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cm.Run(ctx) }()
	for !cm.Ready() {
		select {
		case err := <-done:
			t.Fatalf("committer: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("committer: %v", err)
		}
	}
}

// moveStreamLeader makes to the leader of stream (a step-down with to
// preferred, repeated until it took).
func moveStreamLeader(t *testing.T, cl *natstest.Cluster, stream string, to *natstest.Server) {
	t.Helper()
	nc, _ := natstest.Connect(t, cl.URLs())
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": to.Name()}})
	deadline := time.Now().Add(30 * time.Second)
	for cl.StreamLeader(stream) != to {
		if time.Now().After(deadline) {
			t.Fatalf("%s's leader did not move to %s", stream, to.Name())
		}
		if l := cl.StreamLeader(stream); l != nil {
			_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, req, 2*time.Second)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
