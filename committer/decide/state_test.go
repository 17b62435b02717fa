package decide

import (
	"context"
	"testing"

	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// memHistory serves versions outside a state's window from a full copy.
type memHistory struct {
	ms   map[uint64]*table.Manifest
	txns map[uint64]*lancepb.Transaction
}

func (h *memHistory) Manifest(_ context.Context, v uint64) (*table.Manifest, error) {
	if m, ok := h.ms[v]; ok {
		return m, nil
	}
	return nil, table.ErrVersionNotFound
}

func (h *memHistory) Committed(_ context.Context, v uint64) (*lancepb.Transaction, error) {
	if t, ok := h.txns[v]; ok {
		return t, nil
	}
	return nil, table.ErrVersionNotFound
}

// decideAll decides txns one by one, committing each, and mirrors every
// version into h.
func decideAll(t *testing.T, st *state, h *memHistory, txns ...*lancepb.Transaction) []verdict {
	t.Helper()
	var out []verdict
	for _, txn := range txns {
		m := st.mark()
		seq := st.lastTxnSeq + 1
		v := st.decide(t.Context(), staged{seq: seq, data: mustMarshal(t, txn)})
		if v.skip {
			out = append(out, v)
			continue
		}
		st.commit(m, []*cellguardpb.Decision{v.rec}, []uint64{seq})
		if v.next != nil {
			h.ms[v.next.Version()] = v.next
			h.txns[v.next.Version()] = mustCommitted(t, v)
		}
		out = append(out, v)
	}
	return out
}

func TestStateWindowRetentionRollback(t *testing.T) {
	h := &memHistory{ms: map[uint64]*table.Manifest{}, txns: map[uint64]*lancepb.Transaction{}}
	st := newState("ds", limits{maxTxnBytes: 1 << 20, window: 2, retain: 5, maxLag: 100}, h)
	txns := []*lancepb.Transaction{createTxn(newUUID())}
	for v := uint64(1); v <= 8; v++ {
		txns = append(txns, appendTxn(newUUID(), v))
	}
	for i, v := range decideAll(t, st, h, txns...) {
		if v.rec.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED {
			t.Fatalf("txn %d: %v", i, v.rec)
		}
	}
	if got := st.headVersion(); got != 9 {
		t.Fatalf("head = %d, want 9", got)
	}
	if st.recent.len() > 2 || st.txns.len() > 2 {
		t.Errorf("window holds %d manifests, %d txns; want ≤ 2", st.recent.len(), st.txns.len())
	}
	// Read version 5 is outside the window but retained: pinned through
	// the older history, and it commits.
	vs := decideAll(t, st, h, appendTxn(newUUID(), 5))
	if r := vs[0].rec; r.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED || r.Version != 10 {
		t.Errorf("read version 5: %v", r)
	}
	// Read version 2 is beyond retention (head 10, retain 5).
	vs = decideAll(t, st, h, appendTxn(newUUID(), 2))
	if r := vs[0].rec; r.Reason != cellguardpb.Reason_READ_VERSION_TOO_OLD {
		t.Errorf("read version 2: %v, want READ_VERSION_TOO_OLD", r)
	}
	// A provisional batch rolled back leaves no trace.
	m := st.mark()
	id := newUUID()
	v := st.decide(t.Context(), staged{seq: st.lastTxnSeq + 1, data: mustMarshal(t, appendTxn(id, 10))})
	if v.next == nil || st.headVersion() != 11 || !st.decided.has(id) {
		t.Fatalf("provisional decision: %v", v.rec)
	}
	st.rollback(m)
	if st.headVersion() != 10 || st.decided.has(id) || st.versionSeq.top() != 10 {
		t.Errorf("after rollback: head %d, decided %v, index %d", st.headVersion(), st.decided.has(id), st.versionSeq.top())
	}
	// The same uuid decided again after rollback gets its decision once.
	again := decideAll(t, st, h, appendTxn(id, 10), appendTxn(id, 10))
	if again[0].rec == nil || again[0].rec.Version != 11 || !again[1].skip {
		t.Errorf("decide after rollback: %v, then skip=%v", again[0].rec, again[1].skip)
	}
}

func TestIDSet(t *testing.T) {
	s := newIDSet()
	u := newUUID()
	for _, id := range []string{u, "seq-7", "ABCDEFAB-0000-4000-8000-000000000000"} {
		if s.has(id) {
			t.Errorf("empty set has %q", id)
		}
		s.add(id)
		if !s.has(id) {
			t.Errorf("set lacks %q after add", id)
		}
	}
	if s.has("abcdefab-0000-4000-8000-000000000000") {
		t.Error("case-distinct ids collide")
	}
	s.remove(u)
	if s.has(u) || s.len() != 2 {
		t.Errorf("after remove: has=%v len=%d", s.has(u), s.len())
	}
}

// mustCommitted returns the transaction committed verdict v committed
// (verdict.committedTxn).
func mustCommitted(t testing.TB, v verdict) *lancepb.Transaction {
	t.Helper()
	txn, err := v.committedTxn()
	if err != nil || txn == nil {
		t.Fatalf("committed transaction of %v: %v, %v", v.rec, txn, err)
	}
	return txn
}
