package lancefile

import (
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// bitBuf is a growable LSB-first bitmap (Arrow's bit order).
type bitBuf struct {
	b []byte
	n int
}

func (s *bitBuf) grow(k int) {
	need := (s.n + k + 7) / 8
	for len(s.b) < need {
		s.b = append(s.b, 0)
	}
}

// appendBits appends k bits of src starting at bit off.
func (s *bitBuf) appendBits(src []byte, off, k int) {
	s.grow(k)
	if off%8 == 0 && s.n%8 == 0 {
		copy(s.b[s.n/8:], src[off/8:(off+k+7)/8])
		s.n += k
		s.clearTail()
		return
	}
	bitutil.CopyBitmap(src, off, k, s.b, s.n)
	s.n += k
}

// appendConst appends k bits equal to v.
func (s *bitBuf) appendConst(v bool, k int) {
	s.grow(k)
	if v {
		bitutil.SetBitsTo(s.b, int64(s.n), int64(k), true)
	}
	s.n += k
}

// clearTail zeroes the bits past n in the last byte.
func (s *bitBuf) clearTail() {
	if r := s.n % 8; r != 0 {
		s.b[s.n/8] &= byte(1<<r) - 1
	}
	s.b = s.b[:(s.n+7)/8]
}

func (s *bitBuf) get(i int) bool { return bitutil.BitIsSet(s.b, i) }

func (s *bitBuf) reset() { s.b, s.n = s.b[:0], 0 }

// column holds rows of one column in Lance's plain layout: a validity
// bitmap, and fixed-width values, bits, or offsets plus bytes. The writer
// collects a page in one; the reader decodes pages into one and turns it
// into an Arrow array.
type column struct {
	t     colType
	n     int
	nulls int
	valid bitBuf  // 1 = valid; always n bits
	fixed []byte  // kindFixed: n*width bytes, null slots zeroed
	bits  bitBuf  // kindBool values
	offs  []int64 // kindVar: n+1 offsets into data, offs[0] == 0
	data  []byte  // kindVar bytes
	// segs holds, for a writer's fixed-width page without nulls, the
	// values as slices of the Arrow arrays written (retained in keep,
	// segBytes in all), so that they are copied once, into the file.
	// While segs is in use fixed is empty; a null materializes them.
	segs     [][]byte
	keep     []arrow.Array
	segBytes int
	// scratch is the writer's buffer for laying out a page's chunks,
	// reused from page to page.
	scratch []byte
	// items is the validity of a fixed-size list's items (n·dim bits),
	// nil while every item is valid. Only the reader sets it: Lance files
	// may hold null items, the writer refuses them.
	items *bitBuf
	// lofs and elems hold a list column (reader only): row i's items are
	// elems' rows [lofs[i], lofs[i+1]).
	lofs  []int64
	elems *column
	// allNull marks a decoded page of n nulls that holds no buffers; its
	// rows are materialized only when copied out, so a tiny file cannot
	// make a reader allocate for billions of null rows.
	allNull bool
}

// nullPage returns an all-null page of n rows without allocating them.
func nullPage(t colType, n int) *column {
	return &column{t: t, n: n, nulls: n, allNull: true}
}

func newColumn(t colType) *column {
	c := &column{t: t}
	switch t.kind {
	case kindVar:
		c.offs = []int64{0}
	case kindList:
		c.lofs = []int64{0}
		c.elems = newColumn(*t.elem)
	}
	return c
}

func (c *column) reset() {
	c.releaseSegs()
	c.n, c.nulls = 0, 0
	c.valid.reset()
	c.fixed, c.data = c.fixed[:0], c.data[:0]
	c.bits.reset()
	if c.offs != nil {
		c.offs = c.offs[:1]
	}
}

// size is the number of value bytes the column holds.
func (c *column) size() int {
	return c.segBytes + len(c.fixed) + len(c.data) + len(c.bits.b) + 8*len(c.offs) + len(c.valid.b)
}

// releaseSegs drops the references to written Arrow arrays.
func (c *column) releaseSegs() {
	for _, a := range c.keep {
		a.Release()
	}
	clear(c.keep)
	clear(c.segs)
	c.keep, c.segs, c.segBytes = c.keep[:0], c.segs[:0], 0
}

// materialize copies the segments into fixed, before a null is added.
func (c *column) materialize() {
	if len(c.segs) == 0 {
		return
	}
	if cap(c.fixed) < c.segBytes {
		c.fixed = make([]byte, 0, c.segBytes)
	}
	for _, s := range c.segs {
		c.fixed = append(c.fixed, s...)
	}
	c.releaseSegs()
}

// fixedParts returns the fixed-width values of the page, in order, as
// one or more slices.
func (c *column) fixedParts() [][]byte {
	if len(c.segs) > 0 {
		return c.segs
	}
	return [][]byte{c.fixed}
}

// appendNulls appends k null rows.
func (c *column) appendNulls(k int) {
	c.materialize()
	c.valid.appendConst(false, k)
	c.n += k
	c.nulls += k
	switch c.t.kind {
	case kindFixed:
		c.fixed = append(c.fixed, make([]byte, k*c.t.width)...)
		if c.items != nil {
			c.items.appendConst(true, k*c.t.dim)
		}
	case kindBool:
		c.bits.appendConst(false, k)
	case kindVar:
		end := c.offs[len(c.offs)-1]
		for range k {
			c.offs = append(c.offs, end)
		}
	case kindList:
		end := c.lofs[len(c.lofs)-1]
		for range k {
			c.lofs = append(c.lofs, end)
		}
	}
}

// appendColumn appends rows [from, to) of src, which has the same type.
func (c *column) appendColumn(src *column, from, to int) {
	k := to - from
	if src.allNull {
		c.appendNulls(k)
		return
	}
	c.valid.appendBits(src.valid.b, from, k)
	c.nulls += k - bitutil.CountSetBits(src.valid.b, from, k)
	c.n += k
	switch c.t.kind {
	case kindFixed:
		w := c.t.width
		c.fixed = append(c.fixed, src.fixed[from*w:to*w]...)
		c.appendItems(src, from, k)
	case kindBool:
		c.bits.appendBits(src.bits.b, from, k)
	case kindVar:
		base, start := int64(len(c.data)), src.offs[from]
		for i := from + 1; i <= to; i++ {
			c.offs = append(c.offs, base+src.offs[i]-start)
		}
		c.data = append(c.data, src.data[start:src.offs[to]]...)
	case kindList:
		base, start := c.lofs[len(c.lofs)-1], src.lofs[from]
		for i := from + 1; i <= to; i++ {
			c.lofs = append(c.lofs, base+src.lofs[i]-start)
		}
		c.elems.appendColumn(src.elems, int(start), int(src.lofs[to]))
	}
}

// appendItems appends the item validity of rows [from, from+k) of src,
// starting c's item bitmap when src is the first to have null items.
func (c *column) appendItems(src *column, from, k int) {
	if src.items == nil && c.items == nil {
		return
	}
	d := c.t.dim
	if c.items == nil {
		c.items = &bitBuf{}
		c.items.appendConst(true, (c.n-k)*d)
	}
	if src.items == nil {
		c.items.appendConst(true, k*d)
		return
	}
	c.items.appendBits(src.items.b, from*d, k*d)
}

// appendArrow appends rows [from, to) of an Arrow array of the column's
// type. It refuses nulls inside fixed-size lists.
func (c *column) appendArrow(a arrow.Array, from, to int) error {
	k := to - from
	d := a.Data()
	off := d.Offset() + from
	nulls := 0
	if a.NullN() > 0 {
		nulls = k - bitutil.CountSetBits(d.Buffers()[0].Bytes(), off, k)
	}
	if nulls == 0 {
		c.valid.appendConst(true, k)
	} else {
		c.valid.appendBits(d.Buffers()[0].Bytes(), off, k)
	}
	c.nulls += nulls
	start := c.n
	c.n += k
	switch c.t.kind {
	case kindFixed:
		return c.appendFixed(a, off, k, start, nulls)
	case kindBool:
		c.bits.appendBits(d.Buffers()[1].Bytes(), off, k)
	case kindVar:
		c.appendVar(a, from, to)
	}
	return nil
}

func (c *column) appendFixed(a arrow.Array, off, k, start, nulls int) error {
	w := c.t.width
	var src []byte
	lo := off * w // byte offset of the first value
	if c.t.dim == 0 {
		src = a.Data().Buffers()[1].Bytes()
	} else {
		vals := a.(*array.FixedSizeList).ListValues()
		vd := vals.Data()
		first, count := vd.Offset()+off*c.t.dim, k*c.t.dim
		if vals.NullN() > 0 && bitutil.CountSetBits(vd.Buffers()[0].Bytes(), first, count) != count {
			// Items of null lists may be null; items of valid lists may not.
			for i := range k {
				if c.valid.get(start+i) && bitutil.CountSetBits(vd.Buffers()[0].Bytes(), first+i*c.t.dim, c.t.dim) != c.t.dim {
					return inputErr("fixed-size list value has null items; only whole-list nulls are stored")
				}
			}
		}
		src, lo = vd.Buffers()[1].Bytes(), first*c.t.item
	}
	if nulls == 0 && c.nulls == 0 && len(c.fixed) == 0 {
		a.Retain()
		c.keep = append(c.keep, a)
		c.segs = append(c.segs, src[lo:lo+k*w])
		c.segBytes += k * w
		return nil
	}
	c.materialize()
	begin := len(c.fixed)
	c.fixed = append(c.fixed, src[lo:lo+k*w]...)
	if nulls > 0 {
		for i := range k {
			if !c.valid.get(start + i) {
				clear(c.fixed[begin+i*w : begin+(i+1)*w])
			}
		}
	}
	return nil
}

// varOffsets returns a function giving the offset of value i (relative to
// the array's own start) into the returned data buffer, for a string or
// binary array.
func varOffsets(a arrow.Array) (func(i int) int64, []byte) {
	d := a.Data()
	var data []byte
	if b := d.Buffers()[2]; b != nil {
		data = b.Bytes()
	}
	ob := d.Buffers()[1].Bytes()
	if a.DataType().Layout().Buffers[1].ByteWidth == 8 {
		o := arrow.Int64Traits.CastFromBytes(ob)[d.Offset():]
		return func(i int) int64 { return o[i] }, data
	}
	o := arrow.Int32Traits.CastFromBytes(ob)[d.Offset():]
	return func(i int) int64 { return int64(o[i]) }, data
}

// reserve grows a string or binary column's buffers once for rows
// [from, to) of a, to at least a page's worth (limit bytes), so that a
// page fills without repeated growth and copying.
func (c *column) reserve(a arrow.Array, from, to, limit int) {
	if c.t.kind != kindVar {
		return
	}
	offAt, _ := varOffsets(a)
	need := int(offAt(to) - offAt(from))
	if free := cap(c.data) - len(c.data); free < need {
		c.data = slices.Grow(c.data, max(need, limit-len(c.data)))
	}
	c.offs = slices.Grow(c.offs, to-from)
}

func (c *column) appendVar(a arrow.Array, from, to int) {
	d := a.Data()
	var data []byte
	if b := d.Buffers()[2]; b != nil {
		data = b.Bytes()
	}
	var valid []byte
	if a.NullN() > 0 {
		valid = d.Buffers()[0].Bytes()
	}
	ob := d.Buffers()[1].Bytes()
	if a.DataType().Layout().Buffers[1].ByteWidth == 8 {
		appendVarOffsets(c, arrow.Int64Traits.CastFromBytes(ob)[d.Offset():], data, valid, d.Offset(), from, to)
	} else {
		appendVarOffsets(c, arrow.Int32Traits.CastFromBytes(ob)[d.Offset():], data, valid, d.Offset(), from, to)
	}
}

// appendVarOffsets appends rows [from, to) of a string or binary array
// given its offsets o (from the array's start), its bytes and its
// validity bitmap (nil: no nulls; bit voff+i is row i). The bytes are
// copied in one piece unless a null row covers bytes, which a null must
// not keep.
func appendVarOffsets[T int32 | int64](c *column, o []T, data, valid []byte, voff, from, to int) {
	lo := int64(o[from])
	base := int64(len(c.data)) - lo
	c.offs = slices.Grow(c.offs, to-from)
	for i := from; i < to; i++ {
		if valid != nil && o[i+1] != o[i] && !bitutil.BitIsSet(valid, voff+i) {
			c.offs = c.offs[:len(c.offs)-(i-from)]
			appendVarSlow(c, o, data, valid, voff, from, to)
			return
		}
		c.offs = append(c.offs, base+int64(o[i+1]))
	}
	c.data = append(c.data, data[lo:int64(o[to])]...)
}

func appendVarSlow[T int32 | int64](c *column, o []T, data, valid []byte, voff, from, to int) {
	for i := from; i < to; i++ {
		if bitutil.BitIsSet(valid, voff+i) {
			c.data = append(c.data, data[o[i]:o[i+1]]...)
		}
		c.offs = append(c.offs, int64(len(c.data)))
	}
}

// toArrow returns the column's rows as an Arrow array. It copies nothing
// except the offsets; the column must not be changed afterwards.
func (c *column) toArrow() (arrow.Array, error) {
	var valid *memory.Buffer
	if c.nulls > 0 {
		c.valid.clearTail()
		valid = memory.NewBufferBytes(c.valid.b)
	}
	var d arrow.ArrayData
	switch c.t.kind {
	case kindFixed:
		vals := memory.NewBufferBytes(c.fixed)
		if c.t.dim == 0 {
			d = array.NewData(c.t.dt, c.n, []*memory.Buffer{valid, vals}, nil, c.nulls, 0)
			break
		}
		elem := c.t.dt.(*arrow.FixedSizeListType).Elem()
		var items *memory.Buffer
		itemNulls := 0
		if c.items != nil {
			c.items.clearTail()
			items = memory.NewBufferBytes(c.items.b)
			itemNulls = c.n*c.t.dim - bitutil.CountSetBits(c.items.b, 0, c.n*c.t.dim)
		}
		child := array.NewData(elem, c.n*c.t.dim, []*memory.Buffer{items, vals}, nil, itemNulls, 0)
		defer child.Release()
		d = array.NewData(c.t.dt, c.n, []*memory.Buffer{valid}, []arrow.ArrayData{child}, c.nulls, 0)
	case kindBool:
		c.bits.grow(0)
		d = array.NewData(c.t.dt, c.n, []*memory.Buffer{valid, memory.NewBufferBytes(c.bits.b)}, nil, c.nulls, 0)
	case kindVar:
		offs, err := c.arrowOffsets()
		if err != nil {
			return nil, err
		}
		d = array.NewData(c.t.dt, c.n, []*memory.Buffer{valid, memory.NewBufferBytes(offs), memory.NewBufferBytes(c.data)}, nil, c.nulls, 0)
	case kindList:
		if last := c.lofs[len(c.lofs)-1]; last > 1<<31-1 {
			return nil, inputErr("%d list items exceed 32-bit Arrow offsets", last)
		}
		o := make([]int32, len(c.lofs))
		for i, v := range c.lofs {
			o[i] = int32(v)
		}
		elems, err := c.elems.toArrow()
		if err != nil {
			return nil, err
		}
		defer elems.Release()
		d = array.NewData(c.t.dt, c.n, []*memory.Buffer{valid, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(o))}, []arrow.ArrayData{elems.Data()}, c.nulls, 0)
	}
	defer d.Release()
	return array.MakeFromData(d), nil
}

// arrowOffsets encodes offs as Arrow's 32- or 64-bit offsets buffer.
func (c *column) arrowOffsets() ([]byte, error) {
	if c.t.large {
		o := make([]int64, len(c.offs))
		copy(o, c.offs)
		return arrow.Int64Traits.CastToBytes(o), nil
	}
	if last := c.offs[len(c.offs)-1]; last > 1<<31-1 {
		return nil, inputErr("%d bytes of %s values exceed 32-bit Arrow offsets; use the large type", last, c.t.logical)
	}
	o := make([]int32, len(c.offs))
	for i, v := range c.offs {
		o[i] = int32(v)
	}
	return arrow.Int32Traits.CastToBytes(o), nil
}

// appendBytes appends one valid variable-width value.
func (c *column) appendBytes(v []byte) {
	c.valid.appendConst(true, 1)
	c.n++
	c.data = append(c.data, v...)
	c.offs = append(c.offs, int64(len(c.data)))
}

// zeroNullSlots clears the fixed-width values of null rows, so that what
// a file holds in a null slot never shows through.
func (c *column) zeroNullSlots() { c.zeroNullSlotsFrom(0) }

// zeroNullSlotsFrom is zeroNullSlots for rows from start on.
func (c *column) zeroNullSlotsFrom(start int) {
	if c.t.kind == kindVar || c.t.kind == kindList {
		return
	}
	for i := start; i < c.n; i++ {
		if c.valid.get(i) {
			continue
		}
		if c.t.kind == kindBool {
			c.bits.b[i/8] &^= 1 << (i % 8)
		} else {
			clear(c.fixed[i*c.t.width : (i+1)*c.t.width])
		}
	}
}
