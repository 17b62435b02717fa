package data_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

// The test table: one field of each supported kind the data plane is
// mostly used with.
const (
	fX int32 = iota // int64, not nullable
	fS              // string
	fF              // double
	fB              // bool
	fY              // int64, never in the first fragments' files
)

var testFields = []*lancepb.Field{
	{Name: "x", Id: fX, ParentId: -1, LogicalType: "int64"},
	{Name: "s", Id: fS, ParentId: -1, LogicalType: "string", Nullable: true},
	{Name: "f", Id: fF, ParentId: -1, LogicalType: "double", Nullable: true},
	{Name: "b", Id: fB, ParentId: -1, LogicalType: "bool", Nullable: true},
	{Name: "y", Id: fY, ParentId: -1, LogicalType: "int64", Nullable: true},
}

func testSchema(t testing.TB) *table.Schema {
	t.Helper()
	s, err := table.NewSchema(testFields)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func fieldArrowType(id int32) arrow.DataType {
	t, _ := data.ArrowType(testFields[id].GetLogicalType())
	return t
}

// toArray builds an Arrow array of type t from Go values; nil is null.
func toArray(t arrow.DataType, vals []any) arrow.Array {
	mem := memory.NewGoAllocator()
	b := array.NewBuilder(mem, t)
	defer b.Release()
	for _, v := range vals {
		if v == nil {
			b.AppendNull()
			continue
		}
		switch b := b.(type) {
		case *array.Int64Builder:
			b.Append(v.(int64))
		case *array.StringBuilder:
			b.Append(v.(string))
		case *array.Float64Builder:
			b.Append(v.(float64))
		case *array.BooleanBuilder:
			b.Append(v.(bool))
		default:
			panic(fmt.Sprintf("toArray: %T", b))
		}
	}
	return b.NewArray()
}

// fromArray returns the values of a as Go values; nil is null.
func fromArray(a arrow.Array) []any {
	out := make([]any, a.Len())
	for i := range out {
		if a.IsNull(i) {
			continue
		}
		switch a := a.(type) {
		case *array.Int64:
			out[i] = a.Value(i)
		case *array.String:
			out[i] = a.Value(i)
		case *array.Float64:
			out[i] = a.Value(i)
		case *array.Boolean:
			out[i] = a.Value(i)
		default:
			panic(fmt.Sprintf("fromArray: %T", a))
		}
	}
	return out
}

func openMem(t testing.TB) *data.Store {
	t.Helper()
	s, err := data.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// backends runs fn against an in-memory and an on-disk store.
func backends(t *testing.T, fn func(t *testing.T, s *data.Store)) {
	t.Run("mem", func(t *testing.T) { fn(t, openMem(t)) })
	t.Run("file", func(t *testing.T) {
		s, err := data.Open(context.Background(), "file://"+t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		fn(t, s)
	})
}

func cloneFragment(f *lancepb.DataFragment) *lancepb.DataFragment { return proto.CloneOf(f) }

func cloneDeletion(d *lancepb.DeletionFile) *lancepb.DeletionFile { return proto.CloneOf(d) }

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
