package lancefile_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"cellguard/lancefile"
)

// allTypes is a schema with every type the writer stores, nullable and
// not. The vector of dimension 96 (384 bytes) takes the full-zip layout in
// 2.1, the one of dimension 4 the mini-block layout.
func allTypes() *arrow.Schema {
	var fs []arrow.Field
	add := func(name string, t arrow.DataType) {
		fs = append(fs, arrow.Field{Name: name, Type: t, Nullable: false}, arrow.Field{Name: name + "_n", Type: t, Nullable: true})
	}
	add("i8", arrow.PrimitiveTypes.Int8)
	add("i16", arrow.PrimitiveTypes.Int16)
	add("i32", arrow.PrimitiveTypes.Int32)
	add("i64", arrow.PrimitiveTypes.Int64)
	add("u8", arrow.PrimitiveTypes.Uint8)
	add("u16", arrow.PrimitiveTypes.Uint16)
	add("u32", arrow.PrimitiveTypes.Uint32)
	add("u64", arrow.PrimitiveTypes.Uint64)
	add("f32", arrow.PrimitiveTypes.Float32)
	add("f64", arrow.PrimitiveTypes.Float64)
	add("b", arrow.FixedWidthTypes.Boolean)
	add("s", arrow.BinaryTypes.String)
	add("ls", arrow.BinaryTypes.LargeString)
	add("bin", arrow.BinaryTypes.Binary)
	add("lbin", arrow.BinaryTypes.LargeBinary)
	add("v4", arrow.FixedSizeListOf(4, arrow.PrimitiveTypes.Float32))
	add("v96", arrow.FixedSizeListOf(96, arrow.PrimitiveTypes.Float32))
	add("ts", &arrow.TimestampType{Unit: arrow.Microsecond})
	add("ts_utc", &arrow.TimestampType{Unit: arrow.Millisecond, TimeZone: "UTC"})
	add("d32", arrow.FixedWidthTypes.Date32)
	return arrow.NewSchema(fs, nil)
}

// nullMode says which rows of a nullable column are null.
type nullMode int

const (
	someNulls nullMode = iota // every third row
	allNulls
	noNulls
)

// makeRecord returns rows [start, start+n) of deterministic data: value
// i of every column derives from row number i. Strings are long (over
// 256 bytes) when long is set, so that 2.1 writes them full-zip.
func makeRecord(schema *arrow.Schema, start, n int, mode nullMode, long bool) arrow.Record {
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for c, f := range schema.Fields() {
		fb := b.Field(c)
		for r := start; r < start+n; r++ {
			null := f.Nullable && (mode == allNulls || (mode == someNulls && r%3 == 1))
			if null {
				fb.AppendNull()
				continue
			}
			appendValue(fb, r, long)
		}
	}
	return b.NewRecord()
}

func appendValue(fb array.Builder, r int, long bool) {
	str := fmt.Sprintf("row-%d", r)
	if r%7 == 0 {
		str = "" // empty values are not nulls
	}
	if long {
		str = strings.Repeat(str+"|", 40)
	}
	switch fb := fb.(type) {
	case *array.Int8Builder:
		fb.Append(int8(r))
	case *array.Int16Builder:
		fb.Append(int16(r * 3))
	case *array.Int32Builder:
		fb.Append(int32(r*7 - 1000))
	case *array.Int64Builder:
		fb.Append(int64(r) * -123456789)
	case *array.Uint8Builder:
		fb.Append(uint8(r))
	case *array.Uint16Builder:
		fb.Append(uint16(r * 5))
	case *array.Uint32Builder:
		fb.Append(uint32(r) * 2654435761)
	case *array.Uint64Builder:
		fb.Append(uint64(r) << 33)
	case *array.Float32Builder:
		fb.Append(float32(r) / 4)
	case *array.Float64Builder:
		fb.Append(float64(r) * 1.5e-3)
	case *array.BooleanBuilder:
		fb.Append(r%2 == 0)
	case *array.StringBuilder:
		fb.Append(str)
	case *array.LargeStringBuilder:
		fb.Append(str)
	case *array.BinaryBuilder:
		fb.Append([]byte(str))
	case *array.TimestampBuilder:
		// Whole milliseconds, which LanceDB's JavaScript rows give exactly.
		v := int64(1_700_000_000_000 + 1_000*r)
		if fb.Type().(*arrow.TimestampType).Unit == arrow.Microsecond {
			v *= 1000
		}
		fb.Append(arrow.Timestamp(v))
	case *array.Date32Builder:
		fb.Append(arrow.Date32(19_000 + r))
	case *array.FixedSizeListBuilder:
		fb.Append(true)
		vb := fb.ValueBuilder().(*array.Float32Builder)
		d := int(fb.Type().(*arrow.FixedSizeListType).Len())
		for k := range d {
			vb.Append(float32(r) + float32(k)/100)
		}
	default:
		if lb, ok := fb.(*array.BinaryBuilder); ok {
			lb.Append([]byte(str))
			return
		}
		panic(fmt.Sprintf("no value for %T", fb))
	}
}

// writeFile writes the records with the given options and returns the
// file bytes and info.
func writeFile(t testing.TB, schema *arrow.Schema, recs []arrow.Record, opts lancefile.WriterOptions) ([]byte, lancefile.FileInfo) {
	t.Helper()
	var buf bytes.Buffer
	w, err := lancefile.NewWriter(&buf, schema, nil, opts)
	if err != nil {
		t.Fatalf("NewWriter: %v", err)
	}
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatalf("Write: %v", err)
		}
	}
	fi, err := w.Close()
	if err != nil {
		t.Fatalf("Close: %v", err)
	}
	if fi.Bytes != int64(buf.Len()) {
		t.Fatalf("FileInfo.Bytes = %d; wrote %d", fi.Bytes, buf.Len())
	}
	return buf.Bytes(), fi
}

// concat concatenates the column c of the records.
func concat(t testing.TB, recs []arrow.Record, c int) arrow.Array {
	t.Helper()
	var arrs []arrow.Array
	for _, r := range recs {
		arrs = append(arrs, r.Column(c))
	}
	a, err := array.Concatenate(arrs, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
