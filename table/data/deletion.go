package data

import (
	"context"
	"math/rand/v2"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow/array"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

var _ table.DeletionVectors = (*Store)(nil)

// DeletionVector implements table.DeletionVectors: it returns the deleted
// offsets that df records for fragment fragmentID, reading either form of
// Lance deletion file: a portable 32-bit roaring bitmap (`.bin`) or an
// Arrow IPC file with one UInt32 column `row_id` (`.arrow`, as Lance writes
// small deletion sets, ZSTD-compressed). The bitmap must hold exactly df.num_deleted_rows
// offsets. The result is shared with the Store's cache and must not be
// modified.
func (s *Store) DeletionVector(ctx context.Context, fragmentID uint64, df *lancepb.DeletionFile) (*roaring.Bitmap, error) {
	const op = "read deletion file"
	if df.BaseId != nil {
		return nil, errorf(op, ErrUnsupported, "fragment %d: deletion file under base path %d", fragmentID, df.GetBaseId())
	}
	key := deletionsDir + table.DeletionFilePath(fragmentID, df)
	bm, ok := s.deletions.get(key)
	if !ok {
		var err error
		if bm, err = s.loadDeletions(ctx, op, key, df.GetFileType()); err != nil {
			return nil, err
		}
		s.deletions.put(key, bm, int64(bm.GetSizeInBytes())+int64(len(key)))
	}
	if got := bm.GetCardinality(); got != df.GetNumDeletedRows() {
		return nil, formatErr(key, nil, "holds %d deleted rows, manifest says %d", got, df.GetNumDeletedRows())
	}
	return bm, nil
}

func (s *Store) loadDeletions(ctx context.Context, op, key string, typ lancepb.DeletionFile_DeletionFileType) (*roaring.Bitmap, error) {
	b, err := s.read(ctx, op, key)
	if err != nil {
		return nil, err
	}
	switch typ {
	case lancepb.DeletionFile_BITMAP:
		bm, err := table.DecodeBitmap(b)
		if err != nil {
			return nil, formatErr(key, err, "not a roaring bitmap")
		}
		return bm, nil
	case lancepb.DeletionFile_ARROW_ARRAY:
		return decodeDeletionArrow(key, b)
	}
	return nil, errorf(op, ErrUnsupported, "%s: deletion file type %v", key, typ)
}

// decodeDeletionArrow reads Lance's Arrow form of a deletion file: one
// column of non-null deleted offsets, UInt32 (as Lance writes) or Int32
// (as its proto comment says), named row_id.
func decodeDeletionArrow(key string, b []byte) (*roaring.Bitmap, error) {
	f, err := decodeIPC(key, b)
	if err != nil {
		return nil, err
	}
	if len(f.cols) != 1 {
		return nil, formatErr(key, nil, "deletion file has %d columns, want 1", len(f.cols))
	}
	col := f.cols[0]
	if col.NullN() != 0 {
		return nil, formatErr(key, nil, "deletion file has %d null offsets", col.NullN())
	}
	bm := roaring.New()
	switch c := col.(type) {
	case *array.Uint32:
		bm.AddMany(c.Uint32Values())
	case *array.Int32:
		for i, v := range c.Int32Values() {
			if v < 0 {
				return nil, formatErr(key, nil, "negative offset %d at position %d", v, i)
			}
			bm.Add(uint32(v))
		}
	default:
		return nil, formatErr(key, nil, "deletion column has type %s, want uint32", col.DataType())
	}
	if int(bm.GetCardinality()) != col.Len() {
		return nil, formatErr(key, nil, "deletion file repeats offsets")
	}
	return bm, nil
}

// WriteDeletionFile writes deleted, the complete set of deleted offsets of
// fragment fragmentID, as a Lance BITMAP deletion file (a portable 32-bit
// roaring bitmap at `_deletions/{fragment}-{readVersion}-{random id}.bin`)
// and returns its manifest entry. readVersion is the version the writer
// read. A fragment's deletion file replaces the previous one, so deleted
// must include the rows deleted before: see DeleteRows.
func (s *Store) WriteDeletionFile(ctx context.Context, fragmentID, readVersion uint64, deleted *roaring.Bitmap) (*lancepb.DeletionFile, error) {
	const op = "write deletion file"
	if deleted.IsEmpty() {
		return nil, errorf(op, ErrInvalidArgument, "fragment %d: no deleted rows; a fragment without deletions has no deletion file", fragmentID)
	}
	bm := deleted.Clone()
	bm.RunOptimize()
	b, err := bm.ToBytes()
	if err != nil {
		return nil, errorf(op, ErrInvalidArgument, "serialize bitmap: %v", err)
	}
	df := &lancepb.DeletionFile{
		FileType:       lancepb.DeletionFile_BITMAP,
		ReadVersion:    readVersion,
		Id:             rand.Uint64(),
		NumDeletedRows: bm.GetCardinality(),
	}
	if err := s.write(ctx, op, deletionsDir+table.DeletionFilePath(fragmentID, df), b); err != nil {
		return nil, err
	}
	return df, nil
}

// DeleteRows writes the deletion file that deletes offsets from fragment
// fragmentID of m, in addition to the rows m already deletes, and returns
// its manifest entry, stamped with read version m.Version(). Offsets must
// lie within the fragment; deleting a deleted row again is allowed.
func (s *Store) DeleteRows(ctx context.Context, m *table.Manifest, fragmentID uint64, offsets []uint32) (*lancepb.DeletionFile, error) {
	const op = "delete rows"
	frag, ok := m.Fragment(fragmentID)
	if !ok {
		return nil, errorf(op, ErrNotFound, "fragment %d at version %d", fragmentID, m.Version())
	}
	old, err := s.deletedOf(ctx, frag)
	if err != nil {
		return nil, err
	}
	bm := old.Clone()
	for _, o := range offsets {
		if uint64(o) >= frag.PhysicalRows() {
			return nil, errorf(op, ErrOutOfRange, "fragment %d has %d rows, offset %d", fragmentID, frag.PhysicalRows(), o)
		}
		bm.Add(o)
	}
	return s.WriteDeletionFile(ctx, fragmentID, m.Version(), bm)
}

// deletedOf returns the deleted offsets of frag (empty if it has no
// deletion file), checked to lie within the fragment.
func (s *Store) deletedOf(ctx context.Context, frag *table.Fragment) (*roaring.Bitmap, error) {
	df := frag.DeletionFile()
	if df == nil {
		return roaring.New(), nil
	}
	bm, err := s.DeletionVector(ctx, frag.ID(), df)
	if err != nil {
		return nil, err
	}
	if !bm.IsEmpty() && uint64(bm.Maximum()) >= frag.PhysicalRows() {
		return nil, formatErr(deletionsDir+table.DeletionFilePath(frag.ID(), df), nil,
			"deletes offset %d of fragment %d, which has %d rows", bm.Maximum(), frag.ID(), frag.PhysicalRows())
	}
	return bm, nil
}

// liveOffsets returns the offsets of frag that deleted does not mark, in
// ascending order.
func liveOffsets(frag *table.Fragment, deleted *roaring.Bitmap) []uint32 {
	n := frag.PhysicalRows()
	live := make([]uint32, 0, n-min(n, deleted.GetCardinality()))
	it := deleted.Iterator()
	next, more := uint64(n), it.HasNext()
	if more {
		next = uint64(it.Next())
	}
	for o := uint64(0); o < n; o++ {
		if o == next {
			next = n
			if it.HasNext() {
				next = uint64(it.Next())
			}
			continue
		}
		live = append(live, uint32(o))
	}
	return live
}
