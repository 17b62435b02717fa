package evaluator

import (
	"cmp"
	"iter"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// RowSelection is a set of physical rows of a table: for each fragment, named
// by id, either the whole fragment or a set of physical offsets (deleted rows
// included, as Lance counts them).
//
// A RowSelection is immutable once built, so it may be shared and used from
// several goroutines. Build one with the constructors (WholeFragments,
// Offsets, RowRange, RowAddresses, FragmentBitmap), combine with Union or a
// SelectionBuilder, and decode one from the wire with SelectionFromProto or
// SelectionFromRowAddrTreeMap. The zero value selects nothing.
type RowSelection struct {
	frags []fragRows // ascending, unique ids; bitmaps non-empty, never modified
}

// fragRows is the selection of one fragment; a nil bitmap is the whole one.
type fragRows struct {
	id   uint64
	rows *roaring.Bitmap
}

func byID(a, b fragRows) int { return cmp.Compare(a.id, b.id) }

// Rows is the selection of one fragment: all its rows or a set of offsets.
type Rows struct {
	bm *roaring.Bitmap // nil = whole fragment
}

// Whole reports whether every row of the fragment is selected.
func (r Rows) Whole() bool { return r.bm == nil }

// Contains reports whether offset is selected.
func (r Rows) Contains(offset uint32) bool { return r.bm == nil || r.bm.Contains(offset) }

// Count returns the number of selected offsets; a whole-fragment selection
// counts as physicalRows.
func (r Rows) Count(physicalRows uint64) uint64 {
	if r.bm == nil {
		return physicalRows
	}
	return r.bm.GetCardinality()
}

// Offsets yields the selected offsets below physicalRows in ascending order;
// for a whole-fragment selection, every offset below physicalRows.
func (r Rows) Offsets(physicalRows uint64) iter.Seq[uint32] {
	return func(yield func(uint32) bool) {
		if r.bm == nil {
			for o := uint64(0); o < physicalRows && o <= math.MaxUint32; o++ {
				if !yield(uint32(o)) {
					return
				}
			}
			return
		}
		it := r.bm.Iterator()
		for it.HasNext() {
			o := it.Next()
			if uint64(o) >= physicalRows || !yield(o) {
				return
			}
		}
	}
}

// Bitmap returns a copy of the selected offsets, or nil for a
// whole-fragment selection.
func (r Rows) Bitmap() *roaring.Bitmap {
	if r.bm == nil {
		return nil
	}
	return r.bm.Clone()
}

// Len returns the number of fragments selected.
func (s RowSelection) Len() int { return len(s.frags) }

// IsEmpty reports whether nothing is selected.
func (s RowSelection) IsEmpty() bool { return len(s.frags) == 0 }

// Fragment returns the selection of one fragment.
func (s RowSelection) Fragment(id uint64) (Rows, bool) {
	i, ok := slices.BinarySearchFunc(s.frags, id, func(f fragRows, id uint64) int { return cmp.Compare(f.id, id) })
	if !ok {
		return Rows{}, false
	}
	return Rows{bm: s.frags[i].rows}, true
}

// All yields every selected fragment and its rows, in ascending fragment id.
func (s RowSelection) All() iter.Seq2[uint64, Rows] {
	return func(yield func(uint64, Rows) bool) {
		for _, f := range s.frags {
			if !yield(f.id, Rows{bm: f.rows}) {
				return
			}
		}
	}
}

// Equal reports whether s and o select the same rows (fragment by fragment;
// a whole fragment equals only a whole fragment).
func (s RowSelection) Equal(o RowSelection) bool {
	return slices.EqualFunc(s.frags, o.frags, func(a, b fragRows) bool {
		if a.id != b.id || (a.rows == nil) != (b.rows == nil) {
			return false
		}
		return a.rows == nil || a.rows.Equals(b.rows)
	})
}

// Union returns the rows selected by s or o.
func (s RowSelection) Union(o RowSelection) RowSelection { return Union(s, o) }

// String renders the selection compactly, e.g. "{3:[17 18] 5:all}". Long
// offset lists are elided.
func (s RowSelection) String() string {
	var b strings.Builder
	b.WriteByte('{')
	for i, f := range s.frags {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatUint(f.id, 10))
		b.WriteByte(':')
		if f.rows == nil {
			b.WriteString("all")
			continue
		}
		writeOffsets(&b, f.rows, 8)
	}
	b.WriteByte('}')
	return b.String()
}

// writeOffsets writes up to max offsets of bm as "[1 2 3 …+n]".
func writeOffsets(b *strings.Builder, bm *roaring.Bitmap, max int) {
	b.WriteByte('[')
	it := bm.Iterator()
	n := 0
	for it.HasNext() && n < max {
		if n > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatUint(uint64(it.Next()), 10))
		n++
	}
	if rest := bm.GetCardinality() - uint64(n); rest > 0 {
		b.WriteString(" …+")
		b.WriteString(strconv.FormatUint(rest, 10))
	}
	b.WriteByte(']')
}

// WholeFragments selects every row of the given fragments.
func WholeFragments(ids ...uint64) RowSelection {
	var b SelectionBuilder
	for _, id := range ids {
		b.AddWhole(id)
	}
	return b.Build()
}

// Offsets selects the given physical offsets of one fragment.
func Offsets(fragment uint64, offsets ...uint32) RowSelection {
	var b SelectionBuilder
	b.AddOffsets(fragment, offsets...)
	return b.Build()
}

// RowRange selects the offsets start (inclusive) to end (exclusive) of one
// fragment. An empty range selects nothing.
func RowRange(fragment uint64, start, end uint32) RowSelection {
	var b SelectionBuilder
	b.AddRange(fragment, start, end)
	return b.Build()
}

// RowAddresses selects rows by Lance row address, fragment<<32 | offset.
func RowAddresses(addrs ...uint64) RowSelection {
	var b SelectionBuilder
	for _, a := range addrs {
		b.AddAddress(a)
	}
	return b.Build()
}

// FragmentBitmap selects the offsets in rows of one fragment. rows is
// copied; an empty or nil bitmap selects nothing.
func FragmentBitmap(fragment uint64, rows *roaring.Bitmap) RowSelection {
	var b SelectionBuilder
	b.AddBitmap(fragment, rows)
	return b.Build()
}

// Union returns the rows selected by any of sels. A whole fragment absorbs
// any offsets of the same fragment.
func Union(sels ...RowSelection) RowSelection {
	switch len(sels) {
	case 0:
		return RowSelection{}
	case 1:
		return sels[0]
	}
	var b SelectionBuilder
	for _, s := range sels {
		b.AddSelection(s)
	}
	return b.Build()
}

// SelectionBuilder accumulates rows and builds a RowSelection. The zero
// value is ready to use. It is not safe for concurrent use.
type SelectionBuilder struct {
	m map[uint64]*roaring.Bitmap // nil value = whole fragment; owned by the builder
}

func (b *SelectionBuilder) bitmap(id uint64) *roaring.Bitmap {
	if b.m == nil {
		b.m = make(map[uint64]*roaring.Bitmap)
	}
	bm, ok := b.m[id]
	if !ok {
		bm = roaring.New()
		b.m[id] = bm
	}
	return bm // nil when the fragment is already whole
}

// AddWhole selects every row of fragment id.
func (b *SelectionBuilder) AddWhole(id uint64) {
	if b.m == nil {
		b.m = make(map[uint64]*roaring.Bitmap)
	}
	b.m[id] = nil
}

// AddOffsets selects offsets of fragment id.
func (b *SelectionBuilder) AddOffsets(id uint64, offsets ...uint32) {
	if len(offsets) == 0 {
		return
	}
	if bm := b.bitmap(id); bm != nil {
		bm.AddMany(offsets)
	}
}

// AddRange selects offsets start (inclusive) to end (exclusive) of fragment id.
func (b *SelectionBuilder) AddRange(id uint64, start, end uint32) {
	if end <= start {
		return
	}
	if bm := b.bitmap(id); bm != nil {
		bm.AddRange(uint64(start), uint64(end))
	}
}

// AddAddress selects one row by its Lance row address, fragment<<32 | offset.
func (b *SelectionBuilder) AddAddress(addr uint64) {
	if bm := b.bitmap(addr >> 32); bm != nil {
		bm.Add(uint32(addr))
	}
}

// AddBitmap selects the offsets in rows of fragment id; rows is not retained.
func (b *SelectionBuilder) AddBitmap(id uint64, rows *roaring.Bitmap) {
	if rows == nil || rows.IsEmpty() {
		return
	}
	if bm := b.bitmap(id); bm != nil {
		bm.Or(rows)
	}
}

// AddSelection selects everything s selects.
func (b *SelectionBuilder) AddSelection(s RowSelection) {
	for _, f := range s.frags {
		if f.rows == nil {
			b.AddWhole(f.id)
		} else {
			b.AddBitmap(f.id, f.rows)
		}
	}
}

// Build returns the selection and resets the builder.
func (b *SelectionBuilder) Build() RowSelection {
	frags := make([]fragRows, 0, len(b.m))
	for id, bm := range b.m {
		if bm != nil {
			if bm.IsEmpty() {
				continue
			}
			bm.RunOptimize()
		}
		frags = append(frags, fragRows{id: id, rows: bm})
	}
	b.m = nil
	slices.SortFunc(frags, byID)
	if len(frags) == 0 {
		return RowSelection{}
	}
	return RowSelection{frags: frags}
}

// Proto returns the structured wire form: one FragmentRows per fragment, in
// ascending id, bitmaps in run-optimized portable roaring serialization. The
// same selection always gives the same messages.
func (s RowSelection) Proto() []*lancepb.FragmentRows {
	out := make([]*lancepb.FragmentRows, 0, len(s.frags))
	for _, f := range s.frags {
		fr := &lancepb.FragmentRows{FragmentId: f.id}
		if f.rows == nil {
			fr.Selection = &lancepb.FragmentRows_WholeFragment{WholeFragment: true}
		} else {
			fr.Selection = &lancepb.FragmentRows_OffsetBitmap{OffsetBitmap: bitmapBytes(f.rows)}
		}
		out = append(out, fr)
	}
	return out
}

// bitmapBytes serializes a run-optimized copy of bm, so that equal sets
// give equal bytes however they were built or decoded.
func bitmapBytes(bm *roaring.Bitmap) []byte {
	c := bm.Clone()
	c.RunOptimize()
	b, err := c.ToBytes()
	if err != nil {
		// Writing to memory does not fail; should it ever, empty bytes fail
		// to decode, so the precondition is rejected rather than weakened.
		return nil
	}
	return b
}

// RowSet converts s to the table package's RowSet. It fails when a fragment
// id does not fit the 32 bits of a Lance row address.
func (s RowSelection) RowSet() (table.RowSet, error) {
	rs := make(table.RowSet, len(s.frags))
	for _, f := range s.frags {
		if f.id > math.MaxUint32 {
			return nil, invalidf(-1, InvalidEncoding, "fragment id %d does not fit a row address", f.id)
		}
		if f.rows == nil {
			rs[uint32(f.id)] = nil
		} else {
			rs[uint32(f.id)] = f.rows.Clone()
		}
	}
	return rs, nil
}

// MarshalRowAddrTreeMap returns s in Lance's RowAddrTreeMap byte form (the
// first revision of the precondition proposal; see table.DecodeRowAddrTreeMap).
func (s RowSelection) MarshalRowAddrTreeMap() ([]byte, error) {
	rs, err := s.RowSet()
	if err != nil {
		return nil, err
	}
	return rs.MarshalRowAddrTreeMap(), nil
}

// FromRowSet converts a table.RowSet. Bitmaps are copied; empty ones select
// nothing.
func FromRowSet(rs table.RowSet) RowSelection {
	var b SelectionBuilder
	for id, bm := range rs {
		if bm == nil {
			b.AddWhole(uint64(id))
		} else {
			b.AddBitmap(uint64(id), bm)
		}
	}
	return b.Build()
}

// SelectionFromProto decodes the structured wire form. Every entry must name
// a distinct fragment and select either the whole fragment or a non-empty,
// well-formed bitmap; anything else is an *InvalidError (its Precondition
// index is -1).
func SelectionFromProto(rows []*lancepb.FragmentRows) (RowSelection, error) {
	s, err := selectionFromProto(rows, defaultLimits, nil)
	if err != nil {
		return RowSelection{}, err.at(-1)
	}
	return s, nil
}

// SelectionFromRowAddrTreeMap decodes Lance's RowAddrTreeMap byte form.
// Malformed bytes and empty selections are an *InvalidError (index -1).
func SelectionFromRowAddrTreeMap(b []byte) (RowSelection, error) {
	s, err := selectionFromTreeMap(b, defaultLimits)
	if err != nil {
		return RowSelection{}, err.at(-1)
	}
	return s, nil
}

// selectionFromProto decodes rows, into buf if it has room for them.
func selectionFromProto(rows []*lancepb.FragmentRows, lim Limits, buf []fragRows) (RowSelection, *InvalidError) {
	if len(rows) == 0 {
		return RowSelection{}, invalidf(0, InvalidEmptySelection, "no rows selected")
	}
	if len(rows) > lim.MaxFragments {
		return RowSelection{}, invalidf(0, InvalidLimit, "%d fragments selected, limit %d", len(rows), lim.MaxFragments)
	}
	frags := buf[:0]
	if cap(buf) < len(rows) {
		frags = make([]fragRows, 0, len(rows))
	}
	total := 0
	for _, fr := range rows {
		if fr == nil {
			return RowSelection{}, invalidf(0, InvalidEncoding, "nil fragment rows entry")
		}
		if n, ok := unknownField(fr.ProtoReflect().GetUnknown()); ok {
			return RowSelection{}, invalidf(0, InvalidEncoding, "fragment %d: unknown field %d in FragmentRows", fr.GetFragmentId(), n)
		}
		id := fr.GetFragmentId()
		var bm *roaring.Bitmap
		switch sel := fr.GetSelection().(type) {
		case *lancepb.FragmentRows_WholeFragment:
			if !sel.WholeFragment {
				return RowSelection{}, invalidf(0, InvalidEncoding, "fragment %d: whole_fragment is set to false", id)
			}
		case *lancepb.FragmentRows_OffsetBitmap:
			total += len(sel.OffsetBitmap)
			if total > lim.MaxSelectionBytes {
				return RowSelection{}, invalidf(0, InvalidLimit, "selection bitmaps exceed %d bytes", lim.MaxSelectionBytes)
			}
			var err error
			if bm, err = table.DecodeBitmap(sel.OffsetBitmap); err != nil {
				return RowSelection{}, invalidf(0, InvalidEncoding, "fragment %d: %v", id, err)
			}
			if bm.IsEmpty() {
				return RowSelection{}, invalidf(0, InvalidEmptySelection, "fragment %d: empty offset bitmap", id)
			}
		default:
			return RowSelection{}, invalidf(0, InvalidEncoding, "fragment %d: neither whole_fragment nor offset_bitmap is set", id)
		}
		frags = append(frags, fragRows{id: id, rows: bm})
	}
	slices.SortFunc(frags, byID)
	for i := 1; i < len(frags); i++ {
		if frags[i].id == frags[i-1].id {
			return RowSelection{}, invalidf(0, InvalidEncoding, "fragment %d selected twice", frags[i].id)
		}
	}
	return RowSelection{frags: frags}, nil
}

func selectionFromTreeMap(b []byte, lim Limits) (RowSelection, *InvalidError) {
	if len(b) > lim.MaxSelectionBytes {
		return RowSelection{}, invalidf(0, InvalidLimit, "row_addr_tree_map is %d bytes, limit %d", len(b), lim.MaxSelectionBytes)
	}
	// Check the entry count before decoding allocates for it.
	if len(b) >= 4 {
		if n := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24; uint64(n) > uint64(lim.MaxFragments) {
			return RowSelection{}, invalidf(0, InvalidLimit, "%d fragments selected, limit %d", n, lim.MaxFragments)
		}
	}
	rs, err := table.DecodeRowAddrTreeMap(b)
	if err != nil {
		return RowSelection{}, invalidf(0, InvalidEncoding, "row_addr_tree_map: %v", err)
	}
	if len(rs) == 0 {
		return RowSelection{}, invalidf(0, InvalidEmptySelection, "row_addr_tree_map selects no fragment")
	}
	frags := make([]fragRows, 0, len(rs))
	for id, bm := range rs {
		if bm != nil && bm.IsEmpty() {
			return RowSelection{}, invalidf(0, InvalidEmptySelection, "fragment %d: empty offset bitmap", id)
		}
		frags = append(frags, fragRows{id: uint64(id), rows: bm})
	}
	slices.SortFunc(frags, byID)
	return RowSelection{frags: frags}, nil
}
