package lancefile

import (
	"encoding/binary"
	"fmt"
	"io"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"cellguard/proto/lancefilepb"
	"cellguard/proto/lancepb"
)

// footerSize is the fixed tail of every file.
const footerSize = 40

// maxRows bounds the rows of one file, as Lance does (2^32).
const maxRows = 1 << 32

// FieldIDKey is the Arrow field metadata key under which Reader.Schema
// reports each field's Lance field id.
const FieldIDKey = "lance:field_id"

// Reader reads a Lance data file of format 2.0, 2.1 or 2.2. Open checks the
// footer, schema and column metadata; pages are read and checked when a
// read needs them. A Reader is safe for concurrent use if its ReaderAt is.
type Reader struct {
	r       io.ReaderAt
	size    int64
	version Version
	rows    uint64
	fields  []*lancepb.Field
	types   []colType
	depth   []int // repetition/definition layers of each column: 1, or 2 under a struct
	// lanceFields are the schema fields each column is made of: the
	// field, a struct and its child, or a list and its item.
	lanceFields [][]*lancepb.Field
	schema      *arrow.Schema
	cols        []*lancefilepb.ColumnMetadata
	starts      [][]uint64 // starts[c][p] = first row of page p of column c
	// pageBytes is the total size of every page buffer of every column.
	// Lance's buffers do not overlap, so it is at most the file size;
	// checking that keeps reading a whole file O(file size) even when
	// malformed metadata points many pages at the same bytes.
	pageBytes uint64
}

// Open reads the metadata of the file of the given size. Every error about
// the bytes wraps ErrMalformed or is an *UnsupportedVersionError or
// *UnsupportedTypeError; it never panics and never allocates more than the
// file's size for metadata.
func Open(r io.ReaderAt, size int64) (*Reader, error) {
	if size < footerSize {
		return nil, malformed("footer", "file is %d bytes, shorter than the %d-byte footer", size, footerSize)
	}
	f, err := readAt(r, size, "footer", uint64(size-footerSize), footerSize)
	if err != nil {
		return nil, err
	}
	if string(f[36:]) != magic {
		return nil, malformed("footer", "magic is %q, want %q", f[36:], magic)
	}
	rd := &Reader{r: r, size: size}
	switch major, minor := binary.LittleEndian.Uint16(f[32:]), binary.LittleEndian.Uint16(f[34:]); {
	case major == 0 && minor == 3, major == 2 && minor == 0:
		rd.version = V2_0
	case major == 2 && minor == 1:
		rd.version = V2_1
	case major == 2 && minor == 2:
		rd.version = V2_2
	default:
		return nil, &UnsupportedVersionError{Major: major, Minor: minor}
	}
	t := tail{
		metaStart: binary.LittleEndian.Uint64(f[0:]),
		cmoPos:    binary.LittleEndian.Uint64(f[8:]),
		gboPos:    binary.LittleEndian.Uint64(f[16:]),
		numGB:     uint64(binary.LittleEndian.Uint32(f[24:])),
		numCols:   uint64(binary.LittleEndian.Uint32(f[28:])),
	}
	if err := rd.readMetadata(t); err != nil {
		return nil, err
	}
	return rd, nil
}

type tail struct {
	metaStart, cmoPos, gboPos, numGB, numCols uint64
}

func (rd *Reader) readMetadata(t tail) error {
	end := uint64(rd.size - footerSize)
	if !(t.metaStart <= t.cmoPos && t.cmoPos <= t.gboPos && t.gboPos <= end) ||
		t.numCols*16 > t.gboPos-t.cmoPos || t.numGB*16 != end-t.gboPos {
		return malformed("footer", "inconsistent offsets: column metadata at %d, tables at %d and %d, %d columns, %d global buffers, footer at %d",
			t.metaStart, t.cmoPos, t.gboPos, t.numCols, t.numGB, end)
	}
	if t.numGB == 0 {
		return malformed("footer", "no global buffers; the schema is global buffer 0")
	}
	gbo, err := readAt(rd.r, rd.size, "global buffer table", t.gboPos, 16)
	if err != nil {
		return err
	}
	fdBytes, err := readAt(rd.r, rd.size, "global buffer 0", binary.LittleEndian.Uint64(gbo), binary.LittleEndian.Uint64(gbo[8:]))
	if err != nil {
		return err
	}
	fd := &lancefilepb.FileDescriptor{}
	if err := proto.Unmarshal(fdBytes, fd); err != nil {
		return malformed("file descriptor", "%v", err)
	}
	if err := rd.setSchema(fd); err != nil {
		return err
	}
	if t.numCols != uint64(len(rd.fields)) {
		return malformed("footer", "%d columns for %d fields", t.numCols, len(rd.fields))
	}
	cmo, err := readAt(rd.r, rd.size, "column metadata table", t.cmoPos, 16*t.numCols)
	if err != nil {
		return err
	}
	for c := range int(t.numCols) {
		if err := rd.readColumnMeta(c, cmo[16*c:]); err != nil {
			return err
		}
	}
	return nil
}

// setSchema takes the fields of the file descriptor: top-level fields of
// the types this package decodes, and structs of those (one level deep).
// A struct has no column of its own; each of its children is a column,
// reported as field "struct.child", null where the struct or the child
// is null.
func (rd *Reader) setSchema(fd *lancefilepb.FileDescriptor) error {
	if fd.GetLength() > maxRows {
		return malformed("file descriptor", "%d rows, more than %d", fd.GetLength(), uint64(maxRows))
	}
	rd.rows = fd.GetLength()
	structs := map[int32]*lancepb.Field{}
	lists := map[int32]*lancepb.Field{}
	var afs []arrow.Field
	for _, f := range fd.GetSchema().GetFields() {
		name, nullable, depth := f.GetName(), f.GetNullable(), 1
		var list *lancepb.Field
		made := []*lancepb.Field{f}
		if f.GetParentId() != -1 {
			if parent, ok := structs[f.GetParentId()]; ok {
				name, nullable, depth = parent.GetName()+"."+name, nullable || parent.GetNullable(), 2
				made = []*lancepb.Field{parent, f}
			} else if list, ok = lists[f.GetParentId()]; ok {
				delete(lists, f.GetParentId()) // a list has one child
			} else {
				return &UnsupportedTypeError{Field: f.GetName(), Type: "nested field (parent " + strconv.Itoa(int(f.GetParentId())) + ")"}
			}
		} else if f.GetLogicalType() == "struct" && rd.version != V2_0 {
			structs[f.GetId()] = f
			continue
		} else if f.GetLogicalType() == "list" && rd.version != V2_0 {
			lists[f.GetId()] = f
			continue
		}
		t, err := colTypeOfLogical(f.GetName(), f.GetLogicalType())
		if err != nil {
			return err
		}
		if list != nil {
			// The list's column: its items, one layer of repetition.
			t = listType(f.GetName(), f.GetNullable(), t)
			name, nullable, depth = list.GetName(), list.GetNullable(), 2
			made = []*lancepb.Field{list, f}
		}
		md := arrow.NewMetadata([]string{FieldIDKey}, []string{strconv.Itoa(int(f.GetId()))})
		afs = append(afs, arrow.Field{Name: name, Type: t.dt, Nullable: nullable, Metadata: md})
		rd.fields = append(rd.fields, f)
		rd.types = append(rd.types, t)
		rd.depth = append(rd.depth, depth)
		rd.lanceFields = append(rd.lanceFields, made)
	}
	for _, l := range lists {
		return &UnsupportedTypeError{Field: l.GetName(), Type: "list without an item field"}
	}
	rd.schema = arrow.NewSchema(afs, nil)
	return nil
}

func (rd *Reader) readColumnMeta(c int, entry []byte) error {
	op := fmt.Sprintf("column %d metadata", c)
	b, err := readAt(rd.r, rd.size, op, binary.LittleEndian.Uint64(entry), binary.LittleEndian.Uint64(entry[8:]))
	if err != nil {
		return err
	}
	cm := &lancefilepb.ColumnMetadata{}
	if err := proto.Unmarshal(b, cm); err != nil {
		return malformed(op, "%v", err)
	}
	var starts []uint64
	row := uint64(0)
	for p, pg := range cm.GetPages() {
		if len(pg.GetBufferOffsets()) != len(pg.GetBufferSizes()) {
			return malformed(op, "page %d has %d buffer offsets and %d sizes", p, len(pg.GetBufferOffsets()), len(pg.GetBufferSizes()))
		}
		if err := rd.checkBuffers(op, p, pg); err != nil {
			return err
		}
		if pg.GetLength() > rd.rows-row {
			return malformed(op, "pages hold more than the file's %d rows", rd.rows)
		}
		starts = append(starts, row)
		row += pg.GetLength()
	}
	if row != rd.rows {
		return malformed(op, "pages hold %d rows, the file %d", row, rd.rows)
	}
	rd.cols = append(rd.cols, cm)
	rd.starts = append(rd.starts, starts)
	return nil
}

// checkBuffers checks that a page's buffers lie inside the file and adds
// them to the file's total, which may not exceed the file size.
func (rd *Reader) checkBuffers(op string, p int, pg *lancefilepb.Page) error {
	size := uint64(rd.size)
	for i, off := range pg.GetBufferOffsets() {
		n := pg.GetBufferSizes()[i]
		if off > size || n > size-off {
			return malformed(op, "page %d buffer %d: %d bytes at %d lie outside the %d-byte file", p, i, n, off, size)
		}
		if n > size-rd.pageBytes {
			return malformed(op, "page buffers add up to more than the %d-byte file", size)
		}
		rd.pageBytes += n
	}
	return nil
}

// readAt reads n bytes at off after checking they lie inside the file.
func readAt(r io.ReaderAt, size int64, op string, off, n uint64) ([]byte, error) {
	if off > uint64(size) || n > uint64(size)-off {
		return nil, malformed(op, "%d bytes at %d lie outside the %d-byte file", n, off, size)
	}
	b := make([]byte, n)
	if _, err := r.ReadAt(b, int64(off)); err != nil && !(err == io.EOF && n > 0) {
		return nil, fmt.Errorf("lancefile: %s: read %d bytes at %d: %w", op, n, off, err)
	}
	return b, nil
}

// Version is the file's format version.
func (rd *Reader) Version() Version { return rd.version }

// NumRows is the number of rows in the file.
func (rd *Reader) NumRows() uint64 { return rd.rows }

// Schema is the file's columns as Arrow fields, each carrying its Lance
// field id under FieldIDKey in its metadata: the id of the column's leaf
// field, as a manifest's DataFile lists them (a list's item, a struct's
// child). A struct's child is named "struct.child" and reads null where
// the struct is null; a list column is named for the list.
func (rd *Reader) Schema() *arrow.Schema { return rd.schema }

// Fields are the leaf Lance schema fields of the file's columns, in
// column order: top-level fields, the children of structs and the items
// of lists.
func (rd *Reader) Fields() []*lancepb.Field { return rd.fields }

// NumPages is the number of pages of column col.
func (rd *Reader) NumPages(col int) int { return len(rd.cols[col].GetPages()) }

// ReadColumn reads rows [start, end) of column col.
func (rd *Reader) ReadColumn(col int, start, end uint64) (arrow.Array, error) {
	if col < 0 || col >= len(rd.cols) {
		return nil, inputErr("column %d out of range [0, %d)", col, len(rd.cols))
	}
	if start > end || end > rd.rows {
		return nil, inputErr("rows [%d, %d) out of range [0, %d)", start, end, rd.rows)
	}
	out := newColumn(rd.types[col])
	starts := rd.starts[col]
	for p, pg := range rd.cols[col].GetPages() {
		ps, pe := starts[p], starts[p]+pg.GetLength()
		if pe <= start || ps >= end || pg.GetLength() == 0 {
			continue
		}
		lo, hi := int(max(start, ps)-ps), int(min(end, pe)-ps)
		page, base, err := rd.decodePage(col, p, lo, hi)
		if err != nil {
			return nil, err
		}
		out.appendColumn(page, lo-base, hi-base)
	}
	return out.toArrow()
}

// ReadRange reads rows [start, end) of the given columns (nil: all) as a
// record batch.
func (rd *Reader) ReadRange(cols []int, start, end uint64) (arrow.Record, error) {
	if cols == nil {
		cols = rd.allColumns()
	}
	arrs := make([]arrow.Array, 0, len(cols))
	defer func() {
		for _, a := range arrs {
			a.Release()
		}
	}()
	for _, c := range cols {
		a, err := rd.ReadColumn(c, start, end)
		if err != nil {
			return nil, err
		}
		arrs = append(arrs, a)
	}
	return array.NewRecord(rd.project(cols), arrs, int64(end-start)), nil
}

// Take reads the given rows (in the order given, repeats allowed) of the
// given columns (nil: all). Each page is decoded at most once.
func (rd *Reader) Take(cols []int, rows []uint64) (arrow.Record, error) {
	if cols == nil {
		cols = rd.allColumns()
	}
	for _, r := range rows {
		if r >= rd.rows {
			return nil, inputErr("row %d out of range [0, %d)", r, rd.rows)
		}
	}
	arrs := make([]arrow.Array, 0, len(cols))
	defer func() {
		for _, a := range arrs {
			a.Release()
		}
	}()
	for _, c := range cols {
		a, err := rd.takeColumn(c, rows)
		if err != nil {
			return nil, err
		}
		arrs = append(arrs, a)
	}
	return array.NewRecord(rd.project(cols), arrs, int64(len(rows))), nil
}

func (rd *Reader) takeColumn(col int, rows []uint64) (arrow.Array, error) {
	if col < 0 || col >= len(rd.cols) {
		return nil, inputErr("column %d out of range [0, %d)", col, len(rd.cols))
	}
	type span struct{ lo, hi int } // rows wanted of one page
	spans := map[int]span{}
	starts := rd.starts[col]
	for _, r := range rows {
		p := pageOf(starts, r)
		i := int(r - starts[p])
		if s, ok := spans[p]; ok {
			spans[p] = span{min(s.lo, i), max(s.hi, i+1)}
		} else {
			spans[p] = span{i, i + 1}
		}
	}
	type decoded struct {
		c    *column
		base int
	}
	pages := make(map[int]decoded, len(spans))
	for p, s := range spans {
		c, base, err := rd.decodePage(col, p, s.lo, s.hi)
		if err != nil {
			return nil, err
		}
		pages[p] = decoded{c, base}
	}
	out := newColumn(rd.types[col])
	for _, r := range rows {
		p := pageOf(starts, r)
		d := pages[p]
		i := int(r-starts[p]) - d.base
		out.appendColumn(d.c, i, i+1)
	}
	return out.toArrow()
}

// pageOf returns the last page starting at or before row r.
func pageOf(starts []uint64, r uint64) int {
	lo, hi := 0, len(starts)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if starts[mid] <= r {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

func (rd *Reader) allColumns() []int {
	cols := make([]int, len(rd.cols))
	for i := range cols {
		cols[i] = i
	}
	return cols
}

func (rd *Reader) project(cols []int) *arrow.Schema {
	fs := make([]arrow.Field, len(cols))
	for i, c := range cols {
		fs[i] = rd.schema.Field(c)
	}
	return arrow.NewSchema(fs, nil)
}

// decodePage reads one page and decodes at least its rows [lo, hi). It
// returns them in a column whose first row is the page's row base; a
// mini-block page decodes only the chunks holding the rows, so the work
// is bounded by the bytes read plus the rows asked for.
func (rd *Reader) decodePage(col, p, lo, hi int) (*column, int, error) {
	pg := rd.cols[col].GetPages()[p]
	op := fmt.Sprintf("column %d page %d", col, p)
	bufs := make([][]byte, len(pg.GetBufferOffsets()))
	for i, off := range pg.GetBufferOffsets() {
		b, err := readAt(rd.r, rd.size, op, off, pg.GetBufferSizes()[i])
		if err != nil {
			return nil, 0, err
		}
		bufs[i] = b
	}
	enc, err := unwrapDirect(op, pg.GetEncoding())
	if err != nil {
		return nil, 0, err
	}
	pd := pageDecoder{op: op, t: rd.types[col], n: int(pg.GetLength()), lo: lo, hi: hi, bufs: bufs, v22: rd.version == V2_2, depth: rd.depth[col]}
	var c *column
	if rd.version == V2_0 {
		c, err = pd.decode20(enc)
	} else {
		c, err = pd.decode21(enc)
	}
	if err != nil {
		return nil, 0, err
	}
	if pd.partial && (pd.base > lo || pd.base+c.n < hi) || !pd.partial && c.n != pd.n {
		return nil, 0, malformed(op, "decoded %d rows from row %d, the page has %d", c.n, pd.base, pd.n)
	}
	return c, pd.base, nil
}

// unwrapDirect returns the Any inside a direct encoding.
func unwrapDirect(op string, e *lancefilepb.Encoding) (*anypb.Any, error) {
	d := e.GetDirect()
	if d == nil {
		if e.GetIndirect() != nil {
			return nil, &UnsupportedEncodingError{Name: "indirect", Op: op}
		}
		return nil, malformed(op, "page encoding is missing")
	}
	a := &anypb.Any{}
	if err := proto.Unmarshal(d.GetEncoding(), a); err != nil {
		return nil, malformed(op, "encoding: %v", err)
	}
	return a, nil
}

// pageDecoder holds one page's buffers while it is decoded.
type pageDecoder struct {
	op     string
	t      colType
	n      int // rows in the page
	lo, hi int // rows wanted
	bufs   [][]byte
	v22    bool // a 2.2 page: u32 mini-block sizes, constant layouts
	depth  int  // layers the page must have: 1, or 2 for a struct's child
	// maxDef is the highest definition level (0 valid, higher levels
	// null: the item, then its struct); checkLayers sets it.
	maxDef int
	// A decoder that decodes only part of the page sets partial and the
	// first row it decoded, base.
	partial bool
	base    int
}

func (pd *pageDecoder) buf(i uint64) ([]byte, error) {
	if i >= uint64(len(pd.bufs)) {
		return nil, malformed(pd.op, "buffer %d of %d", i, len(pd.bufs))
	}
	return pd.bufs[i], nil
}

// messageName returns the part of an Any's type URL after the last '/'.
func messageName(a *anypb.Any) string {
	u := a.GetTypeUrl()
	for i := len(u) - 1; i >= 0; i-- {
		if u[i] == '/' {
			return u[i+1:]
		}
	}
	return u
}
