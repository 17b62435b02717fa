package lancefile

import (
	"encoding/binary"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	pb20 "cellguard/proto/lanceenc20pb"
)

// name20 is the protobuf name of an ArrayEncoding's arm, e.g. "fsst".
func name20(e *pb20.ArrayEncoding) string {
	if e == nil || e.GetArrayEncoding() == nil {
		return "none"
	}
	m := e.ProtoReflect()
	if fd := m.WhichOneof(m.Descriptor().Oneofs().ByName("array_encoding")); fd != nil {
		return string(fd.Name())
	}
	return "unknown"
}

func (pd *pageDecoder) unsupported20(e *pb20.ArrayEncoding) error {
	return &UnsupportedEncodingError{Name: name20(e), Op: pd.op}
}

// decode20 decodes a 2.0 page: a nullable wrapper (or, for strings, a
// binary encoding) over flat or fixed-size-list values.
func (pd *pageDecoder) decode20(a *anypb.Any) (*column, error) {
	if messageName(a) != "lance.encodings.ArrayEncoding" {
		return nil, malformed(pd.op, "2.0 page encoding is a %q", a.GetTypeUrl())
	}
	e := &pb20.ArrayEncoding{}
	if err := proto.Unmarshal(a.GetValue(), e); err != nil {
		return nil, malformed(pd.op, "2.0 page encoding: %v", err)
	}
	c := newColumn(pd.t)
	if pd.t.kind == kindVar {
		if nl := e.GetNullable(); nl != nil && nl.GetAllNulls() != nil {
			return nullPage(pd.t, pd.n), nil
		}
		if d := e.GetDictionary(); d != nil {
			return pd.dictionary20(d)
		}
		return c, pd.binary20(c, e)
	}
	nl := e.GetNullable()
	switch {
	case nl == nil:
		return c, pd.values20(c, e, nil)
	case nl.GetAllNulls() != nil:
		return nullPage(pd.t, pd.n), nil
	case nl.GetNoNulls() != nil:
		return c, pd.values20(c, nl.GetNoNulls().GetValues(), nil)
	case nl.GetSomeNulls() != nil:
		sn := nl.GetSomeNulls()
		valid, err := pd.flat20(sn.GetValidity(), 1)
		if err != nil {
			return nil, err
		}
		return c, pd.values20(c, sn.GetValues(), valid)
	}
	return nil, malformed(pd.op, "nullable encoding without an arm")
}

// flat20 returns the bytes of a flat buffer of n values of bits each.
func (pd *pageDecoder) flat20(e *pb20.ArrayEncoding, bits uint64) ([]byte, error) {
	f := e.GetFlat()
	if f == nil {
		return nil, pd.unsupported20(e)
	}
	if s := f.GetCompression().GetScheme(); s != "" {
		return nil, &UnsupportedEncodingError{Name: "flat(" + strings.ToLower(s) + ")", Op: pd.op}
	}
	if f.GetBitsPerValue() != bits {
		return nil, malformed(pd.op, "flat values of %d bits, want %d for %s", f.GetBitsPerValue(), bits, pd.t.logical)
	}
	if bt := f.GetBuffer().GetBufferType(); bt != pb20.Buffer_page {
		return nil, &UnsupportedEncodingError{Name: "flat(" + bt.String() + " buffer)", Op: pd.op}
	}
	b, err := pd.buf(uint64(f.GetBuffer().GetBufferIndex()))
	if err != nil {
		return nil, err
	}
	need := (uint64(pd.n)*bits + 7) / 8
	if uint64(len(b)) < need {
		return nil, malformed(pd.op, "flat buffer of %d bytes holds fewer than %d values of %d bits", len(b), pd.n, bits)
	}
	return b[:need], nil
}

// values20 decodes the value part of a fixed-width or bool page into c;
// valid is the validity bitmap, nil when every row is valid.
func (pd *pageDecoder) values20(c *column, e *pb20.ArrayEncoding, valid []byte) error {
	var vals, items []byte
	var err error
	switch {
	case pd.t.kind == kindBool:
		vals, err = pd.flat20(e, 1)
	case pd.t.dim > 0:
		vals, items, err = pd.fsl20(e)
	default:
		vals, err = pd.flat20(e, uint64(8*pd.t.width))
	}
	if err != nil {
		return err
	}
	src := &column{t: pd.t, n: pd.n}
	if valid == nil {
		src.valid.appendConst(true, pd.n)
	} else {
		src.valid.appendBits(valid, 0, pd.n)
	}
	if pd.t.kind == kindBool {
		src.bits.appendBits(vals, 0, pd.n)
	} else {
		src.fixed = vals
	}
	if items != nil {
		src.items = &bitBuf{}
		src.items.appendBits(items, 0, pd.n*pd.t.dim)
	}
	c.appendColumn(src, 0, pd.n)
	if valid != nil {
		c.zeroNullSlots()
	}
	return nil
}

// fsl20 returns the items of a fixed-size list page and, when items may
// be null, their validity bitmap.
func (pd *pageDecoder) fsl20(e *pb20.ArrayEncoding) (vals, items []byte, err error) {
	f := e.GetFixedSizeList()
	if f == nil {
		return nil, nil, pd.unsupported20(e)
	}
	if int(f.GetDimension()) != pd.t.dim {
		return nil, nil, malformed(pd.op, "fixed-size list of dimension %d, the schema says %d", f.GetDimension(), pd.t.dim)
	}
	if f.GetHasValidity() {
		return nil, nil, &UnsupportedEncodingError{Name: "fixed_size_list(has_validity)", Op: pd.op}
	}
	sub := *pd
	sub.n = pd.n * pd.t.dim
	enc := f.GetItems()
	if nl := enc.GetNullable(); nl != nil {
		switch {
		case nl.GetNoNulls() != nil:
			enc = nl.GetNoNulls().GetValues()
		case nl.GetSomeNulls() != nil:
			if items, err = sub.flat20(nl.GetSomeNulls().GetValidity(), 1); err != nil {
				return nil, nil, err
			}
			enc = nl.GetSomeNulls().GetValues()
		default:
			return nil, nil, &UnsupportedEncodingError{Name: "fixed_size_list(all-null items)", Op: pd.op}
		}
	}
	vals, err = sub.flat20(enc, uint64(8*pd.t.item))
	return vals, items, err
}

// expansionLimit bounds the bytes a dictionary page may decode to: 256
// times its buffers plus 16 MiB, far above what repeated strings need but
// finite, so that a few bytes of indices cannot name a large item
// millions of times.
func (pd *pageDecoder) expansionLimit() int {
	n := 0
	for _, b := range pd.bufs {
		n += len(b)
	}
	return 16<<20 + 256*n
}

// dictionary20 decodes a dictionary-encoded string page: flat indices
// into items stored with the binary encoding, index 0 meaning null and
// index k item k-1.
func (pd *pageDecoder) dictionary20(d *pb20.Dictionary) (*column, error) {
	idxEnc := d.GetIndices()
	if nl := idxEnc.GetNullable(); nl != nil {
		if nl.GetNoNulls() == nil {
			return nil, &UnsupportedEncodingError{Name: "dictionary(nullable indices)", Op: pd.op}
		}
		idxEnc = nl.GetNoNulls().GetValues()
	}
	bits := idxEnc.GetFlat().GetBitsPerValue()
	if !wordBits(bits) {
		return nil, &UnsupportedEncodingError{Name: "dictionary(indices " + name20(idxEnc) + ")", Op: pd.op}
	}
	idx, err := pd.flat20(idxEnc, bits)
	if err != nil {
		return nil, err
	}
	sub := *pd
	sub.n = int(d.GetNumDictionaryItems())
	items := newColumn(pd.t)
	if err := sub.binary20(items, d.GetItems()); err != nil {
		return nil, err
	}
	c := newColumn(pd.t)
	w := int(bits / 8)
	limit := pd.expansionLimit()
	for i := range pd.n {
		k := loadWord(idx[i*w:], w)
		switch {
		case k == 0:
			c.appendNulls(1)
		case k > uint64(items.n):
			return nil, malformed(pd.op, "dictionary index %d of %d items", k, items.n)
		case items.offs[k]-items.offs[k-1] > int64(limit-len(c.data)):
			return nil, malformed(pd.op, "dictionary page expands past %d bytes", limit)
		default:
			c.appendColumn(items, int(k-1), int(k))
		}
	}
	return c, nil
}

// binary20 decodes a string or binary page: end offsets with null rows
// shifted up by null_adjustment, and the bytes.
func (pd *pageDecoder) binary20(c *column, e *pb20.ArrayEncoding) error {
	b := e.GetBinary()
	if b == nil {
		return pd.unsupported20(e)
	}
	idxEnc := b.GetIndices()
	if nl := idxEnc.GetNullable(); nl != nil {
		if nl.GetNoNulls() == nil {
			return &UnsupportedEncodingError{Name: "binary(nullable indices)", Op: pd.op}
		}
		idxEnc = nl.GetNoNulls().GetValues()
	}
	idx, err := pd.flat20(idxEnc, 64)
	if err != nil {
		return err
	}
	sub := *pd
	sub.n = 0 // the byte count is checked against the offsets below
	data, err := sub.flat20(b.GetBytes(), 8)
	if err != nil {
		return err
	}
	bb, _ := pd.buf(uint64(b.GetBytes().GetFlat().GetBuffer().GetBufferIndex()))
	data = bb
	k := b.GetNullAdjustment()
	var prev uint64
	for i := range pd.n {
		v := binary.LittleEndian.Uint64(idx[8*i:])
		null := k > 0 && v >= k
		if null {
			v -= k
		}
		start := uint64(0)
		if i > 0 {
			start = prev
			if k > 0 {
				start = prev % k
			}
		}
		if v < start || v > uint64(len(data)) {
			return malformed(pd.op, "binary offset %d of row %d outside [%d, %d]", v, i, start, len(data))
		}
		if null {
			c.appendNulls(1)
		} else {
			c.appendBytes(data[start:v])
		}
		prev = binary.LittleEndian.Uint64(idx[8*i:])
	}
	return nil
}
