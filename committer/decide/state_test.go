package decide

import (
	"testing"

	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// decideAll decides txns one by one, committing each, and mirrors every
// version into h.
func decideAll(t *testing.T, st *State, h *memHistory, txns ...*lancepb.Transaction) []Verdict {
	t.Helper()
	var out []Verdict
	for _, txn := range txns {
		m := st.Mark()
		seq := st.LastTxnSeq + 1
		v := st.Decide(t.Context(), Staged{Seq: seq, Data: mustMarshal(t, txn)})
		if v.Skip {
			out = append(out, v)
			continue
		}
		st.Commit(m, []*cellguardpb.Decision{v.Rec}, []uint64{seq})
		if v.Next != nil {
			h.Manifests[v.Next.Version()] = v.Next
			h.Txns[v.Next.Version()] = mustCommitted(t, v)
		}
		out = append(out, v)
	}
	return out
}

func TestStateWindowRetentionRollback(t *testing.T) {
	h := newMemHistory()
	st := NewState("ds", Limits{MaxTxnBytes: 1 << 20, Window: 2, Retain: 5, MaxLag: 100}, h)
	txns := []*lancepb.Transaction{createTxn(newUUID())}
	for v := uint64(1); v <= 8; v++ {
		txns = append(txns, appendTxn(newUUID(), v))
	}
	for i, v := range decideAll(t, st, h, txns...) {
		if v.Rec.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED {
			t.Fatalf("txn %d: %v", i, v.Rec)
		}
	}
	if got := st.HeadVersion(); got != 9 {
		t.Fatalf("head = %d, want 9", got)
	}
	if st.recent.len() > 2 || st.Txns.len() > 2 {
		t.Errorf("window holds %d manifests, %d txns; want ≤ 2", st.recent.len(), st.Txns.len())
	}
	// Read version 5 is outside the window but retained: pinned through
	// the older history, and it commits.
	vs := decideAll(t, st, h, appendTxn(newUUID(), 5))
	if r := vs[0].Rec; r.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED || r.Version != 10 {
		t.Errorf("read version 5: %v", r)
	}
	// Read version 2 is beyond retention (head 10, retain 5).
	vs = decideAll(t, st, h, appendTxn(newUUID(), 2))
	if r := vs[0].Rec; r.Reason != cellguardpb.Reason_READ_VERSION_TOO_OLD {
		t.Errorf("read version 2: %v, want READ_VERSION_TOO_OLD", r)
	}
	// A provisional batch rolled back leaves no trace.
	m := st.Mark()
	id := newUUID()
	v := st.Decide(t.Context(), Staged{Seq: st.LastTxnSeq + 1, Data: mustMarshal(t, appendTxn(id, 10))})
	if v.Next == nil || st.HeadVersion() != 11 || !st.Decided.Has(id) {
		t.Fatalf("provisional decision: %v", v.Rec)
	}
	st.Rollback(m)
	if st.HeadVersion() != 10 || st.Decided.Has(id) || st.VersionSeq.Top() != 10 {
		t.Errorf("after rollback: head %d, decided %v, index %d", st.HeadVersion(), st.Decided.Has(id), st.VersionSeq.Top())
	}
	// The same uuid decided again after rollback gets its decision once.
	again := decideAll(t, st, h, appendTxn(id, 10), appendTxn(id, 10))
	if again[0].Rec == nil || again[0].Rec.Version != 11 || !again[1].Skip {
		t.Errorf("decide after rollback: %v, then skip=%v", again[0].Rec, again[1].Skip)
	}
}

func TestIDSet(t *testing.T) {
	s := newIDSet()
	u := newUUID()
	for _, id := range []string{u, "seq-7", "ABCDEFAB-0000-4000-8000-000000000000"} {
		if s.Has(id) {
			t.Errorf("empty set has %q", id)
		}
		s.add(id)
		if !s.Has(id) {
			t.Errorf("set lacks %q after add", id)
		}
	}
	if s.Has("abcdefab-0000-4000-8000-000000000000") {
		t.Error("case-distinct ids collide")
	}
	s.remove(u)
	if s.Has(u) || s.len() != 2 {
		t.Errorf("after remove: has=%v len=%d", s.Has(u), s.len())
	}
}

// mustCommitted returns the transaction committed verdict v committed
// (verdict.CommittedTxn).
func mustCommitted(t testing.TB, v Verdict) *lancepb.Transaction {
	t.Helper()
	txn, err := v.CommittedTxn()
	if err != nil || txn == nil {
		t.Fatalf("committed transaction of %v: %v, %v", v.Rec, txn, err)
	}
	return txn
}
