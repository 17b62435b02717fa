package decide

import (
	"testing"

	"cellguard/internal/logrec"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// adoptionTxn stages the adoption of a Lance table at version v.
func adoptionTxn(t *testing.T, id string, v uint64) *lancepb.Transaction {
	t.Helper()
	zero := uint32(0)
	frag := dataFragment("data/adopted.lance", 50)
	m := &lancepb.Manifest{Fields: testSchema, Fragments: []*lancepb.DataFragment{frag}, Version: v, MaxFragmentId: &zero}
	txn := &lancepb.Transaction{Uuid: id, Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{Schema: testSchema}}}
	if err := logrec.SetConfig(txn, &cellguardpb.DatasetConfig{Location: "/tmp/adopted.lance"}); err != nil {
		t.Fatal(err)
	}
	if err := logrec.SetAdoption(txn, m, nil); err != nil {
		t.Fatal(err)
	}
	return txn
}

// TestAdoptionStartsAtLanceVersion: an adoption commits the adopted
// version, the next commit is one more, an adoption rolled back leaves
// no trace (a creation then makes version 1), one without a location or
// for an existing dataset is rejected.
func TestAdoptionStartsAtLanceVersion(t *testing.T) {
	h := newMemHistory()
	lim := Limits{MaxTxnBytes: 1 << 20, Window: 8, MaxLag: 100}

	st := NewState("ds", lim, h)
	m := st.Mark()
	v := st.Decide(t.Context(), Staged{Seq: 1, Data: mustMarshal(t, adoptionTxn(t, newUUID(), 7))})
	if v.Rec.GetOutcome() != cellguardpb.Outcome_OUTCOME_COMMITTED || v.Rec.GetVersion() != 7 || v.Rec.GetAdoptedManifest() == nil {
		t.Fatalf("adoption: %s v%d (%s)", v.Rec.GetOutcome(), v.Rec.GetVersion(), v.Rec.GetMessage())
	}
	if v.Rec.GetDatasetConfig().GetReaders() != cellguardpb.Readers_READERS_LANCE8 {
		t.Errorf("adopted config %v, want readers lance8", v.Rec.GetDatasetConfig())
	}
	st.Rollback(m)
	if st.HeadVersion() != 0 || st.VersionSeq.Top() != 0 || st.Config != nil {
		t.Fatalf("after rollback: head %d, index top %d, cfg %v", st.HeadVersion(), st.VersionSeq.Top(), st.Config)
	}
	vs := decideAll(t, st, h, createTxn(newUUID()))
	if vs[0].Rec.GetVersion() != 1 {
		t.Fatalf("creation after a rolled-back adoption made version %d", vs[0].Rec.GetVersion())
	}

	st = NewState("ds", lim, h)
	vs = decideAll(t, st, h, adoptionTxn(t, newUUID(), 7), appendTxn(newUUID(), 7), adoptionTxn(t, newUUID(), 9))
	if got := vs[1].Rec; got.GetOutcome() != cellguardpb.Outcome_OUTCOME_COMMITTED || got.GetVersion() != 8 {
		t.Errorf("append after adoption: %s v%d (%s)", got.GetOutcome(), got.GetVersion(), got.GetMessage())
	}
	if got := vs[2].Rec; got.GetReason() != cellguardpb.Reason_DATASET_EXISTS {
		t.Errorf("second adoption: %s %s, want DATASET_EXISTS", got.GetOutcome(), got.GetReason())
	}
	if seq, ok := st.VersionSeq.At(8); !ok || seq == 0 {
		t.Errorf("version 8 not indexed: %d %v", seq, ok)
	}

	noLoc := adoptionTxn(t, newUUID(), 3)
	if err := logrec.SetConfig(noLoc, &cellguardpb.DatasetConfig{}); err != nil {
		t.Fatal(err)
	}
	st = NewState("ds", lim, h)
	if vs := decideAll(t, st, h, noLoc); vs[0].Rec.GetReason() != cellguardpb.Reason_INVALID_TRANSACTION {
		t.Errorf("adoption without a location: %s %s", vs[0].Rec.GetOutcome(), vs[0].Rec.GetReason())
	}
}
