package committer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/internal/dataplane"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table/data"
)

// TestDeletionsThroughLocation writes a rebase's deletion file into the
// dataset's configured location and reads it back through the same
// store; a dataset without a location falls back to DatasetRoot.
func TestDeletionsThroughLocation(t *testing.T) {
	ctx := context.Background()
	loc := filepath.Join(t.TempDir(), "t.lance")
	c := &Committer{cfg: Config{DatasetRoot: t.TempDir()}, plane: blobPlane{b: &dataplane.Blob{}}}
	defer c.plane.Close()
	st := newState("ds", limits{}, nil)
	st.Config = &cellguardpb.DatasetConfig{Location: loc}
	w := &worker{c: c, st: st, ds: "ds"}
	rows := roaring.BitmapOf(1, 5, 9)
	df := &lancepb.DeletionFile{FileType: lancepb.DeletionFile_BITMAP, ReadVersion: 3, Id: 42, NumDeletedRows: 3}
	v := verdict{Deletions: []deletionWrite{{FragmentID: 7, File: df, Rows: rows}}}
	for range 2 { // the second write finds the file and leaves it
		if err := w.writeDeletions(ctx, []verdict{v}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(loc, "_deletions", "7-3-42.bin")); err != nil {
		t.Fatal(err)
	}
	got, err := datasetDeletions{c: c, st: st}.DeletionVector(ctx, 7, df)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equals(rows) {
		t.Errorf("read back %v, want %v", got, rows)
	}
	missing := &lancepb.DeletionFile{FileType: lancepb.DeletionFile_ARROW_ARRAY, ReadVersion: 3, Id: 43, NumDeletedRows: 1}
	if _, err := (datasetDeletions{c: c, st: st}).DeletionVector(ctx, 7, missing); !errors.Is(err, data.ErrNotFound) {
		t.Errorf("missing deletion file: err %v, want data.ErrNotFound", err)
	}

	st.Config = &cellguardpb.DatasetConfig{}
	if got, _ := c.deletionLocation("ds", st.Config); got != filepath.Join(c.cfg.DatasetRoot, "ds") {
		t.Errorf("location without config = %q, want the dataset root", got)
	}
	c.cfg.DatasetRoot = "s3://bucket/tables?region=eu-west-1"
	if got, _ := c.deletionLocation("ds", st.Config); got != "s3://bucket/tables/ds?region=eu-west-1" {
		t.Errorf("location under an s3 root = %q", got)
	}
	c.cfg.DatasetRoot = ""
	if _, err := (datasetDeletions{c: c, st: st}).DeletionVector(ctx, 7, df); err == nil {
		t.Error("no location and no root: read succeeded")
	}
}
