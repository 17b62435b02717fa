package data

import (
	"cmp"
	"context"
	"iter"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"

	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data/batch"
)

// Batch holds the live rows of one fragment as of one manifest version.
// It is defined in package batch so that code taking batches (the
// producer SDK's Txn.Read) does not link the data plane.
type Batch = batch.Batch

// Scan reads the given fields of every fragment of m, in scan order,
// yielding one Batch per fragment (fragments with no live rows included,
// as empty batches). It stops at the first error, which it yields with a
// nil Batch. See ReadFragment for how values are resolved.
func (s *Store) Scan(ctx context.Context, m *table.Manifest, fields []int32) iter.Seq2[*Batch, error] {
	return func(yield func(*Batch, error) bool) {
		types, err := fieldTypes("scan", m, fields)
		if err != nil {
			yield(nil, err)
			return
		}
		for frag := range m.Fragments() {
			if err := ctx.Err(); err != nil {
				yield(nil, err)
				return
			}
			b, err := s.readFragment(ctx, frag, fields, types)
			if !yield(b, err) || err != nil {
				return
			}
		}
	}
}

// ReadFragment reads the given fields of the live rows of fragment
// fragmentID of m. The value of a cell (offset o, field F) is, as in
// Lance:
//
//   - from the newest overlay of the fragment that covers (o, F), where a
//     higher committed_version is newer and, between equal versions, a later
//     entry in the fragment's overlay list is newer; a covered cell whose
//     overlay value is null reads as null;
//   - else from the data file that holds F (DataFile.fields, tombstones
//     skipped), at row o;
//   - else null.
//
// Rows the fragment's deletion file lists are left out whatever overlays
// say about them.
func (s *Store) ReadFragment(ctx context.Context, m *table.Manifest, fragmentID uint64, fields []int32) (*Batch, error) {
	const op = "read fragment"
	frag, ok := m.Fragment(fragmentID)
	if !ok {
		return nil, errorf(op, ErrNotFound, "fragment %d at version %d", fragmentID, m.Version())
	}
	types, err := fieldTypes(op, m, fields)
	if err != nil {
		return nil, err
	}
	return s.readFragment(ctx, frag, fields, types)
}

func (s *Store) readFragment(ctx context.Context, frag *table.Fragment, fields []int32, types []arrow.DataType) (*Batch, error) {
	deleted, err := s.deletedOf(ctx, frag)
	if err != nil {
		return nil, err
	}
	b := &Batch{FragmentID: frag.ID(), Offsets: liveOffsets(frag, deleted), Columns: make(map[int32]arrow.Array, len(fields))}
	for i, id := range fields {
		col, err := s.resolve(ctx, frag, id, types[i], b.Offsets, true)
		if err != nil {
			b.Release()
			return nil, err
		}
		if old, dup := b.Columns[id]; dup {
			old.Release()
		}
		b.Columns[id] = col
	}
	return b, nil
}

// ReadCells reads field fieldID of fragment fragmentID of m at the given
// physical offsets, resolved as ReadFragment does, and returns one value
// per offset, in the order given. An offset past the fragment's end is an
// ErrOutOfRange error, a deleted one an ErrDeleted error.
func (s *Store) ReadCells(ctx context.Context, m *table.Manifest, fieldID int32, fragmentID uint64, offsets []uint32) (arrow.Array, error) {
	const op = "read cells"
	frag, ok := m.Fragment(fragmentID)
	if !ok {
		return nil, errorf(op, ErrNotFound, "fragment %d at version %d", fragmentID, m.Version())
	}
	types, err := fieldTypes(op, m, []int32{fieldID})
	if err != nil {
		return nil, err
	}
	deleted, err := s.deletedOf(ctx, frag)
	if err != nil {
		return nil, err
	}
	for _, o := range offsets {
		if uint64(o) >= frag.PhysicalRows() {
			return nil, errorf(op, ErrOutOfRange, "fragment %d has %d rows, offset %d", fragmentID, frag.PhysicalRows(), o)
		}
		if deleted.Contains(o) {
			return nil, errorf(op, ErrDeleted, "fragment %d offset %d at version %d", fragmentID, o, m.Version())
		}
	}
	return s.resolve(ctx, frag, fieldID, types[0], offsets, ascending(offsets))
}

// fieldTypes returns the Arrow type of each field, checking that m's
// schema has it and that its type is supported.
func fieldTypes(op string, m *table.Manifest, fields []int32) ([]arrow.DataType, error) {
	types := make([]arrow.DataType, len(fields))
	for i, id := range fields {
		f, ok := m.Schema().Field(id)
		if !ok {
			return nil, errorf(op, ErrNotFound, "field %d is not in the schema of version %d", id, m.Version())
		}
		t, err := fieldType(op, f)
		if err != nil {
			return nil, err
		}
		types[i] = t
	}
	return types, nil
}

// resolve returns the values of field id of frag at offsets, which must be
// in range. sorted says offsets ascend (without repeats), which lets
// overlays be applied by walking their coverage.
func (s *Store) resolve(ctx context.Context, frag *table.Fragment, id int32, t arrow.DataType, offsets []uint32, sorted bool) (arrow.Array, error) {
	var base fileColumn
	if loc, ok := frag.Locate(id); ok {
		var take []uint32
		if uint64(len(offsets))*sparseRead < frag.PhysicalRows() {
			take = offsets
		}
		var err error
		if base, err = s.baseColumn(ctx, frag, id, t, loc, take); err != nil {
			return nil, err
		}
	}
	type layer struct {
		col arrow.Array
		cov *roaring.Bitmap
	}
	var layers []layer
	for _, ov := range byPrecedence(frag.Overlays()) {
		col, cov, err := s.overlayColumn(ctx, frag, ov, id, t)
		if err != nil {
			return nil, err
		}
		if col != nil {
			layers = append(layers, layer{col, cov})
		}
	}
	if base.whole && len(layers) == 0 && sorted && uint64(len(offsets)) == frag.PhysicalRows() {
		// Every row, straight from the base file: share it.
		base.arr.Retain()
		return base.arr, nil
	}

	var srcs []arrow.Array
	picks := make([]pick, len(offsets))
	switch {
	case base.arr == nil:
		for i := range picks {
			picks[i] = pick{src: noSource}
		}
	case base.whole:
		srcs = append(srcs, base.arr)
		for i, o := range offsets {
			picks[i] = pick{src: 0, row: o}
		}
	default: // the base holds the values of offsets, in order
		srcs = append(srcs, base.arr)
		for i := range offsets {
			picks[i] = pick{src: 0, row: uint32(i)}
		}
	}
	for _, l := range layers {
		src := int32(len(srcs))
		srcs = append(srcs, l.col)
		applyOverlay(picks, offsets, sorted, l.cov, src)
	}
	return gather(t, srcs, picks), nil
}

// sparseRead: a read of fewer than one row in sparseRead of a fragment
// takes only those rows from its data file (decoding only their pages)
// instead of decoding and caching the whole column.
const sparseRead = 4

// byPrecedence returns overlays from oldest to newest: by committed
// version, and by list position between equal versions. Applying them in
// this order, each overwriting the last, gives the newest one precedence.
func byPrecedence(ovs []*lancepb.DataOverlayFile) []*lancepb.DataOverlayFile {
	if len(ovs) < 2 {
		return ovs
	}
	sorted := slices.Clone(ovs)
	slices.SortStableFunc(sorted, func(a, b *lancepb.DataOverlayFile) int {
		return cmp.Compare(a.GetCommittedVersion(), b.GetCommittedVersion())
	})
	return sorted
}

// applyOverlay points the picks of the offsets that cov covers at source
// src, row rank(offset)-1.
func applyOverlay(picks []pick, offsets []uint32, sorted bool, cov *roaring.Bitmap, src int32) {
	if sorted && cov.GetCardinality() <= uint64(len(offsets)) {
		rank := uint32(0)
		it := cov.Iterator()
		for it.HasNext() {
			o := it.Next()
			if i, found := slices.BinarySearch(offsets, o); found {
				picks[i] = pick{src: src, row: rank}
			}
			rank++
		}
		return
	}
	for i, o := range offsets {
		if cov.Contains(o) {
			picks[i] = pick{src: src, row: uint32(cov.Rank(o) - 1)}
		}
	}
}

// baseColumn returns the column of the base data file at loc that holds
// field id of frag, checked against the manifest: all of it, or only the
// rows in take when take is not nil and the column is not cached.
func (s *Store) baseColumn(ctx context.Context, frag *table.Fragment, id int32, t arrow.DataType, loc table.Location, take []uint32) (fileColumn, error) {
	const op = "read data file"
	if loc.BaseID != 0 {
		return fileColumn{}, errorf(op, ErrUnsupported, "fragment %d: data file %s under base path %d", frag.ID(), loc.Path, loc.BaseID)
	}
	return s.readColumn(ctx, op, loc.Path, loc.Column, id, t, int64(frag.PhysicalRows()), take)
}

// overlayColumn returns the values and the coverage of field id in overlay
// ov of frag, or a nil column when ov does not hold the field.
func (s *Store) overlayColumn(ctx context.Context, frag *table.Fragment, ov *lancepb.DataOverlayFile, id int32, t arrow.DataType) (arrow.Array, *roaring.Bitmap, error) {
	const op = "read overlay file"
	df := ov.GetDataFile()
	k := slices.Index(df.GetFields(), id)
	if k < 0 {
		return nil, nil, nil
	}
	path := dataDir + df.GetPath()
	var raw []byte
	switch c := ov.GetCoverage().(type) {
	case *lancepb.DataOverlayFile_SharedOffsetBitmap:
		raw = c.SharedOffsetBitmap
	case *lancepb.DataOverlayFile_FieldCoverage:
		bms := c.FieldCoverage.GetOffsetBitmaps()
		if k >= len(bms) {
			return nil, nil, formatErr(path, nil, "overlay of fragment %d has %d coverage bitmaps for %d fields", frag.ID(), len(bms), len(df.GetFields()))
		}
		raw = bms[k]
	default:
		return nil, nil, formatErr(path, nil, "overlay of fragment %d has no coverage", frag.ID())
	}
	cov, err := table.DecodeBitmap(raw)
	if err != nil {
		return nil, nil, formatErr(path, err, "coverage of field %d", id)
	}
	if !cov.IsEmpty() && uint64(cov.Maximum()) >= frag.PhysicalRows() {
		return nil, nil, formatErr(path, nil, "overlay covers offset %d of fragment %d, which has %d rows", cov.Maximum(), frag.ID(), frag.PhysicalRows())
	}
	if df.BaseId != nil {
		return nil, nil, errorf(op, ErrUnsupported, "fragment %d: overlay file %s under base path %d", frag.ID(), df.GetPath(), df.GetBaseId())
	}
	colIdx := int32(-1)
	if ci := df.GetColumnIndices(); k < len(ci) {
		colIdx = ci[k]
	}
	fc, err := s.readColumn(ctx, op, df.GetPath(), colIdx, id, t, -1, nil)
	if err != nil {
		return nil, nil, err
	}
	col := fc.arr
	if uint64(col.Len()) < cov.GetCardinality() {
		return nil, nil, formatErr(path, nil, "field %d has %d values for %d covered cells", id, col.Len(), cov.GetCardinality())
	}
	return col, cov, nil
}

// ascending reports whether offsets strictly ascend.
func ascending(offsets []uint32) bool {
	for i := 1; i < len(offsets); i++ {
		if offsets[i] <= offsets[i-1] {
			return false
		}
	}
	return true
}
