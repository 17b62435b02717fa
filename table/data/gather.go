package data

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// pick says where one output value comes from: row row of source src, or
// NULL when src is noSource.
type pick struct {
	src int32
	row uint32
}

const noSource = -1

// gather builds an array of type t whose i-th value is picks[i] taken from
// srcs. Every source must have type t (checked by the caller) and every
// pick must be in range.
func gather(t arrow.DataType, srcs []arrow.Array, picks []pick) arrow.Array {
	switch t.ID() {
	case arrow.BOOL:
		return gatherT[bool, *array.Boolean](array.NewBooleanBuilder(alloc), srcs, picks)
	case arrow.INT8:
		return gatherT[int8, *array.Int8](array.NewInt8Builder(alloc), srcs, picks)
	case arrow.INT16:
		return gatherT[int16, *array.Int16](array.NewInt16Builder(alloc), srcs, picks)
	case arrow.INT32:
		return gatherT[int32, *array.Int32](array.NewInt32Builder(alloc), srcs, picks)
	case arrow.INT64:
		return gatherT[int64, *array.Int64](array.NewInt64Builder(alloc), srcs, picks)
	case arrow.UINT8:
		return gatherT[uint8, *array.Uint8](array.NewUint8Builder(alloc), srcs, picks)
	case arrow.UINT16:
		return gatherT[uint16, *array.Uint16](array.NewUint16Builder(alloc), srcs, picks)
	case arrow.UINT32:
		return gatherT[uint32, *array.Uint32](array.NewUint32Builder(alloc), srcs, picks)
	case arrow.UINT64:
		return gatherT[uint64, *array.Uint64](array.NewUint64Builder(alloc), srcs, picks)
	case arrow.FLOAT32:
		return gatherT[float32, *array.Float32](array.NewFloat32Builder(alloc), srcs, picks)
	case arrow.FLOAT64:
		return gatherT[float64, *array.Float64](array.NewFloat64Builder(alloc), srcs, picks)
	case arrow.STRING:
		return gatherT[string, *array.String](array.NewStringBuilder(alloc), srcs, picks)
	case arrow.LARGE_STRING:
		return gatherT[string, *array.LargeString](array.NewLargeStringBuilder(alloc), srcs, picks)
	case arrow.BINARY:
		return gatherT[[]byte, *array.Binary](array.NewBinaryBuilder(alloc, arrow.BinaryTypes.Binary), srcs, picks)
	case arrow.LARGE_BINARY:
		return gatherT[[]byte, *array.LargeBinary](array.NewBinaryBuilder(alloc, arrow.BinaryTypes.LargeBinary), srcs, picks)
	}
	panic("data: gather: unsupported type " + t.String()) // callers check types first
}

type valuer[T any] interface {
	arrow.Array
	Value(int) T
}

type appender[T any] interface {
	array.Builder
	Append(T)
}

func gatherT[T any, A valuer[T]](b appender[T], srcs []arrow.Array, picks []pick) arrow.Array {
	defer b.Release()
	typed := make([]A, len(srcs))
	for i, s := range srcs {
		typed[i] = s.(A)
	}
	b.Reserve(len(picks))
	for _, p := range picks {
		if p.src == noSource {
			b.AppendNull()
			continue
		}
		a := typed[p.src]
		if a.IsNull(int(p.row)) {
			b.AppendNull()
			continue
		}
		b.Append(a.Value(int(p.row)))
	}
	return b.NewArray()
}
