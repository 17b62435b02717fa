package data_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"gocloud.dev/blob/memblob"

	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

// TestLanceDeletionFiles reads every deletion file real Lance wrote in the
// fixture histories (ZSTD-compressed Arrow IPC, UInt32 row_id) through the
// table.DeletionVectors interface.
func TestLanceDeletionFiles(t *testing.T) {
	dirs, err := filepath.Glob("../testdata/lance/*")
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for _, dir := range dirs {
		manifests, _ := filepath.Glob(filepath.Join(dir, "_versions", "*.manifest"))
		if len(manifests) == 0 {
			continue
		}
		abs, err := filepath.Abs(dir)
		if err != nil {
			t.Fatal(err)
		}
		s, err := data.Open(context.Background(), abs)
		if err != nil {
			t.Fatal(err)
		}
		var dv table.DeletionVectors = s
		for _, path := range manifests {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			mf, err := table.ReadManifestFile(b)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			for _, f := range mf.Manifest.GetFragments() {
				df := f.GetDeletionFile()
				if df == nil {
					continue
				}
				bm, err := dv.DeletionVector(t.Context(), f.GetId(), df)
				if err != nil {
					t.Errorf("%s fragment %d: %v", path, f.GetId(), err)
					continue
				}
				if bm.GetCardinality() != df.GetNumDeletedRows() || uint64(bm.Maximum()) >= f.GetPhysicalRows() {
					t.Errorf("%s fragment %d: %d deleted rows up to %d; manifest: %d of %d rows",
						path, f.GetId(), bm.GetCardinality(), bm.Maximum(), df.GetNumDeletedRows(), f.GetPhysicalRows())
				}
				read++
			}
		}
		s.Close()
	}
	if read == 0 {
		t.Fatal("no deletion files in the fixtures")
	}
}

func TestDeletionFileRoundTrip(t *testing.T) {
	backends(t, func(t *testing.T, s *data.Store) {
		ctx := context.Background()
		want := roaring.BitmapOf(0, 3, 70000, 70001, 70002)
		df, err := s.WriteDeletionFile(ctx, 12, 4, want)
		if err != nil {
			t.Fatal(err)
		}
		if df.GetFileType() != lancepb.DeletionFile_BITMAP || df.GetReadVersion() != 4 || df.GetNumDeletedRows() != 5 || df.GetId() == 0 {
			t.Errorf("WriteDeletionFile = %v", df)
		}
		got, err := s.DeletionVector(t.Context(), 12, df)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Equals(want) {
			t.Errorf("DeletionVector = %v; want %v", got, want)
		}
		if _, err := s.WriteDeletionFile(ctx, 12, 4, roaring.New()); !errors.Is(err, data.ErrInvalidArgument) {
			t.Errorf("empty deletion file: error = %v; want ErrInvalidArgument", err)
		}
		missing := &lancepb.DeletionFile{FileType: lancepb.DeletionFile_BITMAP, ReadVersion: 4, Id: 1, NumDeletedRows: 1}
		if _, err := s.DeletionVector(t.Context(), 12, missing); !errors.Is(err, data.ErrNotFound) {
			t.Errorf("missing deletion file: error = %v; want ErrNotFound", err)
		}
	})
}

// The bitmap a deletion file holds must agree with the manifest, and it
// is read from the store only once.
func TestDeletionVectorChecksAndCaches(t *testing.T) {
	ctx := context.Background()
	bucket := memblob.OpenBucket(nil)
	s := data.NewStore(bucket, data.Options{})
	defer s.Close()
	df, err := s.WriteDeletionFile(ctx, 1, 1, roaring.BitmapOf(1, 2))
	if err != nil {
		t.Fatal(err)
	}
	lying := cloneDeletion(df)
	lying.NumDeletedRows = 3
	var fe *data.FormatError
	if _, err := s.DeletionVector(t.Context(), 1, lying); !errors.As(err, &fe) || !errors.Is(err, table.ErrMalformed) {
		t.Errorf("count mismatch: error = %v; want a *FormatError", err)
	}
	if _, err := s.DeletionVector(t.Context(), 1, df); err != nil {
		t.Fatal(err)
	}
	if err := bucket.Delete(ctx, "_deletions/"+table.DeletionFilePath(1, df)); err != nil {
		t.Fatal(err)
	}
	if bm, err := s.DeletionVector(t.Context(), 1, df); err != nil || bm.GetCardinality() != 2 {
		t.Errorf("cached read = %v, %v; want {1, 2}", bm, err)
	}
	if _, err := s.DeletionVector(t.Context(), 1, lying); !errors.As(err, &fe) {
		t.Errorf("count mismatch on a cached file: error = %v; want a *FormatError", err)
	}
}

// TestDeletionVectorFIFO: in a local directory, a deletion file that is a
// FIFO (no one writes it) is refused as a *FormatError at once; opening
// it for reading would block with no end.
func TestDeletionVectorFIFO(t *testing.T) {
	dir := t.TempDir()
	s, err := data.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	df := &lancepb.DeletionFile{FileType: lancepb.DeletionFile_BITMAP, ReadVersion: 1, Id: 9, NumDeletedRows: 1}
	path := filepath.Join(dir, "_deletions", table.DeletionFilePath(3, df))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	var fe *data.FormatError
	if _, err := s.DeletionVector(t.Context(), 3, df); !errors.As(err, &fe) || !errors.Is(err, table.ErrMalformed) {
		t.Errorf("DeletionVector of a FIFO = %v; want a *FormatError", err)
	}
}
