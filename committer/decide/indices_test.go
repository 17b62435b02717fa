package decide

import (
	"testing"

	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// TestIndexNeverBlocksOrIsBlamed: an index changes no cell. A
// transaction whose precondition names the cells a concurrent CreateIndex
// indexed commits; a CreateIndex decided after a concurrent append and a
// precondition-carrying transaction commits too; each committed version
// carries the index section Apply built.
func TestIndexNeverBlocksOrIsBlamed(t *testing.T) {
	h := newMemHistory()
	st := NewState("ds", Limits{MaxTxnBytes: 1 << 20, Window: 8, MaxLag: 100}, h)
	guarded := appendTxn(newUUID(), 1)
	guarded.Preconditions = []*lancepb.Precondition{cellsUnchanged([]int32{1}, wholeFragment(0))}
	late := indexTxn(t, newUUID(), 1)
	late.GetCreateIndex().NewIndices[0].Uuid = &lancepb.UUID{Uuid: []byte("late-index-uuid!")}
	late.GetCreateIndex().NewIndices[0].Name = "y_idx"
	vs := decideAll(t, st, h, createTxn(newUUID()), indexTxn(t, newUUID(), 1), guarded, appendTxn(newUUID(), 1), late)
	for i, v := range vs {
		if v.Rec.GetOutcome() != cellguardpb.Outcome_OUTCOME_COMMITTED {
			t.Fatalf("txn %d: %s %s (%s)", i, v.Rec.GetOutcome(), v.Rec.GetReason(), v.Rec.GetMessage())
		}
	}
	for v, want := range map[uint64][]string{1: nil, 2: {"x_idx"}, 3: {"x_idx"}, 4: {"x_idx"}, 5: {"x_idx", "y_idx"}} {
		var got []string
		for _, ix := range h.Manifests[v].Indices() {
			got = append(got, ix.GetName())
		}
		if len(got) != len(want) || (len(want) > 0 && (got[0] != want[0] || got[len(got)-1] != want[len(want)-1])) {
			t.Errorf("version %d: indices %v, want %v", v, got, want)
		}
	}
}
