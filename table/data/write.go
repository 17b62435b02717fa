package data

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"cellguard/lancefile"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// fileExt is the extension of every data and overlay file we write, as
// Lance names its data files.
const fileExt = ".lance"

// NewTableVersion is the Lance file format version WriteFragment writes
// for a new table: 2.2, the default of Lance 12 (LanceDB 0.39), which
// Lance 8 (LanceDB 0.31) reads and appends to as well.
// WriteFragmentVersion writes any.
const NewTableVersion = lancefile.V2_2

// Cells are new values for some cells of one field of a fragment.
type Cells struct {
	// Offsets are the physical offsets of the cells, in any order, each
	// at most once.
	Offsets []uint32
	// Values holds the new value of the cell at Offsets[i] at position i.
	// A null overrides the cell to NULL.
	Values arrow.Array
}

// WriteFragment writes cols (field id → values, all of one length) as one
// data file of a new table (format NewTableVersion, 2.2) and returns a
// new fragment holding it, with id 0 for the commit to assign. Every
// field must be in schema and have a supported type equal to its values'
// Arrow type; fields of the schema missing from cols read as NULL. Create
// the table with the fragments in an Overwrite transaction. To add
// fragments to an existing dataset, use WriteFragmentFor.
func (s *Store) WriteFragment(ctx context.Context, schema *table.Schema, cols map[int32]arrow.Array) (*lancepb.DataFragment, error) {
	return s.writeFragment(ctx, "write fragment", NewTableVersion, schema, cols)
}

// WriteFragmentVersion is WriteFragment in file format v, for a new table
// whose manifest records v as its data format (v.String(): "2.0", "2.1"
// or "2.2"; see lancefile.ParseVersion).
func (s *Store) WriteFragmentVersion(ctx context.Context, v lancefile.Version, schema *table.Schema, cols map[int32]arrow.Array) (*lancepb.DataFragment, error) {
	const op = "write fragment"
	if !slices.Contains(lancefile.Versions, v) {
		return nil, errorf(op, ErrInvalidArgument, "unknown file version %v", v)
	}
	return s.writeFragment(ctx, op, v, schema, cols)
}

// WriteFragmentFor is WriteFragment for a transaction that reads version m
// of an existing dataset (Append, Overwrite, Rewrite): the file has m's
// storage version (see FileVersion), so that all the dataset's files
// share it. A nil schema means m's; pass the schema the transaction
// commits when it differs (an Overwrite with a new schema).
func (s *Store) WriteFragmentFor(ctx context.Context, m *table.Manifest, schema *table.Schema, cols map[int32]arrow.Array) (*lancepb.DataFragment, error) {
	const op = "write fragment"
	v, err := FileVersion(m)
	if err != nil {
		return nil, err
	}
	if schema == nil {
		schema = m.Schema()
	}
	return s.writeFragment(ctx, op, v, schema, cols)
}

func (s *Store) writeFragment(ctx context.Context, op string, v lancefile.Version, schema *table.Schema, cols map[int32]arrow.Array) (*lancepb.DataFragment, error) {
	rows, err := commonLength(op, cols)
	if err != nil {
		return nil, err
	}
	if rows == 0 {
		return nil, errorf(op, ErrInvalidArgument, "no rows")
	}
	df, err := s.writeColumns(ctx, op, v, schema, cols, rows, false)
	if err != nil {
		return nil, err
	}
	return &lancepb.DataFragment{Files: []*lancepb.DataFile{df}, PhysicalRows: uint64(rows)}, nil
}

// WriteColumns writes new base values for some fields of frag: cols maps
// field id → values for every physical row, deleted ones included. It
// returns the data file for a DataReplacement or a REWRITE_COLUMNS Update
// (or a Merge that adds the fields). New fields must be in schema: pass
// the schema the transaction commits. The file has the Lance version of
// the fragment's other files (see FragmentVersion).
func (s *Store) WriteColumns(ctx context.Context, schema *table.Schema, frag *table.Fragment, cols map[int32]arrow.Array) (*lancepb.DataFile, error) {
	const op = "write columns"
	rows, err := commonLength(op, cols)
	if err != nil {
		return nil, err
	}
	if uint64(rows) != frag.PhysicalRows() {
		return nil, errorf(op, ErrInvalidArgument, "fragment %d has %d physical rows, columns have %d", frag.ID(), frag.PhysicalRows(), rows)
	}
	v, err := FragmentVersion(frag)
	if err != nil {
		return nil, err
	}
	return s.writeColumns(ctx, op, v, schema, cols, rows, false)
}

// FragmentVersion returns the Lance file version of the data files of
// frag, which is the dataset's storage version: the version a file
// written for the fragment must have. A fragment without data files
// gives NewTableVersion; files of different or unknown versions give
// ErrUnsupported.
func FragmentVersion(frag *table.Fragment) (lancefile.Version, error) {
	v, seen := NewTableVersion, false
	for _, df := range frag.Files() {
		fv, ok := fileVersion(df.GetFileMajorVersion(), df.GetFileMinorVersion())
		switch {
		case !ok:
			return 0, errorf("file version", ErrUnsupported, "fragment %d: data file %s has file version %d.%d; this package writes 2.0, 2.1 and 2.2",
				frag.ID(), df.GetPath(), df.GetFileMajorVersion(), df.GetFileMinorVersion())
		case seen && fv != v:
			return 0, errorf("file version", ErrUnsupported, "fragment %d mixes file versions %s and %s", frag.ID(), v, fv)
		}
		v, seen = fv, true
	}
	return v, nil
}

// WriteOverlay writes an overlay of frag: new values for the given cells,
// per field. It returns the overlay file for a DataOverlay transaction,
// with committed_version 0 for the commit to stamp. When every field
// covers the same offsets, the coverage is one shared bitmap; otherwise
// one bitmap per field. As Lance requires, the values of a field are
// stored in offset order, the value of offset o at rank(o) in the field's
// coverage.
//
// The file is a Lance file of the fragment's version (see
// FragmentVersion). Its columns have one length, so when fields cover
// different numbers of cells the shorter columns are padded with nulls
// after their last value; readers never look past a field's coverage.
func (s *Store) WriteOverlay(ctx context.Context, schema *table.Schema, frag *table.Fragment, cells map[int32]Cells) (*lancepb.DataOverlayFile, error) {
	const op = "write overlay"
	if len(cells) == 0 {
		return nil, errorf(op, ErrInvalidArgument, "fragment %d: no cells", frag.ID())
	}
	ids := slices.Sorted(maps.Keys(cells))
	cov := make([]*roaring.Bitmap, len(ids))
	vals := make(map[int32]arrow.Array, len(ids))
	rows := 0
	for i, id := range ids {
		var err error
		if cov[i], vals[id], err = sortCells(op, schema, frag, id, cells[id]); err != nil {
			return nil, err
		}
		rows = max(rows, vals[id].Len())
	}
	for id, v := range vals { // pad to one length
		if v.Len() < rows {
			vals[id] = pad(v, rows)
		}
	}
	v, err := FragmentVersion(frag)
	if err != nil {
		return nil, err
	}
	df, err := s.writeColumns(ctx, op, v, schema, vals, rows, true)
	if err != nil {
		return nil, err
	}
	ov := &lancepb.DataOverlayFile{DataFile: df}
	if shared := sameBitmaps(cov); shared {
		ov.Coverage = &lancepb.DataOverlayFile_SharedOffsetBitmap{SharedOffsetBitmap: bitmapBytes(cov[0])}
	} else {
		fc := &lancepb.FieldCoverage{OffsetBitmaps: make([][]byte, len(cov))}
		for i, bm := range cov {
			fc.OffsetBitmaps[i] = bitmapBytes(bm)
		}
		ov.Coverage = &lancepb.DataOverlayFile_FieldCoverage{FieldCoverage: fc}
	}
	return ov, nil
}

// sortCells checks c against the schema and the fragment and returns its
// coverage and its values in offset order.
func sortCells(op string, schema *table.Schema, frag *table.Fragment, id int32, c Cells) (*roaring.Bitmap, arrow.Array, error) {
	if c.Values == nil || c.Values.Len() != len(c.Offsets) {
		n := -1
		if c.Values != nil {
			n = c.Values.Len()
		}
		return nil, nil, errorf(op, ErrInvalidArgument, "field %d: %d offsets, %d values", id, len(c.Offsets), n)
	}
	if len(c.Offsets) == 0 {
		return nil, nil, errorf(op, ErrInvalidArgument, "field %d: no cells", id)
	}
	if err := checkValues(op, schema, id, c.Values); err != nil {
		return nil, nil, err
	}
	order := make([]int, len(c.Offsets))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(c.Offsets[a], c.Offsets[b]) })
	cov := roaring.New()
	picks := make([]pick, len(order))
	for i, j := range order {
		o := c.Offsets[j]
		if uint64(o) >= frag.PhysicalRows() {
			return nil, nil, errorf(op, ErrOutOfRange, "field %d: fragment %d has %d rows, offset %d", id, frag.ID(), frag.PhysicalRows(), o)
		}
		if i > 0 && c.Offsets[order[i-1]] == o {
			return nil, nil, errorf(op, ErrInvalidArgument, "field %d: offset %d given twice", id, o)
		}
		cov.Add(o)
		picks[i] = pick{src: 0, row: uint32(j)}
	}
	return cov, gather(c.Values.DataType(), []arrow.Array{c.Values}, picks), nil
}

// checkValues checks that values fit field id of schema: the field exists,
// has a supported type equal to the values' type, and holds no nulls unless
// nullable.
func checkValues(op string, schema *table.Schema, id int32, values arrow.Array) error {
	f, ok := schema.Field(id)
	if !ok {
		return errorf(op, ErrNotFound, "field %d is not in the schema", id)
	}
	t, err := fieldType(op, f)
	if err != nil {
		return err
	}
	if !arrow.TypeEqual(values.DataType(), t) {
		return errorf(op, ErrInvalidArgument, "field %d (%q) is %s, values are %s", id, f.GetName(), f.GetLogicalType(), values.DataType())
	}
	if !f.GetNullable() && values.NullN() > 0 {
		return errorf(op, ErrInvalidArgument, "field %d (%q) is not nullable, values hold %d nulls", id, f.GetName(), values.NullN())
	}
	return nil
}

// pad returns v followed by nulls up to n values.
func pad(v arrow.Array, n int) arrow.Array {
	picks := make([]pick, n)
	for i := range picks {
		picks[i] = pick{src: noSource}
		if i < v.Len() {
			picks[i] = pick{src: 0, row: uint32(i)}
		}
	}
	return gather(v.DataType(), []arrow.Array{v}, picks)
}

func sameBitmaps(bms []*roaring.Bitmap) bool {
	for _, bm := range bms[1:] {
		if !bm.Equals(bms[0]) {
			return false
		}
	}
	return true
}

// bitmapBytes returns the portable serialization of bm, run-optimized.
func bitmapBytes(bm *roaring.Bitmap) []byte {
	bm.RunOptimize()
	b, err := bm.ToBytes()
	if err != nil {
		panic("data: serialize roaring bitmap: " + err.Error()) // writing to memory cannot fail
	}
	return b
}

// commonLength returns the length of every array in cols, or an error if
// there are none or they differ.
func commonLength(op string, cols map[int32]arrow.Array) (int, error) {
	if len(cols) == 0 {
		return 0, errorf(op, ErrInvalidArgument, "no columns")
	}
	n := -1
	for _, id := range slices.Sorted(maps.Keys(cols)) {
		c := cols[id]
		if c == nil {
			return 0, errorf(op, ErrInvalidArgument, "field %d: nil array", id)
		}
		if n >= 0 && c.Len() != n {
			return 0, errorf(op, ErrInvalidArgument, "field %d has %d values, other fields %d", id, c.Len(), n)
		}
		n = c.Len()
	}
	return n, nil
}

// writeColumns checks cols against schema and writes them, in field id
// order, as one Lance file of version v with rows rows under data/,
// streaming: the Lance writer sends each page to the bucket as it fills.
// Overlay files (overlay) may hold nulls in non-nullable fields, as
// padding. A failed write leaves no object behind.
func (s *Store) writeColumns(ctx context.Context, op string, v lancefile.Version, schema *table.Schema, cols map[int32]arrow.Array, rows int, overlay bool) (*lancepb.DataFile, error) {
	ids := slices.Sorted(maps.Keys(cols))
	fields := make([]arrow.Field, len(ids))
	arrays := make([]arrow.Array, len(ids))
	for i, id := range ids {
		c := cols[id]
		if !overlay { // overlay values were checked before padding
			if err := checkValues(op, schema, id, c); err != nil {
				return nil, err
			}
		}
		f, _ := schema.Field(id)
		t, _ := ArrowType(f.GetLogicalType())
		fields[i] = arrow.Field{Name: f.GetName(), Type: t, Nullable: f.GetNullable() || overlay}
		arrays[i] = c
	}
	rec := array.NewRecordBatch(arrow.NewSchema(fields, nil), arrays, int64(rows))
	defer rec.Release()
	name := newFileName()
	fi, err := s.writeLance(ctx, op, dataDir+name, v, rec, ids)
	if err != nil {
		return nil, err
	}
	return fi.DataFile(name), nil
}

// writeLance writes rec as a Lance file at key. The object appears whole
// or not at all: on any error the bucket write is aborted.
func (s *Store) writeLance(ctx context.Context, op, key string, v lancefile.Version, rec arrow.RecordBatch, ids []int32) (lancefile.FileInfo, error) {
	wctx, abort := context.WithCancel(ctx)
	defer abort()
	bw, err := s.bucket.NewWriter(wctx, key, nil)
	if err != nil {
		return lancefile.FileInfo{}, fmt.Errorf("data: %s: write %s: %w", op, key, err)
	}
	fi, err := encodeLance(bw, v, rec, ids)
	if err != nil {
		abort()
		_ = bw.Close() // the write is aborted; its error says only that
		var in *lancefile.InputError
		if errors.As(err, &in) {
			return lancefile.FileInfo{}, errorf(op, ErrInvalidArgument, "%v", err)
		}
		return lancefile.FileInfo{}, fmt.Errorf("data: %s: write %s: %w", op, key, err)
	}
	if err := bw.Close(); err != nil {
		return lancefile.FileInfo{}, fmt.Errorf("data: %s: write %s: %w", op, key, err)
	}
	return fi, nil
}

func encodeLance(w io.Writer, v lancefile.Version, rec arrow.RecordBatch, ids []int32) (lancefile.FileInfo, error) {
	lw, err := lancefile.NewWriter(w, rec.Schema(), ids, lancefile.WriterOptions{Version: v})
	if err != nil {
		return lancefile.FileInfo{}, err
	}
	if err := lw.Write(rec); err != nil {
		return lancefile.FileInfo{}, err
	}
	return lw.Close()
}

// newFileName returns a fresh random data file name.
func newFileName() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:]) + fileExt
}
