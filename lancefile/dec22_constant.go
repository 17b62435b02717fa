package lancefile

// dec22_constant.go decodes Lance 2.2 constant layouts (PageLayout tag 2,
// which 2.1 calls the all-null layout): every valid row holds the same
// value, given inline (fixed-width values of at most 32 bytes) or in a
// scalar value buffer; rows are null where the definition levels say so.

import (
	"encoding/binary"
	"slices"

	pb21 "cellguard/proto/lanceenc21pb"
)

// constant decodes a 2.2 constant layout. Its buffers are [] or [rep,
// def] with an inline value, [scalar] or [scalar, rep, def] without; a
// page without a value and without a scalar buffer is all null. Levels
// are raw u16 unless a compression is given.
func (pd *pageDecoder) constant(l *pb21.AllNullLayout) (*column, error) {
	if pd.t.kind == kindList {
		return nil, pd.unsupported("constant_layout of lists")
	}
	if err := pd.checkLayers(l.GetLayers()); err != nil {
		return nil, err
	}
	nullable := slices.Contains(l.GetLayers(), pb21.RepDefLayer_REPDEF_NULLABLE_ITEM)
	bufs := pd.bufs
	var scalar []byte
	hasValue := l.InlineValue != nil
	switch {
	case hasValue && (len(bufs) == 0 || len(bufs) == 2):
	case !hasValue && (len(bufs) == 1 || len(bufs) == 3):
		scalar, bufs = bufs[0], bufs[1:]
		hasValue = true
	case !hasValue && (len(bufs) == 0 || len(bufs) == 2):
		if !nullable {
			return nil, malformed(pd.op, "constant page of non-null rows without a value")
		}
		if len(bufs) == 0 {
			return nullPage(pd.t, pd.n), nil
		}
	default:
		return nil, malformed(pd.op, "constant page with %d buffers", len(pd.bufs))
	}
	var valid bitBuf
	if len(bufs) == 2 {
		if len(bufs[0]) != 0 || l.GetRepCompression() != nil || l.GetNumRepValues() != 0 {
			return nil, pd.unsupported("constant_layout repetition")
		}
		def := l.GetDefCompression()
		if def == nil {
			def = flat21(16)
		}
		if n := l.GetNumDefValues(); n != 0 && n != uint64(pd.n) {
			return nil, malformed(pd.op, "constant page of %d rows with %d definition levels", pd.n, n)
		}
		if !nullable {
			return nil, malformed(pd.op, "definition levels in a constant page of non-null rows")
		}
		var err error
		if valid, err = pd.constDefLevels(def, bufs[1]); err != nil {
			return nil, err
		}
	}
	if !hasValue {
		for i := range pd.n {
			if valid.get(i) {
				return nil, malformed(pd.op, "valid row %d in a constant page without a value", i)
			}
		}
		return nullPage(pd.t, pd.n), nil
	}
	one, err := pd.constantValue(l.InlineValue, scalar)
	if err != nil {
		return nil, err
	}
	// Only the rows asked for are materialized: a few bytes may declare a
	// page of billions of rows.
	c := newColumn(pd.t)
	pd.partial, pd.base = true, pd.lo
	for i := pd.lo; i < pd.hi; i++ {
		if valid.n > 0 && !valid.get(i) {
			c.appendNulls(1)
		} else {
			c.appendColumn(one, 0, 1)
		}
	}
	return c, nil
}

// constDefLevels decodes a constant page's definition levels: flat u16
// or out-of-line bit-packed, like a mini-block chunk's.
func (pd *pageDecoder) constDefLevels(e *pb21.CompressiveEncoding, b []byte) (bitBuf, error) {
	if e.GetFlat() != nil || e.GetOutOfLineBitpacking() != nil {
		return pd.defLevels(e, b, pd.n)
	}
	return bitBuf{}, pd.unsupported("constant_layout definition levels " + name21(e))
}

// constantValue returns the page's value as a one-row column. An inline
// value holds the value's bytes (one byte for a bool). A scalar buffer
// holds a length-one Arrow array: u32 number of buffers, their u32
// lengths, then the buffers; a string or binary has offsets (two i32, or
// two i64 for the large types) and bytes, a fixed-width value its bytes.
func (pd *pageDecoder) constantValue(inline, scalar []byte) (*column, error) {
	t := pd.t
	one := newColumn(t)
	if inline != nil {
		switch {
		case t.kind == kindBool && len(inline) == 1 && inline[0] <= 1:
			one.valid.appendConst(true, 1)
			one.bits.appendConst(inline[0] == 1, 1)
			one.n = 1
		case t.kind == kindFixed && len(inline) == t.width:
			one.valid.appendConst(true, 1)
			one.fixed = append(one.fixed, inline...)
			one.n = 1
		case t.kind == kindVar:
			return nil, pd.unsupported("constant_layout inline value for " + t.logical)
		default:
			return nil, malformed(pd.op, "constant inline value of %d bytes for %s", len(inline), t.logical)
		}
		return one, nil
	}
	parts, err := pd.scalarBuffers(scalar)
	if err != nil {
		return nil, err
	}
	switch t.kind {
	case kindVar:
		ow := 4
		if t.large {
			ow = 8
		}
		if len(parts) != 2 || len(parts[0]) != 2*ow {
			return nil, pd.unsupported("constant scalar of " + itoa(len(parts)) + " buffers for " + t.logical)
		}
		lo, hi := loadWord(parts[0], ow), loadWord(parts[0][ow:], ow)
		if lo > hi || hi > uint64(len(parts[1])) {
			return nil, malformed(pd.op, "constant scalar offsets %d, %d for %d bytes", lo, hi, len(parts[1]))
		}
		one.appendBytes(parts[1][lo:hi])
	case kindFixed:
		if len(parts) != 1 || len(parts[0]) != t.width {
			return nil, pd.unsupported("constant scalar of " + itoa(len(parts)) + " buffers for " + t.logical)
		}
		one.valid.appendConst(true, 1)
		one.fixed = append(one.fixed, parts[0]...)
		one.n = 1
	default:
		return nil, pd.unsupported("constant scalar for " + t.logical)
	}
	return one, nil
}

// scalarBuffers splits a scalar value buffer into its Arrow buffers.
func (pd *pageDecoder) scalarBuffers(b []byte) ([][]byte, error) {
	if len(b) < 4 {
		return nil, malformed(pd.op, "constant scalar buffer of %d bytes", len(b))
	}
	n := uint64(binary.LittleEndian.Uint32(b))
	if n > uint64(len(b)-4)/4 {
		return nil, malformed(pd.op, "constant scalar of %d buffers in %d bytes", n, len(b))
	}
	p := 4 + 4*int(n)
	parts := make([][]byte, n)
	for i := range parts {
		k := int(binary.LittleEndian.Uint32(b[4+4*i:]))
		if k > len(b)-p {
			return nil, malformed(pd.op, "constant scalar buffer %d overruns the buffer", i)
		}
		parts[i] = b[p : p+k]
		p += k
	}
	if p != len(b) {
		return nil, malformed(pd.op, "constant scalar buffer has %d bytes after its buffers", len(b)-p)
	}
	return parts, nil
}
