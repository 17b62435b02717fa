package committer

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
	"cellguard/internal/subject"
)

// orderWorker stages txns on ds and returns a loaded worker (not
// running) with the staged messages fetched from its partition's
// consumer, in stream order, as items.
func orderWorker(t *testing.T, ds string, bodies [][]byte, ids []string) (*worker, []item, jetstream.JetStream) {
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
	if err := c.ensurePartitioned(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.cpw = newCheckpointWriter(c)
	t.Cleanup(c.cpw.close)
	w := newWorker(c, ds)
	if err := w.load(t.Context()); err != nil {
		t.Fatal(err)
	}
	n := c.partitionCount()
	cons, err := c.txn.CreateOrUpdateConsumer(t.Context(), partitionConsumerConfig(c.cfg, c.sc, n, subject.Partition(ds, n)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := cons.Fetch(len(bodies), jetstream.FetchMaxWait(2*time.Second), jetstream.FetchPriorityGroup(subject.PriorityGroup))
	if err != nil {
		t.Fatal(err)
	}
	var items []item
	for m := range res.Messages() {
		md, err := m.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, item{staged: staged{Seq: md.Sequence.Stream, Data: m.Data(), MsgID: m.Headers().Get(subject.HdrMsgID), Header: m.Headers()},
			ds: ds, stamp: md.Timestamp, msg: m})
	}
	return w, items, js
}

// TestBatchOutOfStreamOrder: after a consumer leader change the server
// redelivered 4..18 before 1..3 in one batch; deciding the batch in
// arrival order skipped 1..3 as "at or below the last decided sequence"
// and acked them without a decision. The partition sorts each dataset's
// messages (byDataset) before its worker sees them.
func TestBatchOutOfStreamOrder(t *testing.T) {
	ds := "unordered"
	ids := []string{newUUID(), newUUID(), newUUID()}
	bodies := [][]byte{mustMarshal(t, createTxn(ids[0])), mustMarshal(t, appendTxn(ids[1], 1)), mustMarshal(t, appendTxn(ids[2], 1))}
	w, items, js := orderWorker(t, ds, bodies, ids)
	if len(items) != 3 {
		t.Fatalf("fetched %d messages, want 3", len(items))
	}
	groups := byDataset([]item{items[1], items[2], items[0]})
	if len(groups) != 1 {
		t.Fatalf("%d groups, want 1", len(groups))
	}
	if err := w.process(t.Context(), groups[0]); err != nil {
		t.Fatal(err)
	}
	l := waitDecided(t, js, ds, 3, 5*time.Second)
	checkLog(t, l, ids)
}

// TestBatchWithInteriorGap: a batch whose members skip an undecided
// message (its delivery was lost, or went to another committer) must not
// skip it: the skipped message would be acked without a decision later.
// The worker reads it from the stream and decides it first, in order,
// then removes it from CG_TXN.
func TestBatchWithInteriorGap(t *testing.T) {
	ds := "holey"
	ids := []string{newUUID(), newUUID(), newUUID()}
	bodies := [][]byte{mustMarshal(t, createTxn(ids[0])), mustMarshal(t, appendTxn(ids[1], 1)), mustMarshal(t, appendTxn(ids[2], 1))}
	w, items, js := orderWorker(t, ds, bodies, ids)
	if len(items) != 3 {
		t.Fatalf("fetched %d messages, want 3", len(items))
	}
	// The delivery of items[1] was "lost"; 0 and 2 arrive.
	if err := w.process(t.Context(), []item{items[0], items[2]}); err != nil {
		t.Fatal(err)
	}
	l := waitDecided(t, js, ds, 3, 5*time.Second)
	checkLog(t, l, ids)
	txn, err := js.Stream(t.Context(), "CG_TXN")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := txn.GetMsg(t.Context(), items[1].Seq); err == nil {
		t.Error("the message read to close the gap is still staged after its decision")
	}
}
