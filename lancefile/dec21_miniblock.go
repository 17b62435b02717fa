package lancefile

// dec21_miniblock.go decodes Lance 2.1 and 2.2 mini-block pages: chunked
// values with their definition levels, and dictionary pages. The two
// versions differ in widths only: 2.2 (has_large_chunk, which Lance 12
// requires of every 2.2 mini-block page) writes the chunk table and each
// chunk's value-buffer sizes as u32 instead of u16.

import (
	"encoding/binary"

	pb21 "cellguard/proto/lanceenc21pb"
)

// miniMaxChunk bounds the values of one mini-block chunk (Lance writes at
// most 4,096), so that a run-length or dictionary chunk cannot expand a
// few bytes into billions of values.
const miniMaxChunk = 1 << 16

// miniPage is what every chunk of a mini-block page shares.
type miniPage struct {
	def  *pb21.CompressiveEncoding // nil: no definition levels
	val  *pb21.CompressiveEncoding
	nbuf int
	dict *dictionary
	wide bool // u32 value-buffer sizes (2.2)
	// rowOpen says that the last row of a list page takes more items.
	rowOpen bool
}

func (pd *pageDecoder) miniBlock(l *pb21.MiniBlockLayout) (*column, error) {
	if pd.t.kind == kindList {
		return pd.miniBlockList(l)
	}
	switch {
	case l.GetRepCompression() != nil:
		return nil, pd.unsupported("mini_block repetition")
	case l.GetHasLargeChunk() != pd.v22:
		if pd.v22 {
			return nil, pd.unsupported("2.2 mini_block without large chunks")
		}
		return nil, pd.unsupported("mini_block large chunks")
	case l.GetNumBuffers() < 1 || l.GetNumBuffers() > 3:
		return nil, pd.unsupported("mini_block with " + itoa(int(l.GetNumBuffers())) + " value buffers")
	}
	if err := pd.checkLayers(l.GetLayers()); err != nil {
		return nil, err
	}
	if l.GetNumItems() != uint64(pd.n) {
		return nil, malformed(pd.op, "mini-block of %d items in a page of %d rows", l.GetNumItems(), pd.n)
	}
	mp := miniPage{def: l.GetDefCompression(), val: l.GetValueCompression(), nbuf: int(l.GetNumBuffers()), wide: pd.v22}
	if l.GetDictionary() != nil {
		d, err := pd.dictionary(l)
		if err != nil {
			return nil, err
		}
		mp.dict = d
	}
	if len(pd.bufs) < 2 {
		return nil, malformed(pd.op, "mini-block page has %d buffers, want 2", len(pd.bufs))
	}
	meta, data := pd.bufs[0], pd.bufs[1]
	c := newColumn(pd.t)
	pd.partial = true
	mw := 2 // bytes per chunk table entry
	if mp.wide {
		mw = 4
	}
	pos, row := 0, 0
	for i := 0; i+mw <= len(meta) && row < pd.hi; i += mw {
		m := loadWord(meta[i:], mw)
		size := (int(m>>4) + 1) * 8
		cnt := pd.n - row
		if i+mw < len(meta) {
			cnt = 1 << (m & 0xf)
		}
		if cnt > pd.n-row || cnt <= 0 || cnt > miniMaxChunk || size <= 0 || size > len(data)-pos {
			return nil, malformed(pd.op, "mini-block chunk %d (%d values, %d bytes) overruns the page", i/mw, cnt, size)
		}
		if row+cnt > pd.lo {
			if c.n == 0 {
				pd.base = row
			}
			if err := pd.chunk(c, &mp, data[pos:pos+size], cnt); err != nil {
				return nil, err
			}
		}
		pos += size
		row += cnt
	}
	return c, nil
}

// chunk decodes one mini-block chunk of cnt values into c. A chunk is its
// headers (u16 number of levels, u16 definition bytes if the page has
// definition levels, the bytes of each value buffer as u16, or u32 in
// 2.2), padded to 8; the definition levels padded to 8; each value buffer
// padded to 8.
func (pd *pageDecoder) chunk(c *column, mp *miniPage, b []byte, cnt int) error {
	nl := 1 // u16 level headers
	if mp.def != nil {
		nl++
	}
	vw := 2
	if mp.wide {
		vw = 4
	}
	hlen := 2*nl + vw*mp.nbuf
	if len(b) < hlen {
		return malformed(pd.op, "mini-block chunk of %d bytes", len(b))
	}
	hdr := make([]int, nl+mp.nbuf)
	for i := range nl {
		hdr[i] = int(binary.LittleEndian.Uint16(b[2*i:]))
	}
	for i := range mp.nbuf {
		hdr[nl+i] = int(loadWord(b[2*nl+vw*i:], vw))
	}
	p := pad(hlen, 8)
	var valid bitBuf
	sizes := hdr[1:]
	if mp.def != nil {
		if hdr[0] != cnt || hdr[1] > len(b)-p {
			return malformed(pd.op, "mini-block chunk has %d levels in %d bytes for %d values", hdr[0], hdr[1], cnt)
		}
		var err error
		if valid, err = pd.defLevels(mp.def, b[p:p+hdr[1]], cnt); err != nil {
			return err
		}
		p += pad(hdr[1], 8)
		sizes = hdr[2:]
	}
	bufs := make([][]byte, len(sizes))
	for i, n := range sizes {
		if p > len(b) || n < 0 || n > len(b)-p {
			return malformed(pd.op, "mini-block value buffer %d overruns the chunk", i)
		}
		bufs[i] = b[p : p+n]
		p += pad(n, 8)
	}
	return pd.appendChunk(c, mp, bufs, valid, cnt)
}

// appendChunk decodes a chunk's values and adds them, with validity valid
// (no bits: all valid), to c.
func (pd *pageDecoder) appendChunk(c *column, mp *miniPage, bufs [][]byte, valid bitBuf, cnt int) error {
	var v vals
	var err error
	if mp.dict != nil {
		v, err = pd.dictValues(mp, bufs, valid, cnt)
	} else {
		v, err = pd.decodeValues(mp.val, bufs, cnt)
	}
	if err != nil {
		return err
	}
	start := c.n
	src := &column{t: pd.t, n: cnt}
	if valid.n == 0 {
		src.valid.appendConst(true, cnt)
	} else {
		src.valid = valid
	}
	switch pd.t.kind {
	case kindFixed:
		src.fixed = v.fixed
		if v.itemValid != nil {
			src.items = &bitBuf{}
			src.items.appendBits(v.itemValid, 0, cnt*pd.t.dim)
		}
	case kindBool:
		src.bits.appendBits(v.fixed, 0, cnt)
	case kindVar:
		src.offs, src.data = v.offs, v.data
	}
	c.appendColumn(src, 0, cnt)
	if valid.n > 0 {
		c.zeroNullSlotsFrom(start)
	}
	return nil
}

// dictionary holds a page's decoded dictionary items: n+1 offsets into
// data for strings and binary, n values of the column's width in fixed
// otherwise.
type dictionary struct {
	offs  []int64
	data  []byte
	fixed []byte
	n     int
}

// maxDictionary bounds a decompressed dictionary; Lance keeps a page's
// dictionary far smaller than a page.
const maxDictionary = 64 << 20

// dictionary decodes a mini-block page's dictionary (page buffer 2).
// String and binary dictionaries are a variable block: u32 bits per
// offset, u32 position of the bytes, the n+1 offsets (relative to the
// bytes), then the bytes. Fixed-width dictionaries (2.2 uses them for
// numbers) are n flat values. In 2.2 either is wrapped in a general LZ4
// compression: a u32 uncompressed length, then one raw LZ4 block.
func (pd *pageDecoder) dictionary(l *pb21.MiniBlockLayout) (*dictionary, error) {
	e := l.GetDictionary()
	if len(pd.bufs) < 3 {
		return nil, malformed(pd.op, "dictionary page without its dictionary buffer")
	}
	b, n := pd.bufs[2], int(l.GetNumDictionaryItems())
	if g := e.GetGeneral(); g != nil {
		if g.GetCompression().GetScheme() != pb21.CompressionScheme_COMPRESSION_ALGORITHM_LZ4 {
			return nil, pd.unsupported("dictionary of " + name21(e))
		}
		var err error
		if b, err = pd.decompress(g.GetCompression(), b, maxDictionary); err != nil {
			return nil, err
		}
		e = g.GetValues()
	}
	if uint64(n) > uint64(len(b)) {
		return nil, malformed(pd.op, "dictionary of %d items in %d bytes", n, len(b))
	}
	switch t := pd.t; {
	case t.kind == kindFixed && t.dim == 0:
		f := e.GetFlat()
		if f == nil || f.Data != nil || f.GetBitsPerValue() != uint64(8*t.width) {
			return nil, pd.unsupported("dictionary of " + name21(e))
		}
		if len(b) != n*t.width {
			return nil, malformed(pd.op, "dictionary of %d values of %d bytes in %d bytes", n, t.width, len(b))
		}
		return &dictionary{fixed: b, n: n}, nil
	case t.kind == kindVar:
	default:
		return nil, pd.unsupported("dictionary of " + name21(e))
	}
	v := e.GetVariable()
	if v == nil || v.Values != nil || v.GetOffsets().GetFlat() == nil {
		return nil, pd.unsupported("dictionary of " + name21(e))
	}
	if len(b) < 8 {
		return nil, malformed(pd.op, "dictionary buffer of %d bytes", len(b))
	}
	bits, start := binary.LittleEndian.Uint32(b), uint64(binary.LittleEndian.Uint32(b[4:]))
	ow := uint64(bits / 8)
	if (bits != 32 && bits != 64) || uint64(bits) != v.GetOffsets().GetFlat().GetBitsPerValue() ||
		start != 8+uint64(n+1)*ow || start > uint64(len(b)) {
		return nil, malformed(pd.op, "dictionary of %d items with %d-bit offsets and bytes at %d in %d bytes", n, bits, start, len(b))
	}
	d := &dictionary{offs: make([]int64, n+1), data: b[start:], n: n}
	for i := range d.offs {
		o := loadWord(b[8+uint64(i)*ow:], int(ow))
		if o > uint64(len(d.data)) || (i > 0 && int64(o) < d.offs[i-1]) {
			return nil, malformed(pd.op, "dictionary offset %d out of order or outside the buffer", o)
		}
		d.offs[i] = int64(o)
	}
	return d, nil
}

// dictValues decodes a chunk's dictionary indices and looks them up.
func (pd *pageDecoder) dictValues(mp *miniPage, bufs [][]byte, valid bitBuf, cnt int) (vals, error) {
	bits := wordWidth(mp.val)
	if !wordBits(bits) {
		return vals{}, pd.unsupported("dictionary indices " + name21(mp.val))
	}
	idx, err := pd.decodeFixed(mp.val, bufs, cnt, int(bits))
	if err != nil {
		return vals{}, err
	}
	d, w := mp.dict, int(bits/8)
	if d.offs == nil {
		width := pd.t.width
		v := vals{fixed: make([]byte, cnt*width)}
		for i := range cnt {
			if valid.n == 0 || valid.get(i) {
				k := loadWord(idx[i*w:], w)
				if k >= uint64(d.n) {
					return vals{}, malformed(pd.op, "dictionary index %d of %d items", k, d.n)
				}
				copy(v.fixed[i*width:], d.fixed[int(k)*width:int(k+1)*width])
			}
		}
		return v, nil
	}
	v := vals{offs: make([]int64, 1, cnt+1)}
	for i := range cnt {
		if valid.n == 0 || valid.get(i) {
			k := loadWord(idx[i*w:], w)
			if k >= uint64(len(d.offs)-1) {
				return vals{}, malformed(pd.op, "dictionary index %d of %d items", k, len(d.offs)-1)
			}
			if d.offs[k+1]-d.offs[k] > int64(maxChunkBuffer-len(v.data)) {
				return vals{}, malformed(pd.op, "dictionary chunk expands past %d bytes", maxChunkBuffer)
			}
			v.data = append(v.data, d.data[d.offs[k]:d.offs[k+1]]...)
		}
		v.offs = append(v.offs, int64(len(v.data)))
	}
	return v, nil
}

// varOffsets reads the cnt+1 offsets at the start of a variable-width
// value buffer and checks that they are ordered and inside it.
func (pd *pageDecoder) varOffsets(b []byte, cnt, ow int) ([]int64, error) {
	if (cnt+1)*ow > len(b) {
		return nil, malformed(pd.op, "%d-byte value buffer too short for %d offsets", len(b), cnt+1)
	}
	offs := make([]int64, cnt+1)
	for i := range offs {
		v := loadWord(b[i*ow:], ow)
		if v > uint64(len(b)) || (i > 0 && int64(v) < offs[i-1]) || (i == 0 && v < uint64((cnt+1)*ow)) {
			return nil, malformed(pd.op, "variable offset %d (index %d) out of order or outside the %d-byte buffer", v, i, len(b))
		}
		offs[i] = int64(v)
	}
	return offs, nil
}
