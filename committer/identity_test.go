package committer

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// TestAnonymousIdentityCannotBeForged: a transaction whose uuid is
// "seq-3" is staged at stream sequence 2, then id-less garbage lands at
// sequence 3, whose fallback identity is "seq-3". Were the reserved uuid
// accepted, the garbage would be acked with no decision; it is refused
// with a typed reason, and each message gets its own decision.
func TestAnonymousIdentityCannotBeForged(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	ensureStreamsFor(t, js, cfg)
	ds := "forge"
	var sc subject.Scheme
	create := newUUID()
	stage(t, js, ds, create, mustMarshal(t, createTxn(create))) // sequence 1
	forged := subject.AnonymousTxnID(3)
	stage(t, js, ds, forged, mustMarshal(t, appendTxn(forged, 1)))                     // sequence 2
	ack, err := js.Publish(t.Context(), sc.Txn(ds), []byte("\xff garbage with no id")) // sequence 3
	if err != nil {
		t.Fatal(err)
	}
	if ack.Sequence != 3 {
		t.Fatalf("garbage landed at sequence %d, the test needs 3", ack.Sequence)
	}
	start(t, srv.URL(), cfg)
	l := waitDecided(t, js, ds, 3, 20*time.Second)
	if len(l) != 3 {
		t.Fatalf("%d decisions, want 3", len(l))
	}
	ids := map[string]bool{}
	for i, want := range []uint64{1, 2, 3} {
		r := l[i].rec
		if r.TxnSeq != want {
			t.Errorf("decision %d decides sequence %d, want %d", i, r.TxnSeq, want)
		}
		if ids[r.TxnUuid] {
			t.Errorf("identity %q decided twice", r.TxnUuid)
		}
		ids[r.TxnUuid] = true
	}
	if r := l[1].rec; r.Reason != cellguardpb.Reason_INVALID_TRANSACTION || r.TxnUuid != subject.AnonymousTxnID(2) {
		t.Errorf("reserved uuid: %v %q (%s), want INVALID_TRANSACTION as %q", r.Reason, r.TxnUuid, r.Message, subject.AnonymousTxnID(2))
	}
	if r := l[2].rec; r.Reason != cellguardpb.Reason_INVALID_TRANSACTION || r.TxnUuid != subject.AnonymousTxnID(3) {
		t.Errorf("garbage: %v %q, want INVALID_TRANSACTION as %q", r.Reason, r.TxnUuid, subject.AnonymousTxnID(3))
	}
}

func TestValidTxnID(t *testing.T) {
	for id, ok := range map[string]bool{
		newUUID(): true, "job-7/run-3": true, "seq": true, "seqence-1": true,
		"": false, "seq-127": false, "SEQ-1": false, "Seq-": false, "has space": false, "naïve": false,
		fmt.Sprintf("%0129d", 0): false,
	} {
		err := subject.ValidTxnID(id)
		if (err == nil) != ok {
			t.Errorf("ValidTxnID(%q) = %v, want ok=%v", id, err, ok)
		}
		if err != nil && !errors.Is(err, subject.ErrInvalidTxnID) {
			t.Errorf("ValidTxnID(%q): %v does not wrap ErrInvalidTxnID", id, err)
		}
	}
}

// TestSameUUIDInTwoDatasets: a transaction uuid is an identity within
// its dataset, and the log deduplicates across datasets, so a record's
// Nats-Msg-Id names the dataset too. With the uuid alone, a second
// dataset deciding a uuid the first decided in the last ten minutes would
// have its append answered "duplicate", catch up, find nothing new, and
// try again forever, with every later transaction of that dataset behind
// it.
func TestSameUUIDInTwoDatasets(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	start(t, srv.URL(), cfg)
	var sc subject.Scheme
	for _, ds := range []string{"first", "second"} {
		id := newUUID()
		stage(t, js, ds, id, mustMarshal(t, createTxn(id)))
	}
	shared, after := newUUID(), newUUID()
	stage(t, js, "first", shared, mustMarshal(t, appendTxn(shared, 1)))
	waitDecided(t, js, "first", 2, 20*time.Second)
	// The staging stream deduplicates across datasets too, so the second
	// copy goes without a message id; the committer identifies it by the
	// uuid in its body.
	if _, err := js.Publish(t.Context(), sc.Txn("second"), mustMarshal(t, appendTxn(shared, 1))); err != nil {
		t.Fatal(err)
	}
	stage(t, js, "second", after, mustMarshal(t, appendTxn(after, 1)))
	l := waitDecided(t, js, "second", 3, 20*time.Second)
	for i, want := range []string{shared, after} {
		r := l[i+1].rec
		if r.TxnUuid != want || r.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED || r.Version != uint64(i+2) {
			t.Errorf("second dataset, decision %d: %s %v version %d (%s), want %s committed as version %d", i+2, r.TxnUuid, r.Outcome, r.Version, r.Message, want, i+2)
		}
	}
}
