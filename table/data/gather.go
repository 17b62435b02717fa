package data

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
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
	case arrow.FIXED_SIZE_LIST:
		return gatherFixedSizeList(t.(*arrow.FixedSizeListType), srcs, picks)
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

// gatherFixedSizeList is gather for a fixed-size list of fixed-width items
// (an embedding vector): it copies each picked list's item bytes and, when
// a source has null items (Lance 2.0 files LanceDB wrote may), their
// validity. Writers refuse null items, so a list of this package's files
// has none.
func gatherFixedSizeList(t *arrow.FixedSizeListType, srcs []arrow.Array, picks []pick) arrow.Array {
	dim := int(t.Len())
	itemWidth := t.Elem().(arrow.FixedWidthDataType).BitWidth() / 8
	n := len(picks)
	values := make([]byte, n*dim*itemWidth)
	valid := make([]byte, bitutil.BytesForBits(int64(n)))
	var itemValid []byte // nil while no source has null items
	for _, s := range srcs {
		if s.(*array.FixedSizeList).ListValues().NullN() > 0 {
			itemValid = make([]byte, bitutil.BytesForBits(int64(n*dim)))
			break
		}
	}
	nulls, itemNulls := 0, 0
	for i, p := range picks {
		if p.src == noSource || srcs[p.src].IsNull(int(p.row)) {
			nulls++
			itemNulls += dim
			continue
		}
		bitutil.SetBit(valid, i)
		src := srcs[p.src].(*array.FixedSizeList)
		items := src.ListValues()
		first := (src.Data().Offset() + int(p.row)) * dim // index into items
		start := (items.Data().Offset() + first) * itemWidth
		copy(values[i*dim*itemWidth:], items.Data().Buffers()[1].Bytes()[start:start+dim*itemWidth])
		if itemValid == nil {
			continue
		}
		for k := range dim {
			if items.IsNull(first + k) {
				itemNulls++
			} else {
				bitutil.SetBit(itemValid, i*dim+k)
			}
		}
	}
	var childValidity *memory.Buffer
	if itemValid != nil {
		childValidity = memory.NewBufferBytes(itemValid)
	} else {
		itemNulls = 0 // items under null lists are not null themselves
	}
	child := array.NewData(t.Elem(), n*dim, []*memory.Buffer{childValidity, memory.NewBufferBytes(values)}, nil, itemNulls, 0)
	defer child.Release()
	var validity *memory.Buffer
	if nulls > 0 {
		validity = memory.NewBufferBytes(valid)
	}
	d := array.NewData(t, n, []*memory.Buffer{validity}, []arrow.ArrayData{child}, nulls, 0)
	defer d.Release()
	return array.MakeFromData(d)
}
