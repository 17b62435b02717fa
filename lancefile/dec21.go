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
// repetition, with plain (uncompressed) values.
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

// valueShape checks that a value encoding is the plain one for the
// column's type: flat, fixed_size_list over flat, or variable with flat
// offsets. It returns the offset width in bytes for variable values.
func (pd *pageDecoder) valueShape(e *pb21.CompressiveEncoding) (offsetBytes int, err error) {
	flat := func(e *pb21.CompressiveEncoding, bits int) error {
		f := e.GetFlat()
		if f == nil {
			return pd.unsupported(name21(e))
		}
		if f.Data != nil {
			return pd.unsupported("flat(" + schemeName(f.GetData().GetScheme()) + ")")
		}
		if bits >= 0 && f.GetBitsPerValue() != uint64(bits) {
			return malformed(pd.op, "flat values of %d bits, want %d for %s", f.GetBitsPerValue(), bits, pd.t.logical)
		}
		return nil
	}
	switch t := pd.t; {
	case t.kind == kindBool:
		return 0, flat(e, 1)
	case t.kind == kindVar:
		v := e.GetVariable()
		if v == nil {
			return 0, pd.unsupported(name21(e))
		}
		if v.Values != nil {
			return 0, pd.unsupported("variable(" + schemeName(v.GetValues().GetScheme()) + ")")
		}
		if err := flat(v.GetOffsets(), -1); err != nil {
			return 0, err
		}
		bits := v.GetOffsets().GetFlat().GetBitsPerValue()
		if bits != 32 && bits != 64 {
			return 0, malformed(pd.op, "variable offsets of %d bits", bits)
		}
		return int(bits / 8), nil
	case t.dim > 0:
		f := e.GetFixedSizeList()
		if f == nil {
			return 0, pd.unsupported(name21(e))
		}
		if f.GetItemsPerValue() != uint64(t.dim) || f.GetHasValidity() {
			return 0, pd.unsupported("fixed_size_list(dimension " + itoa(int(f.GetItemsPerValue())) + ", item validity)")
		}
		return 0, flat(f.GetValues(), 8*t.item)
	}
	return 0, flat(e, 8*pd.t.width)
}

// defShape checks the definition-level encoding: none, or flat u16.
func (pd *pageDecoder) defShape(e *pb21.CompressiveEncoding) (bool, error) {
	if e == nil {
		return false, nil
	}
	if f := e.GetFlat(); f != nil && f.Data == nil && f.GetBitsPerValue() == 16 {
		return true, nil
	}
	return false, pd.unsupported("definition levels " + name21(e))
}

func (pd *pageDecoder) miniBlock(l *pb21.MiniBlockLayout) (*column, error) {
	switch {
	case l.GetRepCompression() != nil:
		return nil, pd.unsupported("mini_block repetition")
	case l.GetDictionary() != nil:
		return nil, pd.unsupported("dictionary")
	case l.GetHasLargeChunk():
		return nil, pd.unsupported("mini_block large chunks")
	case l.GetNumBuffers() != 1:
		return nil, pd.unsupported("mini_block with " + itoa(int(l.GetNumBuffers())) + " value buffers")
	}
	if err := pd.checkLayers(l.GetLayers()); err != nil {
		return nil, err
	}
	ow, err := pd.valueShape(l.GetValueCompression())
	if err != nil {
		return nil, err
	}
	hasDef, err := pd.defShape(l.GetDefCompression())
	if err != nil {
		return nil, err
	}
	if l.GetNumItems() != uint64(pd.n) {
		return nil, malformed(pd.op, "mini-block of %d items in a page of %d rows", l.GetNumItems(), pd.n)
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
		if cnt > pd.n-row || cnt <= 0 || size > len(data)-pos {
			return nil, malformed(pd.op, "mini-block chunk %d (%d values, %d bytes) overruns the page", i/2, cnt, size)
		}
		if row+cnt > pd.lo {
			if c.n == 0 {
				pd.base = row
			}
			if err := pd.chunk(c, data[pos:pos+size], cnt, hasDef, ow); err != nil {
				return nil, err
			}
		}
		pos += size
		row += cnt
	}
	return c, nil
}

// chunk decodes one mini-block chunk of cnt values into c.
func (pd *pageDecoder) chunk(c *column, b []byte, cnt int, hasDef bool, ow int) error {
	hdr := 4
	if hasDef {
		hdr = 6
	}
	if len(b) < hdr {
		return malformed(pd.op, "mini-block chunk of %d bytes", len(b))
	}
	defBytes, vBytes := 0, int(binary.LittleEndian.Uint16(b[2:]))
	if hasDef {
		defBytes, vBytes = vBytes, int(binary.LittleEndian.Uint16(b[4:]))
		if nl := int(binary.LittleEndian.Uint16(b)); nl != cnt || defBytes < 2*cnt {
			return malformed(pd.op, "mini-block chunk has %d levels in %d bytes for %d values", nl, defBytes, cnt)
		}
	}
	p := pad(hdr, 8)
	if defBytes > len(b)-p {
		return malformed(pd.op, "mini-block definition levels overrun the chunk")
	}
	def := b[p : p+defBytes]
	p += pad(defBytes, 8)
	if p > len(b) || vBytes > len(b)-p {
		return malformed(pd.op, "mini-block values overrun the chunk")
	}
	return pd.appendValues(c, b[p:p+vBytes], def, cnt, ow)
}

// appendValues adds cnt values from a plain value buffer, with u16
// definition levels def (empty: all valid).
func (pd *pageDecoder) appendValues(c *column, vals, def []byte, cnt, ow int) error {
	start := c.n
	src := &column{t: pd.t, n: cnt}
	if len(def) == 0 {
		src.valid.appendConst(true, cnt)
	}
	for i := 0; i < cnt && len(def) > 0; i++ {
		valid := true
		if len(def) > 0 {
			switch binary.LittleEndian.Uint16(def[2*i:]) {
			case 0:
			case 1:
				valid = false
			default:
				return malformed(pd.op, "definition level %d in a top-level column", binary.LittleEndian.Uint16(def[2*i:]))
			}
		}
		src.valid.appendConst(valid, 1)
	}
	switch t := pd.t; t.kind {
	case kindFixed:
		if len(vals) < cnt*t.width {
			return malformed(pd.op, "%d value bytes for %d values of %d bytes", len(vals), cnt, t.width)
		}
		src.fixed = vals[:cnt*t.width]
	case kindBool:
		if len(vals)*8 < cnt {
			return malformed(pd.op, "%d value bytes for %d bools", len(vals), cnt)
		}
		src.bits.appendBits(vals, 0, cnt)
	case kindVar:
		offs, err := pd.varOffsets(vals, cnt, ow)
		if err != nil {
			return err
		}
		src.offs, src.data = offs, vals
	}
	c.appendColumn(src, 0, cnt)
	if len(def) > 0 {
		c.zeroNullSlotsFrom(start)
	}
	return nil
}

// varOffsets reads the cnt+1 offsets at the start of a variable-width
// value buffer and checks that they are ordered and inside it.
func (pd *pageDecoder) varOffsets(b []byte, cnt, ow int) ([]int64, error) {
	if (cnt+1)*ow > len(b) {
		return nil, malformed(pd.op, "%d-byte value buffer too short for %d offsets", len(b), cnt+1)
	}
	offs := make([]int64, cnt+1)
	for i := range offs {
		var v uint64
		if ow == 8 {
			v = binary.LittleEndian.Uint64(b[8*i:])
		} else {
			v = uint64(binary.LittleEndian.Uint32(b[4*i:]))
		}
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
	ow, err := pd.valueShape(l.GetValueCompression())
	if err != nil {
		return nil, err
	}
	if len(pd.bufs) < 1 {
		return nil, malformed(pd.op, "full-zip page without buffers")
	}
	ctrl := int(l.GetBitsDef())
	if pd.t.kind == kindVar {
		bo := int(l.GetBitsPerOffset())
		if bo != 32 && bo != 64 {
			return nil, malformed(pd.op, "full-zip lengths of %d bits", bo)
		}
		_ = ow
		return pd.fullZipVar(pd.bufs[0], ctrl, bo/8)
	}
	if int(l.GetBitsPerValue()) != 8*pd.t.width {
		return nil, malformed(pd.op, "full-zip values of %d bits, want %d", l.GetBitsPerValue(), 8*pd.t.width)
	}
	return pd.fullZipFixed(pd.bufs[0], ctrl)
}

func (pd *pageDecoder) fullZipFixed(b []byte, ctrl int) (*column, error) {
	w := pd.t.width
	stride := w + ctrl
	if len(b)/stride < pd.n {
		return nil, malformed(pd.op, "full-zip buffer of %d bytes for %d values of %d bytes", len(b), pd.n, stride)
	}
	c := newColumn(pd.t)
	if ctrl == 0 {
		src := &column{t: pd.t, n: pd.n, fixed: b[:pd.n*w]}
		src.valid.appendConst(true, pd.n)
		c.appendColumn(src, 0, pd.n)
		return c, nil
	}
	c.fixed = make([]byte, 0, pd.n*w)
	for i := range pd.n {
		item := b[i*stride : (i+1)*stride]
		switch item[0] {
		case 0:
			c.valid.appendConst(true, 1)
			c.fixed = append(c.fixed, item[1:]...)
			c.n++
		case 1:
			c.appendNulls(1)
		default:
			return nil, malformed(pd.op, "full-zip control word %d", item[0])
		}
	}
	return c, nil
}

func (pd *pageDecoder) fullZipVar(b []byte, ctrl, lw int) (*column, error) {
	c := newColumn(pd.t)
	p := 0
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
		var n uint64
		if lw == 8 {
			n = binary.LittleEndian.Uint64(b[p:])
		} else {
			n = uint64(binary.LittleEndian.Uint32(b[p:]))
		}
		p += lw
		if n > uint64(len(b)-p) {
			return nil, malformed(pd.op, "full-zip value of %d bytes overruns the buffer", n)
		}
		c.appendBytes(b[p : p+int(n)])
		p += int(n)
	}
	return c, nil
}

func itoa(i int) string { return strconv.Itoa(i) }
