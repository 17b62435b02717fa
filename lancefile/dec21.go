package lancefile

import (
	"encoding/binary"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pb21 "cellguard/proto/lanceenc21pb"
)

// name21 is the protobuf name of a CompressiveEncoding's arm, e.g.
// "inline_bitpacking"; a general compression names its scheme too.
func name21(e *pb21.CompressiveEncoding) string {
	if e == nil || e.GetCompression() == nil {
		return "none"
	}
	if g := e.GetGeneral(); g != nil {
		return "general(" + schemeName(g.GetCompression().GetScheme()) + ")"
	}
	m := e.ProtoReflect()
	if fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("compression")); fd != nil {
		return string(fd.Name())
	}
	return "unknown"
}

func schemeName(s pb21.CompressionScheme) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "COMPRESSION_ALGORITHM_"))
}

func (pd *pageDecoder) unsupported(name string) error {
	return &UnsupportedEncodingError{Name: name, Op: pd.op}
}

// decode21 decodes a 2.1 page: all-null, mini-block or full-zip, without
// repetition, with plain or compressed values (see compress21.go).
func (pd *pageDecoder) decode21(a *anypb.Any) (*column, error) {
	if messageName(a) != "lance.encodings21.PageLayout" {
		return nil, malformed(pd.op, "2.1 page encoding is a %q", a.GetTypeUrl())
	}
	l := &pb21.PageLayout{}
	if err := proto.Unmarshal(a.GetValue(), l); err != nil {
		return nil, malformed(pd.op, "2.1 page layout: %v", err)
	}
	switch {
	case l.GetMiniBlockLayout() != nil:
		return pd.miniBlock(l.GetMiniBlockLayout())
	case l.GetFullZipLayout() != nil:
		return pd.fullZip(l.GetFullZipLayout())
	case l.GetAllNullLayout() != nil:
		an := l.GetAllNullLayout()
		if an.InlineValue != nil || len(pd.bufs) > 0 || an.GetDefCompression() != nil {
			return nil, pd.unsupported("constant_layout")
		}
		if err := pd.checkLayers(an.GetLayers()); err != nil {
			return nil, err
		}
		return nullPage(pd.t, pd.n), nil
	case l.GetBlobLayout() != nil:
		return nil, pd.unsupported("blob_layout")
	case l.GetSparseLayout() != nil:
		return nil, pd.unsupported("sparse_layout")
	}
	return nil, malformed(pd.op, "page layout without an arm")
}

// checkLayers accepts the single item layer of a top-level column.
func (pd *pageDecoder) checkLayers(ls []pb21.RepDefLayer) error {
	if len(ls) != 1 {
		return pd.unsupported("repdef layers " + layersString(ls))
	}
	switch ls[0] {
	case pb21.RepDefLayer_REPDEF_ALL_VALID_ITEM, pb21.RepDefLayer_REPDEF_NULLABLE_ITEM:
		return nil
	}
	return pd.unsupported("repdef layers " + layersString(ls))
}

func layersString(ls []pb21.RepDefLayer) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = strings.TrimPrefix(l.String(), "REPDEF_")
	}
	return "[" + strings.Join(s, ",") + "]"
}

// vals is a run of decoded values in plain form.
type vals struct {
	fixed     []byte  // kindFixed: cnt*width bytes; kindBool: cnt bits
	offs      []int64 // kindVar: cnt+1 offsets into data
	data      []byte
	itemValid []byte // fixed-size list item validity bits; nil: all valid
}

// wordWidth is the uncompressed width in bits an encoding of fixed-width
// words declares (flat, bit-packing, or run-length, byte-stream-split or
// general compression of those), or 0.
func wordWidth(e *pb21.CompressiveEncoding) uint64 {
	switch {
	case e.GetGeneral() != nil:
		return wordWidth(e.GetGeneral().GetValues())
	case e.GetByteStreamSplit() != nil:
		return wordWidth(e.GetByteStreamSplit().GetValues())
	case e.GetRle() != nil:
		return wordWidth(e.GetRle().GetValues())
	case e.GetFlat() != nil:
		return e.GetFlat().GetBitsPerValue()
	case e.GetInlineBitpacking() != nil:
		return e.GetInlineBitpacking().GetUncompressedBitsPerValue()
	case e.GetOutOfLineBitpacking() != nil:
		return e.GetOutOfLineBitpacking().GetUncompressedBitsPerValue()
	}
	return 0
}

// decodeFixed decodes cnt fixed-width values of bits bits (a multiple of
// 8) from a chunk's value buffers: flat, inline bit-packed, or run-length
// encoded.
func (pd *pageDecoder) decodeFixed(e *pb21.CompressiveEncoding, bufs [][]byte, cnt, bits int) ([]byte, error) {
	if len(bufs) == 0 {
		return nil, malformed(pd.op, "no value buffer")
	}
	switch {
	case e.GetFlat() != nil:
		f := e.GetFlat()
		if f.Data != nil {
			return nil, pd.unsupported("flat(" + schemeName(f.GetData().GetScheme()) + ")")
		}
		if f.GetBitsPerValue() != uint64(bits) {
			return nil, malformed(pd.op, "flat values of %d bits, want %d", f.GetBitsPerValue(), bits)
		}
		if len(bufs[0]) < cnt*bits/8 {
			return nil, malformed(pd.op, "%d value bytes for %d values of %d bits", len(bufs[0]), cnt, bits)
		}
		return bufs[0][:cnt*bits/8], nil
	case e.GetInlineBitpacking() != nil:
		ib := e.GetInlineBitpacking()
		if ib.Values != nil {
			return nil, pd.unsupported("inline_bitpacking(" + schemeName(ib.GetValues().GetScheme()) + ")")
		}
		if ib.GetUncompressedBitsPerValue() != uint64(bits) || !wordBits(uint64(bits)) {
			return nil, malformed(pd.op, "inline bit-packing of %d-bit words, want %d", ib.GetUncompressedBitsPerValue(), bits)
		}
		return pd.inlineBitpacked(bufs[0], bits, cnt)
	case e.GetGeneral() != nil:
		bufs, err := pd.general(e.GetGeneral(), bufs)
		if err != nil {
			return nil, err
		}
		return pd.decodeFixed(e.GetGeneral().GetValues(), bufs, cnt, bits)
	case e.GetByteStreamSplit() != nil:
		f := e.GetByteStreamSplit().GetValues().GetFlat()
		if f == nil || f.Data != nil || f.GetBitsPerValue() != uint64(bits) || bits%8 != 0 {
			return nil, pd.unsupported("byte_stream_split(" + name21(e.GetByteStreamSplit().GetValues()) + ")")
		}
		return pd.byteStreamSplit(bufs[0], bits/8, cnt)
	case e.GetRle() != nil:
		r := e.GetRle()
		vw, lw := wordWidth(r.GetValues()), wordWidth(r.GetRunLengths())
		if r.GetValues().GetFlat() == nil || r.GetRunLengths().GetFlat() == nil ||
			r.GetValues().GetFlat().Data != nil || r.GetRunLengths().GetFlat().Data != nil {
			return nil, pd.unsupported("rle(" + name21(r.GetValues()) + ", " + name21(r.GetRunLengths()) + ")")
		}
		if vw != uint64(bits) || !wordBits(vw) || !(lw == 8 || lw == 16 || lw == 32) || len(bufs) < 2 {
			return nil, malformed(pd.op, "rle of %d-bit values with %d-bit run lengths for %d-bit values", vw, lw, bits)
		}
		return pd.runLengths(bufs[0], bufs[1], bits/8, int(lw/8), cnt)
	}
	return nil, pd.unsupported(name21(e))
}

// decodeVar decodes cnt variable-width values: variable (offsets from
// the start of the buffer, then the bytes) or FSST over variable.
func (pd *pageDecoder) decodeVar(e *pb21.CompressiveEncoding, bufs [][]byte, cnt int) (offs []int64, data []byte, err error) {
	if len(bufs) == 0 {
		return nil, nil, malformed(pd.op, "no value buffer")
	}
	if g := e.GetGeneral(); g != nil {
		bufs, err := pd.general(g, bufs)
		if err != nil {
			return nil, nil, err
		}
		return pd.decodeVar(g.GetValues(), bufs, cnt)
	}
	if f := e.GetFsst(); f != nil {
		st, err := pd.parseFSST(f.GetSymbolTable())
		if err != nil {
			return nil, nil, err
		}
		offs, data, err := pd.decodeVar(f.GetValues(), bufs, cnt)
		if err != nil {
			return nil, nil, err
		}
		return pd.fsstAll(st, offs, data)
	}
	v := e.GetVariable()
	if v == nil {
		return nil, nil, pd.unsupported(name21(e))
	}
	if v.Values != nil {
		return nil, nil, pd.unsupported("variable(" + schemeName(v.GetValues().GetScheme()) + ")")
	}
	of := v.GetOffsets().GetFlat()
	if of == nil || of.Data != nil {
		return nil, nil, pd.unsupported("variable offsets " + name21(v.GetOffsets()))
	}
	if b := of.GetBitsPerValue(); b != 32 && b != 64 {
		return nil, nil, malformed(pd.op, "variable offsets of %d bits", b)
	}
	offs, err = pd.varOffsets(bufs[0], cnt, int(of.GetBitsPerValue()/8))
	return offs, bufs[0], err
}

// fsstAll decompresses every value of a variable-width run.
func (pd *pageDecoder) fsstAll(st *fsstTable, offs []int64, data []byte) ([]int64, []byte, error) {
	out := make([]int64, len(offs))
	var dst []byte
	for i := 1; i < len(offs); i++ {
		var ok bool
		if dst, ok = st.decode(dst, data[offs[i-1]:offs[i]]); !ok {
			return nil, nil, malformed(pd.op, "FSST value %d is truncated or uses an unknown code", i-1)
		}
		out[i] = int64(len(dst))
	}
	return out, dst, nil
}

// decodeValues decodes cnt values of the column's type from a chunk's
// value buffers.
func (pd *pageDecoder) decodeValues(e *pb21.CompressiveEncoding, bufs [][]byte, cnt int) (vals, error) {
	var v vals
	var err error
	switch t := pd.t; {
	case t.kind == kindBool:
		f := e.GetFlat()
		if f == nil || f.Data != nil || f.GetBitsPerValue() != 1 {
			return v, pd.unsupported("bool values " + name21(e))
		}
		if len(bufs) == 0 || len(bufs[0])*8 < cnt {
			return v, malformed(pd.op, "value buffer too short for %d bools", cnt)
		}
		v.fixed = bufs[0]
	case t.kind == kindVar:
		v.offs, v.data, err = pd.decodeVar(e, bufs, cnt)
	case t.dim > 0:
		f := e.GetFixedSizeList()
		if f == nil {
			return v, pd.unsupported(name21(e))
		}
		if f.GetItemsPerValue() != uint64(t.dim) {
			return v, malformed(pd.op, "fixed-size list of %d items, the schema says %d", f.GetItemsPerValue(), t.dim)
		}
		if f.GetHasValidity() {
			if len(bufs) < 2 || len(bufs[0])*8 < cnt*t.dim {
				return v, malformed(pd.op, "fixed-size list item validity too short for %d items", cnt*t.dim)
			}
			v.itemValid, bufs = bufs[0], bufs[1:]
		}
		v.fixed, err = pd.decodeFixed(f.GetValues(), bufs, cnt*t.dim, 8*t.item)
	default:
		v.fixed, err = pd.decodeFixed(e, bufs, cnt, 8*t.width)
	}
	return v, err
}

// defLevels decodes a chunk's n definition levels into a validity bitmap
// (level 0 valid, 1 null): flat u16, or u16 words bit-packed inline or
// out of line.
func (pd *pageDecoder) defLevels(e *pb21.CompressiveEncoding, b []byte, n int) (bitBuf, error) {
	var words []byte
	var err error
	switch {
	case e.GetFlat() != nil && e.GetFlat().Data == nil && e.GetFlat().GetBitsPerValue() == 16:
		if len(b) < 2*n {
			return bitBuf{}, malformed(pd.op, "%d bytes of definition levels for %d values", len(b), n)
		}
		words = b
	case e.GetInlineBitpacking() != nil && e.GetInlineBitpacking().Values == nil:
		if e.GetInlineBitpacking().GetUncompressedBitsPerValue() != 16 {
			return bitBuf{}, pd.unsupported("definition levels " + name21(e))
		}
		words, err = pd.inlineBitpacked(b, 16, n)
	case e.GetOutOfLineBitpacking() != nil:
		ob := e.GetOutOfLineBitpacking()
		f := ob.GetValues().GetFlat()
		if ob.GetUncompressedBitsPerValue() != 16 || f == nil || f.Data != nil || f.GetBitsPerValue() > 16 {
			return bitBuf{}, pd.unsupported("definition levels out_of_line_bitpacking(" + name21(ob.GetValues()) + ")")
		}
		words, err = pd.outOfLineBitpacked(b, 16, int(f.GetBitsPerValue()), n)
	default:
		return bitBuf{}, pd.unsupported("definition levels " + name21(e))
	}
	if err != nil {
		return bitBuf{}, err
	}
	var valid bitBuf
	valid.grow(n)
	for i := range n {
		switch binary.LittleEndian.Uint16(words[2*i:]) {
		case 0:
			valid.b[i/8] |= 1 << (i % 8)
		case 1:
		default:
			return bitBuf{}, malformed(pd.op, "definition level %d in a top-level column", binary.LittleEndian.Uint16(words[2*i:]))
		}
	}
	valid.n = n
	return valid, nil
}

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
}

func (pd *pageDecoder) miniBlock(l *pb21.MiniBlockLayout) (*column, error) {
	switch {
	case l.GetRepCompression() != nil:
		return nil, pd.unsupported("mini_block repetition")
	case l.GetHasLargeChunk():
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
	mp := miniPage{def: l.GetDefCompression(), val: l.GetValueCompression(), nbuf: int(l.GetNumBuffers())}
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
	pos, row := 0, 0
	for i := 0; i+1 < len(meta) && row < pd.hi; i += 2 {
		m := binary.LittleEndian.Uint16(meta[i:])
		size := (int(m>>4) + 1) * 8
		cnt := pd.n - row
		if i+2 < len(meta) {
			cnt = 1 << (m & 0xf)
		}
		if cnt > pd.n-row || cnt <= 0 || cnt > miniMaxChunk || size > len(data)-pos {
			return nil, malformed(pd.op, "mini-block chunk %d (%d values, %d bytes) overruns the page", i/2, cnt, size)
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

// chunk decodes one mini-block chunk of cnt values into c. A chunk is u16
// headers (number of levels, definition bytes if the page has definition
// levels, bytes of each value buffer), padded to 8; the definition levels
// padded to 8; each value buffer padded to 8.
func (pd *pageDecoder) chunk(c *column, mp *miniPage, b []byte, cnt int) error {
	nh := 1 + mp.nbuf
	if mp.def != nil {
		nh++
	}
	if len(b) < 2*nh {
		return malformed(pd.op, "mini-block chunk of %d bytes", len(b))
	}
	hdr := make([]int, nh)
	for i := range hdr {
		hdr[i] = int(binary.LittleEndian.Uint16(b[2*i:]))
	}
	p := pad(2*nh, 8)
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
		if p > len(b) || n > len(b)-p {
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

// dictionary holds a page's decoded dictionary items.
type dictionary struct {
	offs []int64
	data []byte
}

// dictionary decodes a mini-block page's dictionary (page buffer 2). Only
// string and binary dictionaries are decoded; they are stored as a
// variable block: u32 bits per offset, u32 position of the bytes, the
// n+1 offsets (relative to the bytes), then the bytes.
func (pd *pageDecoder) dictionary(l *pb21.MiniBlockLayout) (*dictionary, error) {
	v := l.GetDictionary().GetVariable()
	if pd.t.kind != kindVar || v == nil || v.Values != nil || v.GetOffsets().GetFlat() == nil {
		return nil, pd.unsupported("dictionary of " + name21(l.GetDictionary()))
	}
	if len(pd.bufs) < 3 {
		return nil, malformed(pd.op, "dictionary page without its dictionary buffer")
	}
	b, n := pd.bufs[2], int(l.GetNumDictionaryItems())
	if len(b) < 8 {
		return nil, malformed(pd.op, "dictionary buffer of %d bytes", len(b))
	}
	bits, start := binary.LittleEndian.Uint32(b), uint64(binary.LittleEndian.Uint32(b[4:]))
	ow := uint64(bits / 8)
	if (bits != 32 && bits != 64) || uint64(bits) != v.GetOffsets().GetFlat().GetBitsPerValue() ||
		uint64(n) > uint64(len(b)) || start != 8+uint64(n+1)*ow || start > uint64(len(b)) {
		return nil, malformed(pd.op, "dictionary of %d items with %d-bit offsets and bytes at %d in %d bytes", n, bits, start, len(b))
	}
	d := &dictionary{offs: make([]int64, n+1), data: b[start:]}
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

func (pd *pageDecoder) fullZip(l *pb21.FullZipLayout) (*column, error) {
	if l.GetBitsRep() != 0 {
		return nil, pd.unsupported("full_zip repetition")
	}
	if err := pd.checkLayers(l.GetLayers()); err != nil {
		return nil, err
	}
	if l.GetBitsDef() > 1 {
		return nil, pd.unsupported("full_zip definition of " + itoa(int(l.GetBitsDef())) + " bits")
	}
	if int(l.GetNumItems()) != pd.n {
		return nil, malformed(pd.op, "full-zip of %d items in a page of %d rows", l.GetNumItems(), pd.n)
	}
	if len(pd.bufs) < 1 {
		return nil, malformed(pd.op, "full-zip page without buffers")
	}
	ctrl := int(l.GetBitsDef())
	e := l.GetValueCompression()
	if pd.t.kind == kindVar {
		var st *fsstTable
		if f := e.GetFsst(); f != nil {
			var err error
			if st, err = pd.parseFSST(f.GetSymbolTable()); err != nil {
				return nil, err
			}
			e = f.GetValues()
		}
		if v := e.GetVariable(); v == nil || v.Values != nil || v.GetOffsets().GetFlat() == nil {
			return nil, pd.unsupported("full_zip " + name21(e))
		}
		bo := int(l.GetBitsPerOffset())
		if bo != 32 && bo != 64 {
			return nil, malformed(pd.op, "full-zip lengths of %d bits", bo)
		}
		return pd.fullZipVar(pd.bufs[0], ctrl, bo/8, st)
	}
	vb, err := pd.fullZipFixedShape(e)
	if err != nil {
		return nil, err
	}
	if int(l.GetBitsPerValue()) != 8*(pd.t.width+vb) {
		return nil, malformed(pd.op, "full-zip values of %d bits, want %d", l.GetBitsPerValue(), 8*(pd.t.width+vb))
	}
	return pd.fullZipFixed(pd.bufs[0], ctrl, vb)
}

// fullZipFixedShape checks a full-zip fixed-width value encoding (flat, or
// a fixed-size list of flat items) and returns the bytes of item validity
// that precede each value (a fixed-size list with nullable items).
func (pd *pageDecoder) fullZipFixedShape(e *pb21.CompressiveEncoding) (int, error) {
	t, vb := pd.t, 0
	bits := 8 * t.width
	if t.dim > 0 {
		f := e.GetFixedSizeList()
		if f == nil {
			return 0, pd.unsupported("full_zip " + name21(e))
		}
		if f.GetItemsPerValue() != uint64(t.dim) {
			return 0, malformed(pd.op, "fixed-size list of %d items, the schema says %d", f.GetItemsPerValue(), t.dim)
		}
		if f.GetHasValidity() {
			if t.dim%8 != 0 {
				return 0, pd.unsupported("full_zip fixed_size_list item validity of dimension " + itoa(t.dim))
			}
			vb = t.dim / 8
		}
		e, bits = f.GetValues(), 8*t.item
	}
	f := e.GetFlat()
	if f == nil || f.Data != nil {
		return 0, pd.unsupported("full_zip " + name21(e))
	}
	if f.GetBitsPerValue() != uint64(bits) {
		return 0, malformed(pd.op, "flat values of %d bits, want %d", f.GetBitsPerValue(), bits)
	}
	return vb, nil
}

// fullZipFixed decodes fixed-width full-zip rows: a control byte when
// ctrl is 1 (0 valid, 1 null), vb bytes of item validity, the value.
func (pd *pageDecoder) fullZipFixed(b []byte, ctrl, vb int) (*column, error) {
	w := pd.t.width
	stride := ctrl + vb + w
	if len(b)/stride < pd.n {
		return nil, malformed(pd.op, "full-zip buffer of %d bytes for %d values of %d bytes", len(b), pd.n, stride)
	}
	c := newColumn(pd.t)
	if ctrl == 0 && vb == 0 {
		src := &column{t: pd.t, n: pd.n, fixed: b[:pd.n*w]}
		src.valid.appendConst(true, pd.n)
		c.appendColumn(src, 0, pd.n)
		return c, nil
	}
	src := &column{t: pd.t, n: 1}
	src.valid.appendConst(true, 1)
	if vb > 0 {
		src.items = &bitBuf{}
	}
	for i := range pd.n {
		item := b[i*stride : (i+1)*stride]
		if ctrl == 1 && item[0] > 1 {
			return nil, malformed(pd.op, "full-zip control word %d", item[0])
		}
		if ctrl == 1 && item[0] == 1 {
			c.appendNulls(1)
			continue
		}
		if vb > 0 {
			src.items.reset()
			src.items.appendBits(item[ctrl:], 0, pd.t.dim)
		}
		src.fixed = item[ctrl+vb:]
		c.appendColumn(src, 0, 1)
	}
	return c, nil
}

// fullZipVar decodes variable-width full-zip rows: a control byte when
// ctrl is 1 (0 valid, 1 null), then for a valid row its length in lw
// bytes and its bytes, FSST-compressed when st is set.
func (pd *pageDecoder) fullZipVar(b []byte, ctrl, lw int, st *fsstTable) (*column, error) {
	c := newColumn(pd.t)
	p := 0
	var scratch []byte
	for range pd.n {
		if ctrl > 0 {
			if p >= len(b) {
				return nil, malformed(pd.op, "full-zip buffer ends early")
			}
			cw := b[p]
			p++
			if cw == 1 {
				c.appendNulls(1)
				continue
			}
			if cw != 0 {
				return nil, malformed(pd.op, "full-zip control word %d", cw)
			}
		}
		if lw > len(b)-p {
			return nil, malformed(pd.op, "full-zip buffer ends early")
		}
		n := loadWord(b[p:], lw)
		p += lw
		if n > uint64(len(b)-p) {
			return nil, malformed(pd.op, "full-zip value of %d bytes overruns the buffer", n)
		}
		v := b[p : p+int(n)]
		p += int(n)
		if st != nil {
			var ok bool
			if scratch, ok = st.decode(scratch[:0], v); !ok {
				return nil, malformed(pd.op, "FSST value is truncated or uses an unknown code")
			}
			v = scratch
		}
		c.appendBytes(v)
	}
	return c, nil
}

func itoa(i int) string { return strconv.Itoa(i) }
