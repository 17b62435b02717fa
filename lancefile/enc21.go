package lancefile

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"

	pb21 "cellguard/proto/lanceenc21pb"
)

// Format 2.1 and 2.2 page layouts, as this package writes them (all
// uncompressed). 2.2 differs in the mini-block layout only, which sets
// has_large_chunk and widens the u16 chunk table entries and value-buffer
// sizes below to u32 (Lance 12 refuses a 2.2 mini-block page without it);
// its constant layout (tag 2) with neither value nor buffers is 2.1's
// all-null layout.
//
//   - A page whose rows are all null is an all-null layout with no buffers.
//   - Values smaller than 256 bytes (numbers, bools, short strings, small
//     fixed-size lists) use the mini-block layout. Buffer 0 holds one u16
//     per chunk, ((chunk bytes/8 - 1) << 4) | log2(values in chunk), the
//     last chunk's log2 being 0; buffer 1 holds the chunks. A chunk is at
//     most 32 KiB and, except the last, holds a power-of-two number of
//     values (at most 4096). It starts with u16 headers (number of levels,
//     definition bytes if the page has nulls, value bytes), padded to 8,
//     then the definition levels (u16 each: 0 valid, 1 null) padded to 8,
//     then the values padded to 8. Variable-width values are (n+1)
//     offsets measured from the start of the value buffer, then the bytes.
//   - Larger values (e.g. a 768-float vector, long strings) use the
//     full-zip layout: per row an optional control byte (the definition
//     level), then for variable width a length, then the value. Variable
//     width pages add a second buffer with the start of every row.

const (
	miniChunkLimit = 32 << 10 // bytes in one mini-block chunk
	miniMaxValues  = 4096     // values in one mini-block chunk
	miniValueLimit = 256      // values this large or larger go full-zip
)

var (
	layerAllValid = []pb21.RepDefLayer{pb21.RepDefLayer_REPDEF_ALL_VALID_ITEM}
	layerNullable = []pb21.RepDefLayer{pb21.RepDefLayer_REPDEF_NULLABLE_ITEM}
)

func layers21(c *column) []pb21.RepDefLayer {
	if c.nulls > 0 {
		return layerNullable
	}
	return layerAllValid
}

func flat21(bits int) *pb21.CompressiveEncoding {
	return &pb21.CompressiveEncoding{Compression: &pb21.CompressiveEncoding_Flat{Flat: &pb21.Flat{BitsPerValue: uint64(bits)}}}
}

// valueEncoding21 is the compressive encoding of the column's values.
func valueEncoding21(t colType) *pb21.CompressiveEncoding {
	switch {
	case t.kind == kindBool:
		return flat21(1)
	case t.kind == kindVar:
		return &pb21.CompressiveEncoding{Compression: &pb21.CompressiveEncoding_Variable{Variable: &pb21.Variable{
			Offsets: flat21(8 * offsetBytes(t))}}}
	case t.dim > 0:
		return &pb21.CompressiveEncoding{Compression: &pb21.CompressiveEncoding_FixedSizeList{FixedSizeList: &pb21.FixedSizeList{
			ItemsPerValue: uint64(t.dim), Values: flat21(8 * t.item)}}}
	}
	return flat21(8 * t.width)
}

func offsetBytes(t colType) int {
	if t.large {
		return 8
	}
	return 4
}

// gather is one page buffer as the slices it is made of, written in
// order; the values of a fixed-width page go to the file straight from
// the Arrow arrays they came in.
type gather [][]byte

func (g gather) len() int {
	n := 0
	for _, b := range g {
		n += len(b)
	}
	return n
}

// encodePage21 returns the buffers and layout of one 2.1 page, or of a
// 2.2 page when wide is set.
func encodePage21(c *column, wide bool) ([]gather, *pb21.PageLayout) {
	if c.nulls == c.n {
		return nil, &pb21.PageLayout{Layout: &pb21.PageLayout_AllNullLayout{AllNullLayout: &pb21.AllNullLayout{Layers: layerNullable}}}
	}
	if c.maxValueBytes() < miniValueLimit {
		return encodeMiniBlock(c, wide)
	}
	if c.t.kind == kindVar {
		return encodeFullZipVar(c)
	}
	return encodeFullZipFixed(c)
}

func (c *column) maxValueBytes() int {
	switch c.t.kind {
	case kindBool:
		return 1
	case kindFixed:
		return c.t.width
	}
	m := int64(0)
	for i := range c.n {
		m = max(m, c.offs[i+1]-c.offs[i])
	}
	return int(min(m, math.MaxInt32))
}

func encodeMiniBlock(c *column, wide bool) ([]gather, *pb21.PageLayout) {
	hasDef := c.nulls > 0
	var meta []byte
	var data gather
	if c.t.kind == kindFixed && !hasDef {
		meta, data = c.miniFixed(wide)
	} else {
		meta, data = c.miniChunks(hasDef, wide)
	}
	l := &pb21.MiniBlockLayout{
		ValueCompression: valueEncoding21(c.t),
		Layers:           layers21(c),
		NumBuffers:       1,
		NumItems:         uint64(c.n),
		HasLargeChunk:    wide,
	}
	if hasDef {
		l.DefCompression = flat21(16)
	}
	return []gather{{meta}, data}, &pb21.PageLayout{Layout: &pb21.PageLayout_MiniBlockLayout{MiniBlockLayout: l}}
}

// appendChunkEntry appends a chunk's entry to the chunk table: u16, or
// u32 when wide.
func appendChunkEntry(meta []byte, v uint32, wide bool) []byte {
	if wide {
		return binary.LittleEndian.AppendUint32(meta, v)
	}
	return binary.LittleEndian.AppendUint16(meta, uint16(v))
}

// miniFixed lays out the chunks of a fixed-width page without nulls
// without copying its values: each chunk is an 8-byte header (no levels,
// the value bytes, padding), the values as they came, then zeros to a
// multiple of 8.
func (c *column) miniFixed(wide bool) ([]byte, gather) {
	w := c.t.width
	parts := append([][]byte(nil), c.fixedParts()...) // consumed below
	nchunks := 0
	for i := 0; i < c.n; nchunks++ {
		i += c.miniCount(i, false)
	}
	meta := make([]byte, 0, 2*nchunks)
	hdrs := make([]byte, 8*nchunks)
	data := make(gather, 0, 3*nchunks+len(parts))
	for i, k := 0, 0; i < c.n; k++ {
		cnt := c.miniCount(i, false)
		vbytes := cnt * w
		hdr := hdrs[8*k : 8*k+8]
		if wide {
			binary.LittleEndian.PutUint32(hdr[2:], uint32(vbytes))
		} else {
			binary.LittleEndian.PutUint16(hdr[2:], uint16(vbytes))
		}
		data = append(data, hdr)
		for need := vbytes; need > 0; {
			take := min(need, len(parts[0]))
			data = append(data, parts[0][:take])
			parts[0] = parts[0][take:]
			if len(parts[0]) == 0 {
				parts = parts[1:]
			}
			need -= take
		}
		if p := pad(vbytes, 8) - vbytes; p > 0 {
			data = append(data, zeros[:p])
		}
		log := 0
		if i+cnt < c.n {
			log = bits.TrailingZeros(uint(cnt))
		}
		meta = appendChunkEntry(meta, uint32((8+pad(vbytes, 8))/8-1)<<4|uint32(log), wide)
		i += cnt
	}
	return meta, data
}

// miniChunks lays out the chunks of any other page, copying into one
// buffer.
func (c *column) miniChunks(hasDef, wide bool) ([]byte, gather) {
	var meta []byte
	// The chunks take about the page's size: its bytes, 4 or 8 per
	// offset, 2 per definition level, and a little padding.
	data := slices.Grow(c.scratch[:0], c.size()+16*(c.n/64+1))
	defer func() { c.scratch = data[:0] }()
	for i := 0; i < c.n; {
		cnt := c.miniCount(i, hasDef)
		start := len(data)
		data = c.appendMiniChunk(data, i, cnt, hasDef, wide)
		log := 0
		if i+cnt < c.n {
			log = bits.TrailingZeros(uint(cnt))
		}
		meta = appendChunkEntry(meta, uint32((len(data)-start)/8-1)<<4|uint32(log), wide)
		i += cnt
	}
	return meta, gather{data}
}

func pad(n, to int) int { return (n + to - 1) / to * to }

// miniValueBytes is the size of the value buffer of a chunk holding rows
// [i, i+cnt), before padding to 8.
func (c *column) miniValueBytes(i, cnt int) int {
	switch c.t.kind {
	case kindBool:
		return (cnt + 7) / 8
	case kindVar:
		w := offsetBytes(c.t)
		return pad(w*(cnt+1)+int(c.offs[i+cnt]-c.offs[i]), w)
	}
	return cnt * c.t.width
}

func (c *column) miniChunkBytes(i, cnt int, hasDef bool) int {
	hdr, def := 4, 0
	if hasDef {
		hdr, def = 6, pad(2*cnt, 8)
	}
	return pad(hdr, 8) + def + pad(c.miniValueBytes(i, cnt), 8)
}

// miniCount chooses how many rows from row i go into the next chunk.
func (c *column) miniCount(i int, hasDef bool) int {
	rem := c.n - i
	if rem <= miniMaxValues && c.miniChunkBytes(i, rem, hasDef) <= miniChunkLimit {
		return rem
	}
	cnt := miniMaxValues
	for cnt > rem {
		cnt /= 2
	}
	for cnt > 1 && c.miniChunkBytes(i, cnt, hasDef) > miniChunkLimit {
		cnt /= 2
	}
	return cnt
}

func padTo(b []byte, to int, fill byte) []byte {
	for len(b)%to != 0 {
		b = append(b, fill)
	}
	return b
}

func (c *column) appendMiniChunk(dst []byte, i, cnt int, hasDef, wide bool) []byte {
	vbytes := c.miniValueBytes(i, cnt)
	if hasDef {
		dst = binary.LittleEndian.AppendUint16(dst, uint16(cnt))
		dst = binary.LittleEndian.AppendUint16(dst, uint16(2*cnt))
	} else {
		dst = binary.LittleEndian.AppendUint16(dst, 0)
	}
	if wide {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(vbytes))
	} else {
		dst = binary.LittleEndian.AppendUint16(dst, uint16(vbytes))
	}
	dst = padTo(dst, 8, 0)
	if hasDef {
		dst = c.appendDefLevels(dst, i, cnt)
	}
	switch c.t.kind {
	case kindFixed:
		dst = append(dst, c.fixed[i*c.t.width:(i+cnt)*c.t.width]...)
	case kindBool:
		var b bitBuf
		b.appendBits(c.bits.b, i, cnt)
		b.clearTail()
		dst = append(dst, b.b...)
	case kindVar:
		dst = c.appendVarChunk(dst, i, cnt)
	}
	return padTo(dst, 8, 0)
}

// appendDefLevels appends the u16 definition levels (0 valid, 1 null) of
// rows [i, i+cnt), padded to 8 bytes.
func (c *column) appendDefLevels(dst []byte, i, cnt int) []byte {
	start := len(dst)
	n := pad(2*cnt, 8)
	dst = slices.Grow(dst, n)[:start+n]
	lv := dst[start:]
	clear(lv)
	for r := range cnt {
		if !c.valid.get(i + r) {
			lv[2*r] = 1
		}
	}
	return dst
}

// appendVarChunk appends the value buffer of a variable-width chunk:
// offsets relative to the buffer start, then the bytes, padded to the
// offset width.
func (c *column) appendVarChunk(dst []byte, i, cnt int) []byte {
	w := offsetBytes(c.t)
	start := len(dst)
	first := int64(w*(cnt+1)) - c.offs[i]
	dst = slices.Grow(dst, int(first+c.offs[i+cnt])+w)
	offs := dst[start : start+w*(cnt+1)]
	if w == 8 {
		for k, o := range c.offs[i : i+cnt+1] {
			binary.LittleEndian.PutUint64(offs[8*k:], uint64(first+o))
		}
	} else {
		for k, o := range c.offs[i : i+cnt+1] {
			binary.LittleEndian.PutUint32(offs[4*k:], uint32(first+o))
		}
	}
	dst = dst[:start+len(offs)]
	dst = append(dst, c.data[c.offs[i]:c.offs[i+cnt]]...)
	for (len(dst)-start)%w != 0 {
		dst = append(dst, 0)
	}
	return dst
}

func fullZip(c *column, l *pb21.FullZipLayout) *pb21.PageLayout {
	l.NumItems, l.NumVisibleItems = uint32(c.n), uint32(c.n)
	l.ValueCompression = valueEncoding21(c.t)
	l.Layers = layers21(c)
	if c.nulls > 0 {
		l.BitsDef = 1
	}
	return &pb21.PageLayout{Layout: &pb21.PageLayout_FullZipLayout{FullZipLayout: l}}
}

func encodeFullZipFixed(c *column) ([]gather, *pb21.PageLayout) {
	l := fullZip(c, &pb21.FullZipLayout{Details: &pb21.FullZipLayout_BitsPerValue{BitsPerValue: uint32(8 * c.t.width)}})
	if c.nulls == 0 {
		return []gather{c.fixedParts()}, l
	}
	w := c.t.width
	z := make([]byte, 0, c.n*(w+1))
	for r := range c.n {
		if c.valid.get(r) {
			z = append(z, 0)
		} else {
			z = append(z, 1)
		}
		z = append(z, c.fixed[r*w:(r+1)*w]...)
	}
	return []gather{{z}}, l
}

func encodeFullZipVar(c *column) ([]gather, *pb21.PageLayout) {
	w := offsetBytes(c.t)
	l := fullZip(c, &pb21.FullZipLayout{Details: &pb21.FullZipLayout_BitsPerOffset{BitsPerOffset: uint32(8 * w)}})
	hasDef := c.nulls > 0
	starts := make([]uint64, 0, c.n+1)
	var z []byte
	for r := range c.n {
		starts = append(starts, uint64(len(z)))
		if hasDef && !c.valid.get(r) {
			z = append(z, 1)
			continue
		}
		if hasDef {
			z = append(z, 0)
		}
		v := c.data[c.offs[r]:c.offs[r+1]]
		if w == 8 {
			z = binary.LittleEndian.AppendUint64(z, uint64(len(v)))
		} else {
			z = binary.LittleEndian.AppendUint32(z, uint32(len(v)))
		}
		z = append(z, v...)
	}
	starts = append(starts, uint64(len(z)))
	return []gather{{z}, {packIndex(starts)}}, l
}

// packIndex stores positions as u32 when they fit, else u64.
func packIndex(pos []uint64) []byte {
	if pos[len(pos)-1] <= math.MaxUint32 {
		out := make([]byte, 0, 4*len(pos))
		for _, p := range pos {
			out = binary.LittleEndian.AppendUint32(out, uint32(p))
		}
		return out
	}
	out := make([]byte, 0, 8*len(pos))
	for _, p := range pos {
		out = binary.LittleEndian.AppendUint64(out, p)
	}
	return out
}
