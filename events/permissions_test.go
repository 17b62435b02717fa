package events_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/committer"
	"cellguard/events"
	"cellguard/internal/natstest"
	"cellguard/producer"
	"cellguard/table/data"
)

// The SDKs work with the permissions deploy/nats/accounts.conf gives the
// worker role: stage and commit, read versions, look up a lost outcome,
// follow versions, and serve the rejection queue.
func TestWorkerRoleCanUseTheSDKs(t *testing.T) {
	roles := natstest.RunWithAccounts(t, "../deploy/nats/accounts.conf")
	connect := func(user string) *nats.Conn { return roles.Connect(t, user) }
	cm, err := committer.New(connect("committer"), committer.Config{Logger: testLogger(), DiscoverEvery: 20 * time.Millisecond, CheckpointEvery: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cm.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for !cm.Ready() {
		time.Sleep(5 * time.Millisecond)
	}

	e := &env{}
	wnc := connect("worker")
	if e.c, err = producer.New(wnc, producer.Config{Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	defer e.c.Close()
	if e.store, err = data.Open(t.Context(), "mem://"); err != nil {
		t.Fatal(err)
	}
	defer e.store.Close()
	e.create(t, "ds", []int64{1, 2, 3})
	e.overlay(t, "ds", 0, 0, 10)
	e.overlay(t, "ds", 0, 1, 20) // a checkpoint exists now
	rej := e.staleY(t, "ds", 1, 0)
	if _, err := e.c.Outcome(t.Context(), "ds", rej.TxnID, 1); err == nil || !strings.Contains(err.Error(), "PRECONDITION_FAILED") {
		t.Errorf("worker: Outcome(rejected) = %v, want the rejection", err)
	}
	if _, err := e.c.Outcome(t.Context(), "ds", "never-staged", 1); err == nil || !strings.Contains(err.Error(), producer.ErrNotStaged.Error()) {
		t.Errorf("worker: Outcome(never staged) = %v, want ErrNotStaged", err)
	}
	if _, err := e.c.At(t.Context(), "ds", 2); err != nil {
		t.Errorf("worker: At(2): %v", err)
	}

	for _, user := range []string{"worker", "reader"} {
		sub, err := events.NewSubscriber(connect(user), events.Config{Dataset: "ds", From: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got := collect(t, sub, 3, nil); len(got) != 3 {
			t.Errorf("%s: subscriber got %d versions", user, len(got))
		}
	}
	q, err := events.NewRejections(connect("worker"), events.RejectionsConfig{Dataset: "ds", Queue: "recompute", FromStart: true})
	if err != nil {
		t.Fatal(err)
	}
	qctx, qcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer qcancel()
	handled := make(chan struct{}, 1)
	go func() {
		<-handled
		// The ack went through: nothing is left pending on the queue.
		for qctx.Err() == nil {
			cons, err := wnc2js(t, wnc).Consumer(qctx, "CG_DEC", "recompute")
			if err == nil {
				if info, err := cons.Info(qctx); err == nil && info.NumAckPending == 0 && info.NumPending == 0 {
					qcancel()
					return
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	err = q.Run(qctx, func(_ context.Context, r *events.Rejected) error {
		handled <- struct{}{}
		return nil
	})
	if err != nil || context.Cause(qctx) != context.Canceled {
		t.Errorf("worker: rejection queue: %v, %v (want handled and acknowledged)", err, context.Cause(qctx))
	}
}

func wnc2js(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
