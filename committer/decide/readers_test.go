package decide

import (
	"path"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/internal/logrec"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

func overlayTxn(t *testing.T, id string, rv uint64) *lancepb.Transaction {
	t.Helper()
	cover, err := roaring.BitmapOf(0).ToBytes()
	if err != nil {
		t.Fatal(err)
	}
	return &lancepb.Transaction{ReadVersion: rv, Uuid: id, Operation: &lancepb.Transaction_DataOverlay_{
		DataOverlay: &lancepb.Transaction_DataOverlay{Groups: []*lancepb.Transaction_DataOverlayGroup{{
			FragmentId: 0, Overlays: []*lancepb.DataOverlayFile{{
				DataFile: &lancepb.DataFile{Path: "o.lance", Fields: []int32{0}, ColumnIndices: []int32{0}, FileMajorVersion: 2, FileMinorVersion: 1},
				Coverage: &lancepb.DataOverlayFile_SharedOffsetBitmap{SharedOffsetBitmap: cover},
			}},
		}}}}}
}

func indexTxn(t *testing.T, id string, rv uint64) *lancepb.Transaction {
	t.Helper()
	bm, err := roaring.BitmapOf(0).ToBytes()
	if err != nil {
		t.Fatal(err)
	}
	return &lancepb.Transaction{ReadVersion: rv, Uuid: id, Operation: &lancepb.Transaction_CreateIndex_{
		CreateIndex: &lancepb.Transaction_CreateIndex{NewIndices: []*lancepb.IndexMetadata{{
			Uuid: &lancepb.UUID{Uuid: make([]byte, 16)}, Fields: []int32{0}, Name: "x_idx", DatasetVersion: rv, FragmentBitmap: bm,
		}}}}}
}

// TestReadersRejectWhatLance8CannotRead: on a dataset published for Lance
// 8, DataOverlay is rejected for good with UNSUPPORTED_BY_READERS, and
// CreateIndex commits on every dataset; the configuration comes from the
// creating record, with defaults (readers lance8, the storage version the table has, location
// under the lance root); a dataset without a location keeps both
// operations.
func TestReadersRejectWhatLance8CannotRead(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       *cellguardpb.DatasetConfig
		lanceRoot string
		overlay   bool // overlay allowed
		index     bool // index allowed
	}{
		{name: "lance8", cfg: &cellguardpb.DatasetConfig{Location: "/tmp/x.lance"}, index: true},
		{name: "lance-root", lanceRoot: "/srv/lance", index: true},
		{name: "cellguard-readers", cfg: &cellguardpb.DatasetConfig{Location: "/tmp/x.lance", Readers: cellguardpb.Readers_READERS_CELLGUARD}, overlay: true, index: true},
		{name: "unpublished", overlay: true, index: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newMemHistory()
			st := NewState("ds", Limits{MaxTxnBytes: 1 << 20, Window: 8, MaxLag: 100, LanceRoot: tc.lanceRoot,
				DatasetLocation: func(root, ds string) (string, error) { return path.Join(root, ds+".lance"), nil }}, h)
			create := createTxn(newUUID())
			if tc.cfg != nil {
				if err := logrec.SetConfig(create, tc.cfg); err != nil {
					t.Fatal(err)
				}
			}
			vs := decideAll(t, st, h, create, overlayTxn(t, newUUID(), 1), indexTxn(t, newUUID(), 1))
			cfg := vs[0].Rec.GetDatasetConfig()
			switch {
			case tc.lanceRoot != "" && cfg.GetLocation() != "/srv/lance/ds.lance":
				t.Errorf("location %q, want /srv/lance/ds.lance", cfg.GetLocation())
			case cfg.GetLocation() != "" && (cfg.GetStorageVersion() != vs[0].Next.DataFormat().GetVersion() || cfg.GetReaders() == cellguardpb.Readers_READERS_UNSPECIFIED):
				t.Errorf("defaults not applied: %v", cfg)
			}
			for i, allowed := range []bool{tc.overlay, tc.index} {
				rec := vs[i+1].Rec
				rejected := rec.GetOutcome() == cellguardpb.Outcome_OUTCOME_REJECTED && rec.GetReason() == cellguardpb.Reason_UNSUPPORTED_BY_READERS
				if rejected == allowed {
					t.Errorf("op %d: outcome %s %s (%s), allowed=%v", i, rec.GetOutcome(), rec.GetReason(), rec.GetMessage(), allowed)
				}
			}
		})
	}
}
