package lancefile

import (
	"encoding/binary"
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

// decode21 decodes a 2.1 or 2.2 page: all-null (2.2: constant),
// mini-block or full-zip, without repetition, with plain or compressed
// values (see compress21.go).
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
	case l.GetFullZipLayout() != nil && pd.t.kind == kindList:
		return nil, pd.unsupported("full_zip of lists")
	case l.GetFullZipLayout() != nil:
		return pd.fullZip(l.GetFullZipLayout())
	case l.GetAllNullLayout() != nil && pd.v22:
		return pd.constant(l.GetAllNullLayout())
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

// checkLayers accepts the item layer of a top-level column, or the item
// and struct layers of a struct's child, and sets the highest definition
// level they allow.
func (pd *pageDecoder) checkLayers(ls []pb21.RepDefLayer) error {
	if len(ls) != max(pd.depth, 1) {
		return pd.unsupported("repdef layers " + layersString(ls))
	}
	nullable := 0
	for _, l := range ls {
		switch l {
		case pb21.RepDefLayer_REPDEF_ALL_VALID_ITEM:
		case pb21.RepDefLayer_REPDEF_NULLABLE_ITEM:
			nullable++
		default:
			return pd.unsupported("repdef layers " + layersString(ls))
		}
	}
	pd.maxDef = max(nullable, 1)
	return nil
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
// (level 0 valid, higher levels null).
func (pd *pageDecoder) defLevels(e *pb21.CompressiveEncoding, b []byte, n int) (bitBuf, error) {
	words, err := pd.levels("definition", e, b, n)
	if err != nil {
		return bitBuf{}, err
	}
	var valid bitBuf
	valid.grow(n)
	maxDef := uint16(max(pd.maxDef, 1))
	for i := range n {
		switch l := binary.LittleEndian.Uint16(words[2*i:]); {
		case l == 0:
			valid.b[i/8] |= 1 << (i % 8)
		case l > maxDef:
			return bitBuf{}, malformed(pd.op, "definition level %d of at most %d", l, maxDef)
		}
	}
	valid.n = n
	return valid, nil
}

// levels decodes n repetition or definition levels (what names which) as
// u16 words: flat u16, u16 words bit-packed inline or out of line, or
// run-length encoded.
func (pd *pageDecoder) levels(what string, e *pb21.CompressiveEncoding, b []byte, n int) ([]byte, error) {
	var words []byte
	var err error
	switch {
	case e.GetFlat() != nil && e.GetFlat().Data == nil && e.GetFlat().GetBitsPerValue() == 16:
		if len(b) < 2*n {
			return nil, malformed(pd.op, "%d bytes of %s levels for %d values", len(b), what, n)
		}
		words = b
	case e.GetInlineBitpacking() != nil && e.GetInlineBitpacking().Values == nil:
		if e.GetInlineBitpacking().GetUncompressedBitsPerValue() != 16 {
			return nil, pd.unsupported(what + " levels " + name21(e))
		}
		words, err = pd.inlineBitpacked(b, 16, n)
	case e.GetOutOfLineBitpacking() != nil:
		ob := e.GetOutOfLineBitpacking()
		f := ob.GetValues().GetFlat()
		if ob.GetUncompressedBitsPerValue() != 16 || f == nil || f.Data != nil || f.GetBitsPerValue() > 16 {
			return nil, pd.unsupported(what + " levels out_of_line_bitpacking(" + name21(ob.GetValues()) + ")")
		}
		words, err = pd.outOfLineBitpacked(b, 16, int(f.GetBitsPerValue()), n)
	case e.GetRle() != nil:
		r := e.GetRle()
		vf, lf := r.GetValues().GetFlat(), r.GetRunLengths().GetFlat()
		if vf == nil || lf == nil || vf.Data != nil || lf.Data != nil || vf.GetBitsPerValue() != 16 || !(lf.GetBitsPerValue() == 8 || lf.GetBitsPerValue() == 16 || lf.GetBitsPerValue() == 32) {
			return nil, pd.unsupported(what + " levels rle(" + name21(r.GetValues()) + ", " + name21(r.GetRunLengths()) + ")")
		}
		// Run-length levels are one buffer: a u64 byte length of the
		// values, the u16 values, then the run lengths.
		lw := int(lf.GetBitsPerValue() / 8)
		if len(b) < 8 || binary.LittleEndian.Uint64(b)%2 != 0 || binary.LittleEndian.Uint64(b) > uint64(len(b)-8) {
			return nil, malformed(pd.op, "run-length %s levels of %d bytes", what, len(b))
		}
		vb := int(binary.LittleEndian.Uint64(b))
		words, err = pd.runLengths(b[8:8+vb], b[8+vb:], 2, lw, n)
	default:
		return nil, pd.unsupported(what + " levels " + name21(e))
	}
	if err != nil {
		return nil, err
	}
	return words, nil
}
