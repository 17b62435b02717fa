package committer

import (
	"cellguard/internal/decidetest"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"testing"
)

// The helpers both packages' tests use, from internal/decidetest.
type (
	memHistory      = decidetest.MemHistory
	countingHistory = decidetest.CountingHistory
)

var (
	testSchema         = decidetest.Schema
	dataFragment       = decidetest.DataFragment
	createTxn          = decidetest.CreateTxn
	appendTxn          = decidetest.AppendTxn
	deleteFragmentTxn  = decidetest.DeleteFragmentTxn
	withPre            = decidetest.WithPre
	cellsUnchanged     = decidetest.CellsUnchanged
	wholeFragment      = decidetest.WholeFragment
	staleTxn           = decidetest.StaleTxn
	newUUID            = decidetest.NewUUID
	mustMarshal        = decidetest.MustMarshal
	newMemHistory      = decidetest.NewMemHistory
	newCountingHistory = decidetest.NewCountingHistory
)

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
			h.Manifests[v.Next.Version()] = v.Next
			h.Txns[v.Next.Version()] = mustCommitted(t, v)
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
