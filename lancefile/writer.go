package lancefile

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"

	pb20 "cellguard/proto/lanceenc20pb"
	"cellguard/proto/lancefilepb"
	"cellguard/proto/lancepb"
)

// Version is a Lance data file format version.
type Version uint8

const (
	// V2_1 is file format 2.1, the default of Lance 8 / LanceDB 0.31 and
	// of this package (the zero Version).
	V2_1 Version = iota
	// V2_0 is file format 2.0.
	V2_0
	// V2_2 is file format 2.2, the default of Lance 12 / LanceDB 0.39.
	// Lance 8 reads it too; LanceDB 0.31 creates 2.2 tables only when
	// asked.
	V2_2
)

// Versions lists every version this package reads and writes, oldest
// first.
var Versions = []Version{V2_0, V2_1, V2_2}

func (v Version) String() string {
	switch v {
	case V2_1:
		return "2.1"
	case V2_0:
		return "2.0"
	case V2_2:
		return "2.2"
	}
	return fmt.Sprintf("Version(%d)", uint8(v))
}

// ParseVersion parses a data storage version as a manifest's data_format
// and LanceDB's new_table_data_storage_version spell it: "2.0", "2.1" or
// "2.2". Anything else is an *InputError.
func ParseVersion(s string) (Version, error) {
	for _, v := range Versions {
		if v.String() == s {
			return v, nil
		}
	}
	return 0, inputErr("unknown file format version %q; want 2.0, 2.1 or 2.2", s)
}

// Numbers returns the version as a manifest's DataFile records it
// (file_major_version, file_minor_version): 2.0 is (2, 0), 2.1 is (2, 1),
// 2.2 is (2, 2). The same string with a dot is the manifest's data_format
// version.
func (v Version) Numbers() (major, minor uint32) {
	switch v {
	case V2_0:
		return 2, 0
	case V2_2:
		return 2, 2
	}
	return 2, 1
}

// footer returns the numbers written into the file's footer. Lance writes
// 2.0 files with the legacy pair (0, 3).
func (v Version) footer() (major, minor uint16) {
	switch v {
	case V2_0:
		return 0, 3
	case V2_2:
		return 2, 2
	}
	return 2, 1
}

// DefaultPageBytes is the page size a Writer aims for when
// WriterOptions.PageBytes is zero.
const DefaultPageBytes = 4 << 20

// WriterOptions configures a Writer. The zero value writes format 2.1 with
// pages of about DefaultPageBytes.
type WriterOptions struct {
	Version Version
	// PageBytes is the target size of one page of one column. A column
	// holds at most about this many bytes in memory while writing.
	PageBytes int
}

// FileInfo describes a written file: what a manifest's DataFile records.
type FileInfo struct {
	Rows         uint64
	MajorVersion uint32 // DataFile.file_major_version
	MinorVersion uint32 // DataFile.file_minor_version
	// Fields are the field ids stored, in order; ColumnIndices[i] is the
	// column of Fields[i].
	Fields        []int32
	ColumnIndices []int32
	Bytes         int64 // DataFile.file_size_bytes
}

// DataFile returns the manifest entry for the file, stored at path
// (relative to the dataset's data/ directory).
func (fi FileInfo) DataFile(path string) *lancepb.DataFile {
	return &lancepb.DataFile{
		Path:             path,
		Fields:           append([]int32(nil), fi.Fields...),
		ColumnIndices:    append([]int32(nil), fi.ColumnIndices...),
		FileMajorVersion: fi.MajorVersion,
		FileMinorVersion: fi.MinorVersion,
		FileSizeBytes:    uint64(fi.Bytes),
	}
}

// Writer writes one Lance data file, streaming: each column keeps at most
// one page in memory, and full pages go to the underlying writer as soon
// as they are full. It is not safe for concurrent use.
type Writer struct {
	w      io.Writer
	pos    int64
	opts   WriterOptions
	schema *arrow.Schema
	fields []*lancepb.Field
	cols   []*colWriter
	rows   uint64
	err    error // sticky: the first write error, or ErrClosed
}

type colWriter struct {
	name      string
	nullable  bool
	buf       *column
	meta      *lancefilepb.ColumnMetadata
	pageStart uint64
}

// NewWriter starts a file with the given schema. fieldIDs gives the Lance
// field id of each top-level field (they must match the dataset
// manifest's fields); nil numbers them 0, 1, 2, …. Every field must have a
// supported type: int8–int64, uint8–uint64, float32, float64, bool, utf8,
// large_utf8, binary, large_binary, or a fixed-size list of a numeric type
// (an embedding vector). Nothing is written until the first page is full
// or Close.
func NewWriter(w io.Writer, schema *arrow.Schema, fieldIDs []int32, opts WriterOptions) (*Writer, error) {
	if opts.Version > V2_2 {
		return nil, inputErr("unknown version %v", opts.Version)
	}
	if opts.PageBytes <= 0 {
		opts.PageBytes = DefaultPageBytes
	}
	fields, err := Fields(schema, fieldIDs)
	if err != nil {
		return nil, err
	}
	wr := &Writer{w: w, opts: opts, schema: schema, fields: fields}
	for i, f := range schema.Fields() {
		t, _ := colTypeOf(f.Name, f.Type) // checked by Fields
		wr.cols = append(wr.cols, &colWriter{
			name: f.Name, nullable: f.Nullable, buf: newColumn(t),
			meta: &lancefilepb.ColumnMetadata{Encoding: columnEncoding()},
		})
		_ = i
	}
	return wr, nil
}

// Fields returns the Lance schema fields of an Arrow schema, as both the
// file's FileDescriptor and a dataset manifest list them: one top-level
// field per column, parent_id -1, ids from fieldIDs (nil: 0, 1, …).
func Fields(schema *arrow.Schema, fieldIDs []int32) ([]*lancepb.Field, error) {
	if fieldIDs != nil && len(fieldIDs) != schema.NumFields() {
		return nil, inputErr("%d field ids for %d fields", len(fieldIDs), schema.NumFields())
	}
	seen := map[int32]bool{}
	var out []*lancepb.Field
	for i, f := range schema.Fields() {
		t, err := colTypeOf(f.Name, f.Type)
		if err != nil {
			return nil, err
		}
		id := int32(i)
		if fieldIDs != nil {
			id = fieldIDs[i]
		}
		if id < 0 || seen[id] {
			return nil, inputErr("field %q: id %d is negative or repeated", f.Name, id)
		}
		seen[id] = true
		lf := &lancepb.Field{Name: f.Name, Id: id, ParentId: -1, LogicalType: t.logical, Nullable: f.Nullable}
		if md := f.Metadata; md.Len() > 0 {
			lf.Metadata = map[string][]byte{}
			for j, k := range md.Keys() {
				lf.Metadata[k] = []byte(md.Values()[j])
			}
		}
		out = append(out, lf)
	}
	return out, nil
}

// columnEncoding is the column-level encoding Lance requires for every
// column: ColumnEncoding{values: {}}.
func columnEncoding() *lancefilepb.Encoding {
	b, _ := proto.Marshal(&pb20.ColumnEncoding{ColumnEncoding: &pb20.ColumnEncoding_Values{Values: &emptypb.Empty{}}})
	return direct("lance.encodings.ColumnEncoding", b)
}

// direct wraps a serialized encoding message as Lance does: a
// google.protobuf.Any with a domain-less type URL.
func direct(typeName string, value []byte) *lancefilepb.Encoding {
	a, _ := proto.MarshalOptions{Deterministic: true}.Marshal(&anypb.Any{TypeUrl: "/" + typeName, Value: value})
	return &lancefilepb.Encoding{Location: &lancefilepb.Encoding_Direct{Direct: &lancefilepb.DirectEncoding{Encoding: a}}}
}

// Write appends the rows of a record batch whose schema equals the
// writer's (same field names, types and order). Fixed-width values
// without nulls are not copied: the writer retains their arrays until
// their page is written (the caller may release the batch after Write),
// so they are copied once, into the file.
func (w *Writer) Write(rec arrow.Record) error {
	if w.err != nil {
		return w.err
	}
	if err := w.check(rec); err != nil {
		return err
	}
	n := int(rec.NumRows())
	for i, cw := range w.cols {
		if err := w.writeColumn(cw, rec.Column(i), n); err != nil {
			w.err = err
			return err
		}
	}
	w.rows += uint64(n)
	return nil
}

func (w *Writer) check(rec arrow.Record) error {
	if int(rec.NumCols()) != len(w.cols) {
		return inputErr("record has %d columns, the file %d", rec.NumCols(), len(w.cols))
	}
	for i, f := range w.schema.Fields() {
		rf := rec.Schema().Field(i)
		if rf.Name != f.Name || !arrow.TypeEqual(rf.Type, f.Type) {
			return inputErr("record column %d is %s %s, the file's %s %s", i, rf.Name, rf.Type, f.Name, f.Type)
		}
		if !f.Nullable && rec.Column(i).NullN() > 0 {
			return inputErr("field %q is not nullable but the record has %d nulls", f.Name, rec.Column(i).NullN())
		}
	}
	return nil
}

// writeColumn adds rows to the column's page, flushing pages as they fill.
func (w *Writer) writeColumn(cw *colWriter, a arrow.Array, n int) error {
	for from := 0; from < n; {
		to := cw.fit(a, from, n, w.opts.PageBytes)
		cw.buf.reserve(a, from, to, w.opts.PageBytes)
		if err := cw.buf.appendArrow(a, from, to); err != nil {
			return fmt.Errorf("lancefile: field %q: %w", cw.name, err)
		}
		from = to
		if cw.buf.size() >= w.opts.PageBytes {
			if err := w.flushPage(cw); err != nil {
				return err
			}
		}
	}
	return nil
}

// fit returns the end of the rows from `from` that fill the current page
// up to about limit bytes (at least one row).
func (cw *colWriter) fit(a arrow.Array, from, n, limit int) int {
	room := limit - cw.buf.size()
	switch t := cw.buf.t; t.kind {
	case kindFixed:
		return min(n, from+max(1, room/(t.width+1)))
	case kindBool:
		return min(n, from+max(1, room*4))
	}
	// The largest end whose bytes and offsets fit, found by bisection:
	// both grow with the end.
	offAt, _ := varOffsets(a)
	lo, hi := from+1, n
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if int(offAt(mid)-offAt(from))+9*(mid-from) < room {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// flushPage encodes the column's buffered rows as one page and writes it.
func (w *Writer) flushPage(cw *colWriter) error {
	c := cw.buf
	if c.n == 0 {
		return nil
	}
	var bufs []gather
	var enc *lancefilepb.Encoding
	if w.opts.Version == V2_0 {
		b, e := encodePage20(c)
		bufs, enc = b, direct("lance.encodings.ArrayEncoding", mustMarshal(e))
	} else {
		b, e := encodePage21(c, w.opts.Version == V2_2)
		bufs, enc = b, direct("lance.encodings21.PageLayout", mustMarshal(e))
	}
	page := &lancefilepb.Page{Length: uint64(c.n), Encoding: enc, Priority: cw.pageStart}
	for _, b := range bufs {
		pos, err := w.writeBuffer(b)
		if err != nil {
			return err
		}
		page.BufferOffsets = append(page.BufferOffsets, uint64(pos))
		page.BufferSizes = append(page.BufferSizes, uint64(b.len()))
	}
	cw.meta.Pages = append(cw.meta.Pages, page)
	cw.pageStart += uint64(c.n)
	c.reset()
	return nil
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic("lancefile: marshal encoding: " + err.Error()) // only for messages this package builds
	}
	return b
}

// alignment is the position every buffer starts at a multiple of; Lance
// 2.1 readers check it.
const alignment = 64

var zeros [alignment]byte

// writeBuffer writes b at the current position (a multiple of 64) and
// pads after it to the next multiple of 64.
func (w *Writer) writeBuffer(b gather) (int64, error) {
	pos := w.pos
	for _, part := range b {
		if err := w.write(part); err != nil {
			return 0, err
		}
	}
	if r := w.pos % alignment; r != 0 {
		if err := w.write(zeros[:alignment-r]); err != nil {
			return 0, err
		}
	}
	return pos, nil
}

func (w *Writer) write(b []byte) error {
	n, err := w.w.Write(b)
	w.pos += int64(n)
	if err != nil {
		w.err = fmt.Errorf("lancefile: write: %w", err)
		return w.err
	}
	return nil
}

// Close flushes the last pages and writes the schema, the column metadata
// and the footer. It does not close the underlying writer.
func (w *Writer) Close() (FileInfo, error) {
	if w.err != nil {
		return FileInfo{}, w.err
	}
	for _, cw := range w.cols {
		if err := w.flushPage(cw); err != nil {
			return FileInfo{}, err
		}
	}
	if err := w.writeTail(); err != nil {
		return FileInfo{}, err
	}
	w.err = ErrClosed
	major, minor := w.opts.Version.Numbers()
	fi := FileInfo{Rows: w.rows, MajorVersion: major, MinorVersion: minor, Bytes: w.pos}
	for i, f := range w.fields {
		fi.Fields = append(fi.Fields, f.Id)
		fi.ColumnIndices = append(fi.ColumnIndices, int32(i))
	}
	return fi, nil
}

// writeTail writes global buffer 0 (the FileDescriptor), the column
// metadata, the two offset tables and the footer.
func (w *Writer) writeTail() error {
	fd := &lancefilepb.FileDescriptor{Schema: &lancefilepb.Schema{Fields: w.fields}, Length: w.rows}
	gb := mustMarshal(fd)
	gbPos := w.pos // already aligned: every buffer is padded
	if err := w.write(gb); err != nil {
		return err
	}
	metaStart := w.pos
	var cmo []byte
	for _, cw := range w.cols {
		b := mustMarshal(cw.meta)
		cmo = binary.LittleEndian.AppendUint64(cmo, uint64(w.pos))
		cmo = binary.LittleEndian.AppendUint64(cmo, uint64(len(b)))
		if err := w.write(b); err != nil {
			return err
		}
	}
	cmoPos := w.pos
	if err := w.write(cmo); err != nil {
		return err
	}
	gboPos := w.pos
	var tail []byte
	tail = binary.LittleEndian.AppendUint64(tail, uint64(gbPos))
	tail = binary.LittleEndian.AppendUint64(tail, uint64(len(gb)))
	major, minor := w.opts.Version.footer()
	tail = binary.LittleEndian.AppendUint64(tail, uint64(metaStart))
	tail = binary.LittleEndian.AppendUint64(tail, uint64(cmoPos))
	tail = binary.LittleEndian.AppendUint64(tail, uint64(gboPos))
	tail = binary.LittleEndian.AppendUint32(tail, 1)
	tail = binary.LittleEndian.AppendUint32(tail, uint32(len(w.cols)))
	tail = binary.LittleEndian.AppendUint16(tail, major)
	tail = binary.LittleEndian.AppendUint16(tail, minor)
	tail = append(tail, magic...)
	return w.write(tail)
}

const magic = "LANC"
