package committer

import (
	"testing"
	"time"

	"cellguard/internal/natstest"
	"cellguard/proto/cellguardpb"
)

func TestCommitSequence(t *testing.T) {
	srv := runServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	r := start(t, srv.URL(), cfg)
	ds := "orders"
	ids := []string{newUUID()}
	stage(t, js, ds, ids[0], mustMarshal(t, createTxn(ids[0])))
	for v := uint64(1); v <= 30; v++ {
		id := newUUID()
		ids = append(ids, id)
		stage(t, js, ds, id, mustMarshal(t, appendTxn(id, v)))
	}
	l := waitDecided(t, js, ds, len(ids), 10*time.Second)
	head := checkLog(t, l, ids)
	// appendTxn(id, v) reads version v: each append after the first
	// conflicts under the stand-in rules or commits under real ones; either
	// way every txn has a decision. The first two always commit.
	if l[0].rec.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED || l[1].rec.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED {
		t.Fatalf("first decisions = %v, %v", l[0].rec, l[1].rec)
	}
	if head == nil || head.Version() < 2 {
		t.Fatalf("head = %v", head)
	}
	// Restart: state comes back from checkpoint + log; a republish of a
	// decided uuid gets no second decision.
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	r = start(t, srv.URL(), cfg)
	// A decided uuid republished without a message id reaches the
	// committer and gets no second decision.
	if _, err := js.Publish(t.Context(), "cg.txn."+ds, mustMarshal(t, appendTxn(ids[3], 1))); err != nil {
		t.Fatal(err)
	}
	next := newUUID()
	stage(t, js, ds, next, mustMarshal(t, appendTxn(next, head.Version())))
	ids = append(ids, next)
	l = waitDecided(t, js, ds, len(ids), 10*time.Second)
	checkLog(t, l, ids)
	last := l[len(l)-1].rec
	if last.TxnUuid != next || last.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED || last.Version != head.Version()+1 {
		t.Errorf("after restart: last decision = %v, want %s committed at %d", last, next, head.Version()+1)
	}
}
