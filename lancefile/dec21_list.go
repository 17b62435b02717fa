package lancefile

// dec21_list.go decodes mini-block pages of list columns (2.1 and 2.2):
// one layer of repetition over items of a top-level type. Every chunk
// holds repetition and definition levels for its positions and the
// values of the positions that hold an item (valid or null); a position
// is either an item or a null or empty list, and a repetition level of 1
// starts a row. A row may continue from one chunk into the next, so the
// chunks are decoded from the page's first.

import (
	"encoding/binary"

	pb21 "cellguard/proto/lanceenc21pb"
)

// listDefs says what each definition level of a list page means.
type listDefs struct {
	itemNull  int // level of a null item, or -1
	listNull  int // level of a null list, or -1
	listEmpty int // level of an empty list, or -1
	max       int
}

// listLayers checks a list page's layers (item, then list) and assigns
// definition levels in order, innermost first: 0 is a valid item, then one
// level per nullable item, null list and empty list.
func (pd *pageDecoder) listLayers(ls []pb21.RepDefLayer) (listDefs, error) {
	d := listDefs{itemNull: -1, listNull: -1, listEmpty: -1}
	if len(ls) != 2 {
		return d, pd.unsupported("list repdef layers " + layersString(ls))
	}
	switch ls[0] {
	case pb21.RepDefLayer_REPDEF_ALL_VALID_ITEM:
	case pb21.RepDefLayer_REPDEF_NULLABLE_ITEM:
		d.max++
		d.itemNull = d.max
	default:
		return d, pd.unsupported("list repdef layers " + layersString(ls))
	}
	switch ls[1] {
	case pb21.RepDefLayer_REPDEF_ALL_VALID_LIST:
	case pb21.RepDefLayer_REPDEF_NULLABLE_LIST:
		d.max++
		d.listNull = d.max
	case pb21.RepDefLayer_REPDEF_EMPTYABLE_LIST:
		d.max++
		d.listEmpty = d.max
	case pb21.RepDefLayer_REPDEF_NULL_AND_EMPTY_LIST:
		d.listNull, d.listEmpty = d.max+1, d.max+2
		d.max += 2
	default:
		return d, pd.unsupported("list repdef layers " + layersString(ls))
	}
	return d, nil
}

func (pd *pageDecoder) miniBlockList(l *pb21.MiniBlockLayout) (*column, error) {
	switch {
	case l.GetRepCompression() == nil:
		return nil, pd.unsupported("list mini_block without repetition")
	case l.GetHasLargeChunk() != pd.v22:
		return nil, pd.unsupported("mini_block large chunks")
	case l.GetNumBuffers() < 1 || l.GetNumBuffers() > 3:
		return nil, pd.unsupported("mini_block with " + itoa(int(l.GetNumBuffers())) + " value buffers")
	case l.GetRepetitionIndexDepth() > 1:
		return nil, pd.unsupported("mini_block repetition index of depth " + itoa(int(l.GetRepetitionIndexDepth())))
	}
	defs, err := pd.listLayers(l.GetLayers())
	if err != nil {
		return nil, err
	}
	if defs.max > 0 && l.GetDefCompression() == nil {
		return nil, malformed(pd.op, "list page with nulls or empty lists but no definition levels")
	}
	pd.maxDef = defs.max
	elem := *pd.t.elem
	item := &pageDecoder{op: pd.op, t: elem, v22: pd.v22, depth: 1, maxDef: max(defs.max, 1)}
	mp := miniPage{val: l.GetValueCompression(), nbuf: int(l.GetNumBuffers()), wide: pd.v22}
	if l.GetDictionary() != nil {
		item.bufs = pd.bufs
		d, err := item.dictionary(l)
		if err != nil {
			return nil, err
		}
		mp.dict = d
	}
	if len(pd.bufs) < 2 {
		return nil, malformed(pd.op, "mini-block page has %d buffers, want 2", len(pd.bufs))
	}
	meta, data := pd.bufs[0], pd.bufs[1]
	mw := 2
	if mp.wide {
		mw = 4
	}
	total := l.GetNumItems() // items, valid or null
	if total > uint64(len(data))*8 {
		return nil, malformed(pd.op, "list page of %d items in %d bytes", total, len(data))
	}
	c := newColumn(pd.t)
	rows := 0
	pos, seen := 0, uint64(0)
	// Chunks are decoded from the first until row hi has started, so that
	// rows [0, hi) are complete: the work is bounded by the rows asked for
	// (and items by the page's bytes), however many rows a few bytes of
	// run-length levels claim.
	for i := 0; i+mw <= len(meta); i += mw {
		if rows > pd.hi {
			pd.partial, pd.base = true, 0
			return c, nil
		}
		m := loadWord(meta[i:], mw)
		size := (int(m>>4) + 1) * 8
		if size > len(data)-pos {
			return nil, malformed(pd.op, "mini-block chunk %d (%d bytes) overruns the page", i/mw, size)
		}
		n, err := pd.listChunk(c, item, &mp, defs, l, data[pos:pos+size], &rows)
		if err != nil {
			return nil, err
		}
		seen += uint64(n)
		if seen > total {
			return nil, malformed(pd.op, "list chunks hold more than the page's %d items", total)
		}
		pos += size
	}
	if seen != total || rows != pd.n || c.n != pd.n {
		return nil, malformed(pd.op, "list page of %d items and %d rows decodes to %d items and %d rows", total, pd.n, seen, rows)
	}
	return c, nil
}

// listChunk decodes one chunk of a list page: u16 number of levels, u16
// repetition and definition bytes, the value-buffer sizes (u16, u32 in
// 2.2), padded to 8; the repetition levels, the definition levels and each
// value buffer, each padded to 8. Rows go into c; rows counts the rows
// started so far. It returns the number of items in the chunk.
func (pd *pageDecoder) listChunk(c *column, item *pageDecoder, mp *miniPage, defs listDefs, l *pb21.MiniBlockLayout, b []byte, rows *int) (int, error) {
	hasDef := l.GetDefCompression() != nil
	nl := 2
	if hasDef {
		nl++
	}
	vw := 2
	if mp.wide {
		vw = 4
	}
	hlen := 2*nl + vw*mp.nbuf
	if len(b) < hlen {
		return 0, malformed(pd.op, "mini-block chunk of %d bytes", len(b))
	}
	n := int(binary.LittleEndian.Uint16(b))
	repBytes := int(binary.LittleEndian.Uint16(b[2:]))
	defBytes := 0
	if hasDef {
		defBytes = int(binary.LittleEndian.Uint16(b[4:]))
	}
	p := pad(hlen, 8)
	if n == 0 || n > miniMaxChunk || p > len(b) || repBytes > len(b)-p {
		return 0, malformed(pd.op, "list chunk of %d levels overruns its %d bytes", n, len(b))
	}
	rep, err := pd.levels("repetition", l.GetRepCompression(), b[p:p+repBytes], n)
	if err != nil {
		return 0, err
	}
	p += pad(repBytes, 8)
	var def []byte
	if hasDef {
		if p > len(b) || defBytes > len(b)-p {
			return 0, malformed(pd.op, "list chunk definition levels overrun the chunk")
		}
		if def, err = pd.levels("definition", l.GetDefCompression(), b[p:p+defBytes], n); err != nil {
			return 0, err
		}
		p += pad(defBytes, 8)
	}
	bufs := make([][]byte, mp.nbuf)
	for i := range bufs {
		k := int(loadWord(b[2*nl+vw*i:], vw))
		if p > len(b) || k > len(b)-p {
			return 0, malformed(pd.op, "mini-block value buffer %d overruns the chunk", i)
		}
		bufs[i] = b[p : p+k]
		p += pad(k, 8)
	}
	// The positions holding an item, valid or null, have a value slot.
	var valid bitBuf
	items := 0
	for i := range n {
		d := 0
		if def != nil {
			d = int(binary.LittleEndian.Uint16(def[2*i:]))
		}
		if d > defs.max || (d != 0 && d != defs.itemNull && d != defs.listNull && d != defs.listEmpty) {
			return 0, malformed(pd.op, "definition level %d in a list page", d)
		}
		if r := binary.LittleEndian.Uint16(rep[2*i:]); r > 1 || (r == 0 && c.n == 0 && *rows == 0 && i == 0) {
			return 0, malformed(pd.op, "repetition level %d at position %d", r, i)
		}
		if d == 0 || d == defs.itemNull {
			valid.appendConst(d == 0, 1)
			items++
		}
	}
	elems := newColumn(item.t)
	if items > 0 {
		if err := item.appendChunk(elems, mp, bufs, valid, items); err != nil {
			return 0, err
		}
	}
	k := 0 // next item of elems
	for i := range n {
		d := 0
		if def != nil {
			d = int(binary.LittleEndian.Uint16(def[2*i:]))
		}
		if binary.LittleEndian.Uint16(rep[2*i:]) == 1 {
			if *rows == pd.n {
				return 0, malformed(pd.op, "list page holds more than its %d rows", pd.n)
			}
			*rows++
			mp.rowOpen = false
			switch d {
			case defs.listNull:
				c.appendNulls(1)
				continue
			case defs.listEmpty:
				c.valid.appendConst(true, 1)
				c.n++
				c.lofs = append(c.lofs, c.lofs[len(c.lofs)-1])
				continue
			}
			c.valid.appendConst(true, 1)
			c.n++
			c.lofs = append(c.lofs, c.lofs[len(c.lofs)-1])
			mp.rowOpen = true
		} else if !mp.rowOpen || d == defs.listNull || d == defs.listEmpty {
			return 0, malformed(pd.op, "an item continues a null or empty list, or a list is not a row's first position")
		}
		c.elems.appendColumn(elems, k, k+1)
		c.lofs[len(c.lofs)-1]++
		k++
	}
	return items, nil
}
