package events_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/events"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
)

// TestRejectionFeedGoesOnPastAStalledConsumer: an ephemeral rejection
// feed whose consumer stops delivering while it still answers heartbeats
// (here: paused on the server for a minute, as a consumer can stall after
// a cluster node is lost) still gets the next rejection within seconds,
// from a new consumer.
func TestRejectionFeedGoesOnPastAStalledConsumer(t *testing.T) {
	e := newEnv(t)
	e.create(t, "ds", []int64{1})
	e.overlay(t, "ds", 0, 0, 5)
	q, err := events.NewRejections(e.conn(t), events.RejectionsConfig{Dataset: "ds"})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- q.Run(ctx, func(_ context.Context, r *events.Rejected) error {
			got <- r.TxnID
			return nil
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	_, js := natstest.Connect(t, e.srv.URL())
	var sc subject.Scheme
	feed := waitFeedConsumer(t, js, sc.Dec("ds", subject.Rejected))
	next := func(want string) {
		t.Helper()
		select {
		case id := <-got:
			if id != want {
				t.Fatalf("the feed delivered %s, want %s", id, want)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("the feed delivered nothing in 15 s; want %s", want)
		}
	}
	next(e.staleY(t, "ds", 1, 0).TxnID)
	if _, err := js.PauseConsumer(t.Context(), sc.DecStream(), feed, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	next(e.staleY(t, "ds", 1, 0).TxnID)
}

// waitFeedConsumer waits for a consumer of the decision stream that
// filters on filter and returns its name.
func waitFeedConsumer(t *testing.T, js jetstream.JetStream, filter string) string {
	t.Helper()
	var sc subject.Scheme
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		dec, err := js.Stream(ctx, sc.DecStream())
		if err == nil {
			infos := dec.ListConsumers(ctx)
			for info := range infos.Info() {
				if info.Config.FilterSubject == filter || slices.Contains(info.Config.FilterSubjects, filter) {
					cancel()
					return info.Name
				}
			}
		}
		cancel()
		if time.Now().After(deadline) {
			t.Fatalf("no consumer on %s: %v", filter, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
