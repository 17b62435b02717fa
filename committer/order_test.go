package committer

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
	"cellguard/internal/subject"
)

// orderWorker stages txns on ds and returns a loaded worker (not running)
// with the staged messages fetched from its consumer, in stream order.
func orderWorker(t *testing.T, ds string, bodies [][]byte, ids []string) (*worker, []jetstream.Msg, jetstream.JetStream) {
	t.Helper()
	srv := runServer(t)
	nc, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	ensureStreamsFor(t, js, cfg)
	for i := range bodies {
		stage(t, js, ds, ids[i], bodies[i])
	}
	c, err := New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.openStreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	w := newWorker(c, ds)
	if err := w.load(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.cp = newCheckpointer(c, ds)
	t.Cleanup(w.cp.close)
	if err := w.ensureConsumer(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.stopConsume)
	res, err := w.cons.Fetch(len(bodies), jetstream.FetchMaxWait(2*time.Second), jetstream.FetchPriorityGroup(subject.PriorityGroup))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range res.Messages() {
		msgs = append(msgs, m)
	}
	return w, msgs, js
}

// TestBatchOutOfStreamOrder: after a consumer leader change the server
// redelivered 4..18 before 1..3 in one batch; deciding the batch in
// arrival order skipped 1..3 as "at or below the last decided sequence"
// and acked them without a decision.
func TestBatchOutOfStreamOrder(t *testing.T) {
	ds := "unordered"
	ids := []string{newUUID(), newUUID(), newUUID()}
	bodies := [][]byte{mustMarshal(t, createTxn(ids[0])), mustMarshal(t, appendTxn(ids[1], 1)), mustMarshal(t, appendTxn(ids[2], 1))}
	w, msgs, js := orderWorker(t, ds, bodies, ids)
	if len(msgs) != 3 {
		t.Fatalf("fetched %d messages, want 3", len(msgs))
	}
	batch := []jetstream.Msg{msgs[1], msgs[2], msgs[0]}
	if err := w.process(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	l := waitDecided(t, js, ds, 3, 5*time.Second)
	checkLog(t, l, ids)
}

// TestBatchWithInteriorGap: a batch whose members skip an undecided
// message (its delivery was lost; it comes back later) must not be
// decided: the skipped message would be acked without a decision later.
func TestBatchWithInteriorGap(t *testing.T) {
	ds := "holey"
	ids := []string{newUUID(), newUUID(), newUUID()}
	bodies := [][]byte{mustMarshal(t, createTxn(ids[0])), mustMarshal(t, appendTxn(ids[1], 1)), mustMarshal(t, appendTxn(ids[2], 1))}
	w, msgs, js := orderWorker(t, ds, bodies, ids)
	if len(msgs) != 3 {
		t.Fatalf("fetched %d messages, want 3", len(msgs))
	}
	w.in = make(chan jetstream.Msg, 16)
	// The delivery of msgs[1] was "lost"; 0 and 2 arrive.
	if err := w.process(t.Context(), []jetstream.Msg{msgs[0], msgs[2]}); err != nil {
		t.Fatal(err)
	}
	if l := readLog(t, js, ds); len(l) != 0 {
		t.Fatalf("%d decisions appended across a gap, want 0 (redelivery in order)", len(l))
	}
	if !w.needGap {
		t.Error("needGap not set after a gap")
	}
}
