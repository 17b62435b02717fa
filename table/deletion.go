package table

import (
	"context"
	"strconv"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/proto/lancepb"
)

// DeletionVectors reads the contents of deletion files: the physical offsets
// a deletion file marks deleted. A deletion file never changes once written,
// so implementations may cache by path.
//
// The table model itself only names deletion files; rules that need their
// contents (deletion-vector merges on rebase, the evaluator's row-level
// deletion policy) take a DeletionVectors. The committer reads real files
// from the dataset's object store; tests use MemDeletions.
type DeletionVectors interface {
	// DeletionVector returns the deleted offsets of fragment fragmentID as
	// recorded by df. It must return a bitmap the caller may not modify,
	// or an error when the file cannot be read.
	DeletionVector(ctx context.Context, fragmentID uint64, df *lancepb.DeletionFile) (*roaring.Bitmap, error)
}

// DeletionFilePath returns the path of a deletion file relative to the
// dataset's `_deletions` directory: `{fragment}-{read_version}-{id}.{ext}`.
func DeletionFilePath(fragmentID uint64, df *lancepb.DeletionFile) string {
	ext := ".arrow"
	if df.GetFileType() == lancepb.DeletionFile_BITMAP {
		ext = ".bin"
	}
	return strconv.FormatUint(fragmentID, 10) + "-" + strconv.FormatUint(df.GetReadVersion(), 10) +
		"-" + strconv.FormatUint(df.GetId(), 10) + ext
}

// MemDeletions is an in-memory DeletionVectors keyed by deletion file path,
// for tests, simulations and embedding.
type MemDeletions map[string]*roaring.Bitmap

// Put records the contents of a deletion file.
func (m MemDeletions) Put(fragmentID uint64, df *lancepb.DeletionFile, rows *roaring.Bitmap) {
	m[DeletionFilePath(fragmentID, df)] = rows
}

// DeletionVector implements DeletionVectors.
func (m MemDeletions) DeletionVector(_ context.Context, fragmentID uint64, df *lancepb.DeletionFile) (*roaring.Bitmap, error) {
	path := DeletionFilePath(fragmentID, df)
	rows, ok := m[path]
	if !ok {
		return nil, errorf("read deletion file", ErrVersionNotFound, "no deletion file %s", path)
	}
	if rows.GetCardinality() != df.GetNumDeletedRows() {
		return nil, errorf("read deletion file", ErrMalformed, "%s holds %d rows, manifest says %d",
			path, rows.GetCardinality(), df.GetNumDeletedRows())
	}
	return rows, nil
}

// Deleted returns the deleted offsets of f: empty when f has no deletion
// file, else what dv reads.
func Deleted(ctx context.Context, dv DeletionVectors, f *Fragment) (*roaring.Bitmap, error) {
	df := f.DeletionFile()
	if df == nil {
		return roaring.New(), nil
	}
	return dv.DeletionVector(ctx, f.ID(), df)
}
