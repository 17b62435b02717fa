package declog_test

import (
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/declog"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

func testIndexSection(t *testing.T) *lancepb.IndexSection {
	t.Helper()
	bm, err := roaring.BitmapOf(0).ToBytes()
	if err != nil {
		t.Fatal(err)
	}
	return &lancepb.IndexSection{Indices: []*lancepb.IndexMetadata{{
		Uuid: &lancepb.UUID{Uuid: []byte("0123456789abcdef")}, Fields: []int32{0}, Name: "id_idx",
		DatasetVersion: 1, FragmentBitmap: bm, IndexVersion: proto.Int32(0),
		Files: []*lancepb.IndexFile{{Path: "page_data.lance", SizeBytes: 10}},
	}}}
}

// TestCheckpointKeepsIndices: a checkpoint holds its manifest's index
// section and index rules, and a load from it gives them back.
func TestCheckpointKeepsIndices(t *testing.T) {
	l, _, _ := openLog(t)
	ctx := t.Context()
	ds := "indexed"
	s, err := l.Append(ctx, ds, 0, []*cellguardpb.Decision{committed(t, ds, 1)})
	if err != nil {
		t.Fatal(err)
	}
	m1, _, err := l.Load(ctx, ds, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := testIndexSection(t)
	m1, err = m1.WithIndices(want, table.IndexRulesLance12)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WriteCheckpoint(ctx, declog.Checkpoint{Dataset: ds, Manifest: m1, DecSeq: s[0], TxnSeq: 1}); err != nil {
		t.Fatal(err)
	}
	cp, err := l.ReadCheckpoint(ctx, ds, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(cp.Manifest.IndexSection(), want) || cp.Manifest.IndexRules() != table.IndexRulesLance12 {
		t.Errorf("checkpoint indices %v (%s); want %v (lance12)", cp.Manifest.IndexSection(), cp.Manifest.IndexRules(), want)
	}
}

// TestReplayAdoptionIndices: an adoption carries the adopted version's
// index section, and replaying it gives the dataset its indices.
func TestReplayAdoptionIndices(t *testing.T) {
	zero := uint32(0)
	adopted := &lancepb.Manifest{Fields: schema, Fragments: []*lancepb.DataFragment{fragment("a.lance")}, Version: 3, MaxFragmentId: &zero,
		WriterVersion: &lancepb.Manifest_WriterVersion{Library: "lance", Version: "12.0.0"}}
	txn := &lancepb.Transaction{Uuid: "00000000-0000-4000-8000-000000000003",
		Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{Schema: schema}}}
	want := testIndexSection(t)
	if err := declog.SetAdoption(txn, adopted, want); err != nil {
		t.Fatal(err)
	}
	m, raw, rawIdx, ok, err := declog.AdoptionOf(txn)
	if err != nil || !ok || !proto.Equal(m.IndexSection(), want) || m.IndexRules() != table.IndexRulesLance12 {
		t.Fatalf("AdoptionOf = %v, %v, %v (%v)", ok, err, m.IndexSection(), m.IndexRules())
	}
	tb, _ := proto.Marshal(txn)
	rec := declog.Record{Seq: 1, Dataset: "ds", Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED, Version: 3, Decision: &cellguardpb.Decision{
		Dataset: "ds", TxnUuid: txn.Uuid, Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED, Version: 3, Transaction: tb,
		AdoptedManifest: raw, AdoptedIndexSection: rawIdx}}
	got, _, err := declog.Replay(t.Context(), nil, rec, nil)
	if err != nil || !proto.Equal(got.IndexSection(), want) {
		t.Fatalf("Replay(adoption) = %v, %v", got.IndexSection(), err)
	}
	rec.Decision.AdoptedIndexSection = []byte{0xff}
	if _, _, err := declog.Replay(t.Context(), nil, rec, nil); err == nil {
		t.Error("Replay(adoption with an undecodable index section): no error")
	}
}
