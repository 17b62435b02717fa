package decide

import (
	"testing"

	"cellguard/internal/declog"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// adoptionTxn stages the adoption of a Lance table at version v.
func adoptionTxn(t *testing.T, id string, v uint64) *lancepb.Transaction {
	t.Helper()
	zero := uint32(0)
	frag := dataFragment("data/adopted.lance", 50)
	m := &lancepb.Manifest{Fields: testSchema, Fragments: []*lancepb.DataFragment{frag}, Version: v, MaxFragmentId: &zero}
	txn := &lancepb.Transaction{Uuid: id, Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{Schema: testSchema}}}
	if err := declog.SetConfig(txn, &cellguardpb.DatasetConfig{Location: "/tmp/adopted.lance"}); err != nil {
		t.Fatal(err)
	}
	if err := declog.SetAdoption(txn, m); err != nil {
		t.Fatal(err)
	}
	return txn
}

// TestAdoptionStartsAtLanceVersion: an adoption commits the adopted
// version, the next commit is one more, an adoption rolled back leaves
// no trace (a creation then makes version 1), one without a location or
// for an existing dataset is rejected.
func TestAdoptionStartsAtLanceVersion(t *testing.T) {
	h := &memHistory{ms: map[uint64]*table.Manifest{}, txns: map[uint64]*lancepb.Transaction{}}
	lim := limits{maxTxnBytes: 1 << 20, window: 8, maxLag: 100}

	st := newState("ds", lim, h)
	m := st.mark()
	v := st.decide(t.Context(), staged{seq: 1, data: mustMarshal(t, adoptionTxn(t, newUUID(), 7))})
	if v.rec.GetOutcome() != cellguardpb.Outcome_OUTCOME_COMMITTED || v.rec.GetVersion() != 7 || v.rec.GetAdoptedManifest() == nil {
		t.Fatalf("adoption: %s v%d (%s)", v.rec.GetOutcome(), v.rec.GetVersion(), v.rec.GetMessage())
	}
	if v.rec.GetDatasetConfig().GetReaders() != cellguardpb.Readers_READERS_LANCE8 {
		t.Errorf("adopted config %v, want readers lance8", v.rec.GetDatasetConfig())
	}
	st.rollback(m)
	if st.headVersion() != 0 || st.versionSeq.top() != 0 || st.cfg != nil {
		t.Fatalf("after rollback: head %d, index top %d, cfg %v", st.headVersion(), st.versionSeq.top(), st.cfg)
	}
	vs := decideAll(t, st, h, createTxn(newUUID()))
	if vs[0].rec.GetVersion() != 1 {
		t.Fatalf("creation after a rolled-back adoption made version %d", vs[0].rec.GetVersion())
	}

	st = newState("ds", lim, h)
	vs = decideAll(t, st, h, adoptionTxn(t, newUUID(), 7), appendTxn(newUUID(), 7), adoptionTxn(t, newUUID(), 9))
	if got := vs[1].rec; got.GetOutcome() != cellguardpb.Outcome_OUTCOME_COMMITTED || got.GetVersion() != 8 {
		t.Errorf("append after adoption: %s v%d (%s)", got.GetOutcome(), got.GetVersion(), got.GetMessage())
	}
	if got := vs[2].rec; got.GetReason() != cellguardpb.Reason_DATASET_EXISTS {
		t.Errorf("second adoption: %s %s, want DATASET_EXISTS", got.GetOutcome(), got.GetReason())
	}
	if seq, ok := st.versionSeq.at(8); !ok || seq == 0 {
		t.Errorf("version 8 not indexed: %d %v", seq, ok)
	}

	noLoc := adoptionTxn(t, newUUID(), 3)
	if err := declog.SetConfig(noLoc, &cellguardpb.DatasetConfig{}); err != nil {
		t.Fatal(err)
	}
	st = newState("ds", lim, h)
	if vs := decideAll(t, st, h, noLoc); vs[0].rec.GetReason() != cellguardpb.Reason_INVALID_TRANSACTION {
		t.Errorf("adoption without a location: %s %s", vs[0].rec.GetOutcome(), vs[0].rec.GetReason())
	}
}
