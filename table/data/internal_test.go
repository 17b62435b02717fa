package data

import (
	"bytes"
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"cellguard/proto/lancepb"
)

func TestDatasetURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/var/lib/ds", "file:///var/lib/ds?create_dir=true&metadata=skip"},
		{"file:///var/lib/ds", "file:///var/lib/ds?create_dir=true&metadata=skip"},
		{"file:///var/lib/ds?metadata=if", "file:///var/lib/ds?create_dir=true&metadata=if"},
		{"mem://", "mem://"},
		{"s3://bucket/tables/t1?region=eu-west-1", "s3://bucket?prefix=tables%2Ft1%2F&region=eu-west-1"},
		{"s3://bucket?region=eu-west-1", "s3://bucket?region=eu-west-1"},
	}
	for _, tc := range tests {
		got, err := datasetURL(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("datasetURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestCacheBound(t *testing.T) {
	c := newCache[int](10)
	c.put("a", 1, 4)
	c.put("b", 2, 4)
	c.get("a") // b is now the least recently used
	c.put("c", 3, 4)
	if _, ok := c.get("b"); ok {
		t.Error("b survived eviction")
	}
	if v, ok := c.get("a"); !ok || v != 1 {
		t.Errorf("get(a) = %v, %v; want 1, true", v, ok)
	}
	c.put("huge", 4, 11)
	if _, ok := c.get("huge"); ok || c.len() != 2 {
		t.Errorf("an entry over the bound was kept (len %d)", c.len())
	}
	off := newCache[int](-1)
	off.put("a", 1, 0)
	if off.len() != 0 {
		t.Error("a disabled cache keeps entries")
	}
}

// FuzzDecodeIPC checks that no input makes the Arrow IPC decoder panic or
// yield a column whose values cannot all be read.
func FuzzDecodeIPC(f *testing.F) {
	field := &lancepb.Field{Name: "s", Id: 1, ParentId: -1, LogicalType: "string", Nullable: true}
	sb := array.NewStringBuilder(alloc)
	sb.AppendValues([]string{"a", "", "ccc"}, []bool{true, false, true})
	ib := array.NewInt64Builder(alloc)
	ib.AppendValues([]int64{1, 2, 3}, nil)
	bb := array.NewBooleanBuilder(alloc)
	bb.AppendValues([]bool{true, false, true}, nil)
	good, err := encodeIPC([]arrow.Field{
		legacyField(field, arrow.BinaryTypes.String),
		{Name: "i", Type: arrow.PrimitiveTypes.Int64},
		{Name: "b", Type: arrow.FixedWidthTypes.Boolean},
	}, []arrow.Array{sb.NewArray(), ib.NewArray(), bb.NewArray()}, 3)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	var zstd bytes.Buffer
	w, err := ipc.NewFileWriter(&zstd, ipc.WithSchema(arrow.NewSchema([]arrow.Field{{Name: "row_id", Type: arrow.PrimitiveTypes.Uint32}}, nil)), ipc.WithZstd())
	if err != nil {
		f.Fatal(err)
	}
	ub := array.NewUint32Builder(alloc)
	ub.AppendValues([]uint32{4, 8, 15}, nil)
	rec := array.NewRecordBatch(arrow.NewSchema([]arrow.Field{{Name: "row_id", Type: arrow.PrimitiveTypes.Uint32}}, nil), []arrow.Array{ub.NewArray()}, 3)
	if err := w.Write(rec); err != nil {
		f.Fatal(err)
	}
	if err := w.Close(); err != nil {
		f.Fatal(err)
	}
	f.Add(zstd.Bytes())
	for i := 0; i < len(good); i += 97 { // single-byte corruptions across the file
		b := bytes.Clone(good)
		b[i] ^= 0xff
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := decodeIPC("fuzz.arrow", b)
		if err != nil {
			return
		}
		for _, c := range file.cols {
			if _, ok := LogicalType(c.DataType()); !ok {
				continue // never read: the manifest's type would not match
			}
			for i := range c.Len() {
				_ = c.IsNull(i)
				_ = c.ValueStr(i)
			}
		}
		_, _ = decodeDeletionArrow("fuzz.arrow", b)
	})
}

// TestGatherFixedSizeList gathers vectors from sliced sources, with null
// lists and null items (as Lance 2.0 files LanceDB wrote may hold), and
// compares with the same values built directly.
func TestGatherFixedSizeList(t *testing.T) {
	typ := arrow.FixedSizeListOf(3, arrow.PrimitiveTypes.Float32)
	// build makes a vector array; a nil row is a null list, NaN a null item.
	build := func(rows ...[]float32) arrow.Array {
		b := array.NewFixedSizeListBuilderWithField(alloc, 3, typ.ElemField())
		defer b.Release()
		vb := b.ValueBuilder().(*array.Float32Builder)
		for _, r := range rows {
			if r == nil {
				b.AppendNull()
				continue
			}
			b.Append(true)
			for _, v := range r {
				if v != v {
					vb.AppendNull()
				} else {
					vb.Append(v)
				}
			}
		}
		return b.NewArray()
	}
	nan := float32(math.NaN())
	a := build([]float32{9, 9, 9}, []float32{1, nan, 3}, nil, []float32{4, 5, 6})
	sliced := array.NewSlice(a, 1, 4) // [1 _ 3], null, [4 5 6]
	plain := build([]float32{7, 8, 9})
	for _, tc := range []struct {
		name  string
		srcs  []arrow.Array
		picks []pick
		want  arrow.Array
	}{
		{"null items", []arrow.Array{sliced, plain}, []pick{{0, 2}, {1, 0}, {noSource, 0}, {0, 0}, {0, 1}},
			build([]float32{4, 5, 6}, []float32{7, 8, 9}, nil, []float32{1, nan, 3}, nil)},
		{"no null items", []arrow.Array{plain}, []pick{{0, 0}, {noSource, 0}, {0, 0}},
			build([]float32{7, 8, 9}, nil, []float32{7, 8, 9})},
	} {
		got := gather(typ, tc.srcs, tc.picks)
		if err := got.(*array.FixedSizeList).ValidateFull(); err != nil {
			t.Errorf("%s: invalid array: %v", tc.name, err)
		}
		if !array.Equal(got, tc.want) {
			t.Errorf("%s: gather = %v; want %v", tc.name, got, tc.want)
		}
	}
}
