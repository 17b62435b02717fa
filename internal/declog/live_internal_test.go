package declog

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// TestLiveScanGoesOnPastAStalledConsumer: a live scan whose consumer
// stops delivering while it still answers heartbeats (here: paused on the
// server for a minute) notices within seconds that the log holds a
// record it has not had, and goes on from a new consumer.
func TestLiveScanGoesOnPastAStalledConsumer(t *testing.T) {
	ctx := t.Context()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	sc, _ := subject.NewScheme("")
	dec, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: sc.DecStream(), Subjects: []string{sc.DecAll()}, AllowAtomicPublish: true})
	if err != nil {
		t.Fatal(err)
	}
	l := New(js, sc, dec, nil, Options{})
	ds := "live"
	rec := func(id string, seq uint64) []*cellguardpb.Decision {
		return []*cellguardpb.Decision{{Dataset: ds, TxnUuid: id, TxnSeq: seq, Outcome: cellguardpb.Outcome_OUTCOME_REJECTED, Reason: cellguardpb.Reason_PRECONDITION_FAILED}}
	}
	first, err := l.Append(ctx, ds, 0, rec("a", 1))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Record, 4)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for r, err := range l.Scan(sctx, sc.DecOf(ds), 1, ScanOptions{Live: true, HeadersOnly: true}) {
			if err != nil {
				return
			}
			got <- r
		}
	}()
	defer func() { cancel(); <-done }()
	next := func() Record {
		t.Helper()
		select {
		case r := <-got:
			return r
		case <-time.After(5 * time.Second):
			t.Fatalf("the live scan delivered nothing in 5 s (restarts: %d)", l.liveRestarts.Load())
		}
		return Record{}
	}
	if r := next(); r.TxnID != "a" {
		t.Fatalf("first record %+v", r)
	}
	var name string
	for n := range dec.ConsumerNames(ctx).Name() {
		name = n
	}
	if name == "" {
		t.Fatal("no consumer behind the live scan")
	}
	if _, err := js.PauseConsumer(ctx, sc.DecStream(), name, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, ds, first[0], rec("b", 2)); err != nil {
		t.Fatal(err)
	}
	if r := next(); r.TxnID != "b" {
		t.Fatalf("second record %+v", r)
	}
	if l.liveRestarts.Load() == 0 {
		t.Error("the record came without a restart: the pause did not stall the consumer")
	}
}

// TestLiveScanGoesOnPastAMalformedRecord: a live scan yields a malformed
// record's error and, when the caller goes on ranging, the records after
// it.
func TestLiveScanGoesOnPastAMalformedRecord(t *testing.T) {
	ctx := t.Context()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	sc, _ := subject.NewScheme("")
	dec, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: sc.DecStream(), Subjects: []string{sc.DecAll()}, AllowAtomicPublish: true})
	if err != nil {
		t.Fatal(err)
	}
	l := New(js, sc, dec, nil, Options{})
	ds := "live"
	if _, err := js.Publish(ctx, sc.Dec(ds, subject.Rejected), []byte("not a decision")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, ds, 1, []*cellguardpb.Decision{{Dataset: ds, TxnUuid: "b", TxnSeq: 2, Outcome: cellguardpb.Outcome_OUTCOME_REJECTED, Reason: cellguardpb.Reason_PRECONDITION_FAILED}}); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var got []string
	for r, err := range l.Scan(sctx, sc.DecOf(ds), 1, ScanOptions{Live: true}) {
		switch {
		case errors.Is(err, ErrMalformedRecord):
			got = append(got, "malformed")
			continue
		case err != nil:
			t.Fatalf("scan after %v: %v", got, err)
		}
		got = append(got, r.TxnID)
		break
	}
	if !slices.Equal(got, []string{"malformed", "b"}) {
		t.Errorf("live scan gave %v, want [malformed b]", got)
	}
}
