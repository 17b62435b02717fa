package decide

import (
	"testing"

	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// TestDecideValidationHoles: appends of no fragments, of empty
// fragments or naming a field not in the schema, and restores to version 0
// or beyond head are decided as invalid transactions (never retryable),
// and the dataset keeps deciding.
func TestDecideValidationHoles(t *testing.T) {
	appendOf := func(frags ...*lancepb.DataFragment) *lancepb.Transaction {
		return &lancepb.Transaction{Uuid: newUUID(), ReadVersion: 1, Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{Fragments: frags}}}
	}
	restore := func(v uint64) *lancepb.Transaction {
		return &lancepb.Transaction{Uuid: newUUID(), ReadVersion: 1, Operation: &lancepb.Transaction_Restore_{Restore: &lancepb.Transaction_Restore{Version: v}}}
	}
	foreign := dataFragment("data/foreign.lance", 5)
	foreign.Files[0].Fields = []int32{0, 9}
	for _, c := range []struct {
		name string
		txn  *lancepb.Transaction
	}{
		{"append of no fragments", appendOf()},
		{"append of a fragment with no rows", appendOf(dataFragment("data/empty.lance", 0))},
		{"append naming a field not in the schema", appendOf(foreign)},
		{"restore to version 0", restore(0)},
		{"restore beyond head", restore(7)},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newMemHistory()
			st := NewState("ds", Limits{MaxTxnBytes: 1 << 20, Window: 4, MaxLag: 100}, h)
			vs := decideAll(t, st, h, createTxn(newUUID()), c.txn, appendTxn(newUUID(), 1))
			if r := vs[1].Rec; r.Outcome != cellguardpb.Outcome_OUTCOME_REJECTED || r.Reason != cellguardpb.Reason_INVALID_TRANSACTION {
				t.Fatalf("decision %v %v (%s); want REJECTED INVALID_TRANSACTION", r.Outcome, r.Reason, r.Message)
			}
			if r := vs[2].Rec; r.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED || r.Version != 2 {
				t.Fatalf("the valid transaction behind it: %v %v (%s)", r.Outcome, r.Reason, r.Message)
			}
		})
	}
}
