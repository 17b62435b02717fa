package committer

import (
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
	"context"
	"testing"
)

// Helpers shared with the decision core's tests (committer/decide).

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
		m := st.Mark()
		seq := st.LastTxnSeq + 1
		v := st.Decide(t.Context(), staged{Seq: seq, Data: mustMarshal(t, txn)})
		if v.Skip {
			out = append(out, v)
			continue
		}
		st.Commit(m, []*cellguardpb.Decision{v.Rec}, []uint64{seq})
		if v.Next != nil {
			h.ms[v.Next.Version()] = v.Next
			h.txns[v.Next.Version()] = mustCommitted(t, v)
		}
		out = append(out, v)
	}
	return out
}

// mustCommitted returns the transaction committed verdict v committed
// (verdict.CommittedTxn).
func mustCommitted(t testing.TB, v verdict) *lancepb.Transaction {
	t.Helper()
	txn, err := v.CommittedTxn()
	if err != nil || txn == nil {
		t.Fatalf("committed transaction of %v: %v, %v", v.Rec, txn, err)
	}
	return txn
}
