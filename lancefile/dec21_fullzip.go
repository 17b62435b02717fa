package lancefile

// dec21_fullzip.go decodes Lance 2.1 full-zip pages: large values (long
// strings, wide vectors) zipped with their control words.

import (
	"strconv"

	pb21 "cellguard/proto/lanceenc21pb"
)

func (pd *pageDecoder) fullZip(l *pb21.FullZipLayout) (*column, error) {
	if l.GetBitsRep() != 0 {
		return nil, pd.unsupported("full_zip repetition")
	}
	if err := pd.checkLayers(l.GetLayers()); err != nil {
		return nil, err
	}
	if l.GetBitsDef() > 8 {
		return nil, pd.unsupported("full_zip definition of " + itoa(int(l.GetBitsDef())) + " bits")
	}
	if int(l.GetNumItems()) != pd.n {
		return nil, malformed(pd.op, "full-zip of %d items in a page of %d rows", l.GetNumItems(), pd.n)
	}
	if len(pd.bufs) < 1 {
		return nil, malformed(pd.op, "full-zip page without buffers")
	}
	ctrl := 0 // bytes of control word: the definition level
	if l.GetBitsDef() > 0 {
		ctrl = 1
	}
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
		if ctrl == 1 && int(item[0]) > pd.maxDef {
			return nil, malformed(pd.op, "full-zip control word %d", item[0])
		}
		if ctrl == 1 && item[0] != 0 {
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
			if int(cw) > pd.maxDef {
				return nil, malformed(pd.op, "full-zip control word %d", cw)
			}
			if cw != 0 {
				c.appendNulls(1)
				continue
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
