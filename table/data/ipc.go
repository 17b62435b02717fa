package data

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// This file reads the Arrow IPC data files that cellguard wrote before it
// wrote Lance files (named *.arrow), so that datasets written then stay
// readable. Nothing writes them any more.

// fieldIDKey is the Arrow field metadata key under which those files
// record the Lance field id of each column.
const fieldIDKey = "cellguard:field_id"

// alloc is the allocator for every array this package makes. Go-managed
// memory means callers may, but need not, Release what they receive.
var alloc = memory.NewGoAllocator()

// ipcFile is a decoded Arrow IPC file: its schema and, per column, all its
// record batches concatenated. It is immutable and may be shared.
type ipcFile struct {
	schema *arrow.Schema
	cols   []arrow.Array
	rows   int
	size   int64 // bytes held, for cache accounting
}

// decodeBudget bounds, with 8 bytes per file byte, what decoding one file
// may allocate: our files are not compressed, and Lance compresses only
// small deletion files.
const decodeBudget = 64 << 20

// decodeIPC decodes an Arrow IPC file (compressed buffers included) and
// checks every column enough that reading any of its values cannot panic.
// The decoder trusts its input, so a panic inside it is turned into a
// FormatError as well, and what it may allocate is bounded.
func decodeIPC(path string, b []byte) (f *ipcFile, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, err = nil, formatErr(path, nil, "not a readable Arrow IPC file: decoder panicked: %v", r)
		}
	}()
	if err := checkFooter(b); err != nil {
		return nil, formatErr(path, err, "not an Arrow IPC file")
	}
	mem := &budgetAllocator{Allocator: alloc, left: decodeBudget + 8*len(b)}
	rd, err := ipc.NewMappedFileReader(b, ipc.WithAllocator(mem))
	if err != nil {
		return nil, formatErr(path, err, "not an Arrow IPC file")
	}
	defer rd.Close()
	schema := rd.Schema()
	n := rd.NumRecords()
	parts := make([][]arrow.Array, schema.NumFields())
	rows := 0
	for i := range n {
		rec, err := rd.RecordBatch(i)
		if err != nil {
			return nil, formatErr(path, err, "record batch %d", i)
		}
		for c := range parts {
			col := rec.Column(c)
			if msg := checkArray(col); msg != "" {
				return nil, formatErr(path, nil, "batch %d column %d (%s): %s", i, c, schema.Field(c).Name, msg)
			}
			col.Retain()
			parts[c] = append(parts[c], col)
		}
		rows += int(rec.NumRows())
	}
	f = &ipcFile{schema: schema, cols: make([]arrow.Array, len(parts)), rows: rows, size: int64(len(b))}
	for c, p := range parts {
		switch len(p) {
		case 0:
			f.cols[c] = array.MakeArrayOfNull(alloc, schema.Field(c).Type, 0)
		case 1:
			f.cols[c] = p[0]
		default:
			col, err := array.Concatenate(p, alloc)
			if err != nil {
				return nil, formatErr(path, err, "column %d", c)
			}
			f.cols[c] = col
			f.size += int64(col.Data().SizeInBytes())
		}
	}
	return f, nil
}

// checkArray reports why reading a value of a could panic or mislead, or
// "" if it cannot. Primitive value buffers are checked by the decoder
// itself (it slices them to length); this checks what it does not.
func checkArray(a arrow.Array) string {
	d := a.Data()
	need := (d.Offset() + d.Len() + 7) / 8
	bufs := d.Buffers()
	if len(bufs) > 0 && bufs[0] != nil && bufs[0].Len() > 0 && bufs[0].Len() < need {
		return fmt.Sprintf("validity bitmap of %d bytes for %d rows", bufs[0].Len(), d.Offset()+d.Len())
	}
	if fw, ok := a.DataType().(arrow.FixedWidthDataType); ok && fw.BitWidth() >= 8 && d.Len() > 0 {
		if len(bufs) < 2 || bufs[1] == nil || bufs[1].Len() < (d.Offset()+d.Len())*fw.BitWidth()/8 {
			return "values shorter than the column"
		}
	}
	switch a := a.(type) {
	case *array.Boolean:
		if d.Len() > 0 && (len(bufs) < 2 || bufs[1] == nil || bufs[1].Len() < need) {
			return "boolean values shorter than the column"
		}
	case *array.String:
		if err := a.ValidateFull(); err != nil {
			return err.Error()
		}
	case *array.LargeString:
		if err := a.ValidateFull(); err != nil {
			return err.Error()
		}
	case *array.Binary:
		if err := a.ValidateFull(); err != nil {
			return err.Error()
		}
	case *array.LargeBinary:
		if err := a.ValidateFull(); err != nil {
			return err.Error()
		}
	}
	return ""
}

// column returns column idx of file f, or the column recording field id
// when idx is -1, checking that it holds field id with type t.
func column(path string, f *ipcFile, idx, id int32, t arrow.DataType) (arrow.Array, error) {
	if idx < 0 {
		for i, af := range f.schema.Fields() {
			if got, ok := fieldIDOf(af, fieldIDKey); ok && got == id {
				idx = int32(i)
				break
			}
		}
		if idx < 0 {
			return nil, formatErr(path, nil, "no column for field %d", id)
		}
	}
	if int(idx) >= len(f.cols) {
		return nil, formatErr(path, nil, "column %d for field %d, file has %d columns", idx, id, len(f.cols))
	}
	af := f.schema.Field(int(idx))
	if got, ok := fieldIDOf(af, fieldIDKey); ok && got != id {
		return nil, formatErr(path, nil, "column %d holds field %d, manifest says field %d", idx, got, id)
	}
	if !arrow.TypeEqual(af.Type, t) {
		return nil, formatErr(path, nil, "column %d (field %d) has type %s, schema says %s", idx, id, af.Type, t)
	}
	return f.cols[idx], nil
}
