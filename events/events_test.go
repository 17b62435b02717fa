package events_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"cellguard/events"
	"cellguard/producer"
)

// collect runs sub until it has delivered n versions and returns them.
func collect(t *testing.T, sub *events.Subscriber, n int, during func(got int)) []*events.Committed {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var got []*events.Committed
	err := sub.Run(ctx, func(_ context.Context, c *events.Committed) error {
		got = append(got, c)
		if during != nil {
			during(len(got))
		}
		if len(got) == n {
			cancel()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(got) != n {
		t.Fatalf("got %d versions %v, want %d", len(got), versions(got), n)
	}
	return got
}

func versions(cs []*events.Committed) []uint64 {
	var vs []uint64
	for _, c := range cs {
		vs = append(vs, c.Version)
	}
	return vs
}

// A subscriber from version 1 replays the history, then gets new
// versions live, each with what it changed.
func TestSubscriberReplayThenLive(t *testing.T) {
	e := newEnv(t)
	e.create(t, "ds", []int64{1, 2, 3}, []int64{4})
	e.overlay(t, "ds", 1, 0, 40)
	sub, err := events.NewSubscriber(e.conn(t), events.Config{Dataset: "ds", From: 1})
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, sub, 4, func(n int) {
		if n == 2 { // history delivered: the next versions come live
			e.overlay(t, "ds", 0, 2, 30)
			snap, _ := e.c.Latest(t.Context(), "ds")
			txn := snap.NewTxn()
			if err := txn.DeleteRows(t.Context(), e.store, 0, 0, 1); err != nil {
				t.Error(err)
			}
			if _, err := e.c.Commit(t.Context(), txn); err != nil {
				t.Error(err)
			}
		}
	})
	if vs := versions(got); !slices.Equal(vs, []uint64{1, 2, 3, 4}) {
		t.Fatalf("versions %v, want [1 2 3 4]", vs)
	}
	for i, want := range []string{
		"+2 fragment(s), fields [0], +4 rows, schema changed",
		"~1 fragment(s) [1], fields [0]",
		"~1 fragment(s) [0], fields [0]",
		"~1 fragment(s) [0], -2 rows",
	} {
		if s := got[i].Summary.String(); s != want {
			t.Errorf("v%d summary %q, want %q", got[i].Version, s, want)
		}
	}
	if got[1].Op.String() != "DataOverlay" || got[3].Op.String() != "Delete" || got[1].Txn == nil || got[1].Previous != got[0].Manifest {
		t.Errorf("v2 op %v txn %v, v4 op %v; want DataOverlay, Delete and linked manifests", got[1].Op, got[1].Txn, got[3].Op)
	}
	if f := got[1].Summary.FragmentsWriting(0); !slices.Equal(f, []uint64{1}) {
		t.Errorf("v2 FragmentsWriting(x) = %v, want [1]", f)
	}
}

// From v starts at v; a durable subscriber resumes after the last version
// it handled.
func TestSubscriberFromAndDurable(t *testing.T) {
	e := newEnv(t)
	e.create(t, "ds", []int64{1, 2})
	for i := range 4 {
		e.overlay(t, "ds", 0, 0, int64(i))
	}
	sub, err := events.NewSubscriber(e.conn(t), events.Config{Dataset: "ds", From: 3})
	if err != nil {
		t.Fatal(err)
	}
	if vs := versions(collect(t, sub, 3, nil)); !slices.Equal(vs, []uint64{3, 4, 5}) {
		t.Errorf("From 3: versions %v, want [3 4 5]", vs)
	}

	durable, err := events.NewSubscriber(e.conn(t), events.Config{Dataset: "ds", From: 2, Durable: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	if vs := versions(collect(t, durable, 2, nil)); !slices.Equal(vs, []uint64{2, 3}) {
		t.Errorf("durable first run: versions %v, want [2 3]", vs)
	}
	e.overlay(t, "ds", 0, 1, 9)
	again, err := events.NewSubscriber(e.conn(t), events.Config{Dataset: "ds", From: 1, Durable: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, again, 3, nil)
	if vs := versions(got); !slices.Equal(vs, []uint64{4, 5, 6}) {
		t.Errorf("durable resumed: versions %v, want [4 5 6]", vs)
	}
	if got[0].Previous == nil || got[0].Previous.Version() != 3 {
		t.Errorf("resumed v4 has no previous manifest v3")
	}
}

// Each rejection goes to one worker of the pool; one a worker took and
// never answered (it died) goes to another worker after AckWait.
func TestRejectionQueueRedeliversWhenAWorkerDies(t *testing.T) {
	e := newEnv(t)
	e.create(t, "ds", []int64{1, 2}, []int64{3})
	cfg := events.RejectionsConfig{Dataset: "ds", Queue: "recompute", AckWait: time.Second}

	// Worker A takes the first rejection and dies holding it.
	ncA := e.conn(t)
	a, err := events.NewRejections(ncA, cfg)
	if err != nil {
		t.Fatal(err)
	}
	took := make(chan string, 1)
	doneA := make(chan error, 1)
	go func() {
		doneA <- a.Run(t.Context(), func(ctx context.Context, r *events.Rejected) error {
			took <- r.TxnID
			ncA.Close() // dies: no ack, and the nak cannot leave
			return errors.New("worker A is dead")
		})
	}()
	e.waitConsumer(t, cfg.Queue) // the queue delivers only what comes after it
	e.overlay(t, "ds", 0, 0, 10)
	first := e.staleY(t, "ds", 1, 0)
	var heldID string
	select {
	case heldID = <-took:
	case <-time.After(5 * time.Second):
		t.Fatal("worker A got no rejection")
	}
	if heldID != first.TxnID {
		t.Fatalf("worker A got %s, want %s", heldID, first.TxnID)
	}
	<-doneA

	// Workers B and C share the queue: B gets A's job again, and each new
	// rejection is handled by exactly one of them.
	e.overlay(t, "ds", 1, 0, 30)
	third := e.staleY(t, "ds", 2, 1)
	var mu sync.Mutex
	seen := map[string][]string{}
	deliveries := map[string]uint64{}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, name := range []string{"B", "C"} {
		q, err := events.NewRejections(e.conn(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := q.Run(ctx, func(_ context.Context, r *events.Rejected) error {
				mu.Lock()
				defer mu.Unlock()
				seen[r.TxnID] = append(seen[r.TxnID], name)
				deliveries[r.TxnID] = r.Delivery
				if len(seen) == 2 && len(seen[first.TxnID]) == 1 && len(seen[third.TxnID]) == 1 {
					cancel()
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if len(seen[first.TxnID]) != 1 || deliveries[first.TxnID] != 2 {
		t.Errorf("A's job %s: handled by %v on delivery %d; want one worker, delivery 2", first.TxnID, seen[first.TxnID], deliveries[first.TxnID])
	}
	if len(seen[third.TxnID]) != 1 || deliveries[third.TxnID] != 1 {
		t.Errorf("job %s: handled by %v on delivery %d; want one worker, delivery 1", third.TxnID, seen[third.TxnID], deliveries[third.TxnID])
	}
	for id, who := range seen {
		if len(who) != 1 {
			t.Errorf("job %s handled %d times (%v)", id, len(who), who)
		}
	}
}

// A handler error hands the rejection back; it comes again.
func TestRejectionQueueRetriesFailedHandler(t *testing.T) {
	e := newEnv(t)
	e.create(t, "ds", []int64{1})
	e.overlay(t, "ds", 0, 0, 5)
	q, err := events.NewRejections(e.conn(t), events.RejectionsConfig{Dataset: "ds", Queue: "q", FromStart: true, RetryDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rej := e.staleY(t, "ds", 1, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var got []uint64
	err = q.Run(ctx, func(_ context.Context, r *events.Rejected) error {
		if r.TxnID != rej.TxnID || !r.Err.Is(producer.ErrPreconditionFailed) || len(r.Err.Violations) == 0 {
			t.Errorf("rejected %+v, want %s with violations", r, rej.TxnID)
		}
		if txn, ok := r.Txn(); !ok || txn.GetUuid() != rej.TxnID || len(txn.GetPreconditions()) == 0 {
			t.Errorf("rejected record carries txn %v (ok %v), want the staged transaction %s", txn, ok, rej.TxnID)
		}
		got = append(got, r.Delivery)
		if r.Delivery < 3 {
			return fmt.Errorf("try again")
		}
		cancel()
		return nil
	})
	if err != nil || !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Errorf("Run = %v, deliveries %v; want [1 2 3]", err, got)
	}
}

// A rejection queue's Run rides through a restart of the server: its
// pull ends ("server shutdown") and starts again on the same durable, and
// a rejection decided after the restart reaches the worker: Run does not
// return the pull's error, so a worker calling it once (as the README
// does) goes on.
func TestRejectionQueueRidesThroughAServerRestart(t *testing.T) {
	e := newEnv(t)
	e.create(t, "ds", []int64{1, 2}, []int64{3})
	cfg := events.RejectionsConfig{Dataset: "ds", Queue: "rq", AckWait: 2 * time.Second}
	q, err := events.NewRejections(e.conn(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	ran := make(chan error, 1)
	go func() {
		ran <- q.Run(t.Context(), func(ctx context.Context, r *events.Rejected) error {
			got <- r.TxnID
			return nil
		})
	}()
	e.waitConsumer(t, cfg.Queue)
	e.srv.Restart(t)
	e.overlay(t, "ds", 0, 0, 10)
	want := e.staleY(t, "ds", 1, 0)
	select {
	case id := <-got:
		if id != want.TxnID {
			t.Errorf("got rejection %s, want %s", id, want.TxnID)
		}
	case err := <-ran:
		t.Fatalf("Run ended with the restart: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no rejection reached the worker after the restart")
	}
}
