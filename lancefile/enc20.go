package lancefile

import (
	"encoding/binary"

	pb20 "cellguard/proto/lanceenc20pb"
)

// Format 2.0 page encodings, as this package writes them (Lance writes the
// same trees for uncompressed data):
//
//	numbers, bool   nullable{no_nulls{values: flat{bits, buffer 0}}}
//	                nullable{some_nulls{validity: flat{1, buffer 0}, values: flat{bits, buffer 1}}}
//	                nullable{all_nulls{}}                      (no buffers)
//	fixed-size list the same, with values: fixed_size_list{dimension, items: nullable{no_nulls{values: flat{item bits}}}}
//	strings, binary binary{indices: nullable{no_nulls{values: flat{64, buffer 0}}}, bytes: flat{8, buffer 1}, null_adjustment: K}
//
// Binary indices are the end offset of each row, with K (total bytes + 1)
// added for a null row; the start of row i is indices[i-1] mod K.

func flat20(bits uint64, buf uint32) *pb20.ArrayEncoding {
	return &pb20.ArrayEncoding{ArrayEncoding: &pb20.ArrayEncoding_Flat{Flat: &pb20.Flat{
		BitsPerValue: bits, Buffer: &pb20.Buffer{BufferIndex: buf}}}}
}

func noNulls20(values *pb20.ArrayEncoding) *pb20.ArrayEncoding {
	return &pb20.ArrayEncoding{ArrayEncoding: &pb20.ArrayEncoding_Nullable{Nullable: &pb20.Nullable{
		Nullability: &pb20.Nullable_NoNulls{NoNulls: &pb20.Nullable_NoNull{Values: values}}}}}
}

// encodePage20 returns the buffers and encoding of one 2.0 page.
func encodePage20(c *column) ([]gather, *pb20.ArrayEncoding) {
	if c.t.kind == kindVar {
		return encodeBinary20(c)
	}
	if c.nulls == c.n {
		return nil, &pb20.ArrayEncoding{ArrayEncoding: &pb20.ArrayEncoding_Nullable{Nullable: &pb20.Nullable{
			Nullability: &pb20.Nullable_AllNulls{AllNulls: &pb20.Nullable_AllNull{}}}}}
	}
	values := gather(c.fixedParts())
	if c.t.kind == kindBool {
		c.bits.clearTail()
		values = gather{c.bits.b}
	}
	if c.nulls == 0 {
		return []gather{values}, noNulls20(values20(c.t, 0))
	}
	c.valid.clearTail()
	enc := &pb20.ArrayEncoding{ArrayEncoding: &pb20.ArrayEncoding_Nullable{Nullable: &pb20.Nullable{
		Nullability: &pb20.Nullable_SomeNulls{SomeNulls: &pb20.Nullable_SomeNull{
			Validity: flat20(1, 0), Values: values20(c.t, 1)}}}}}
	return []gather{{c.valid.b}, values}, enc
}

// values20 is the encoding of a fixed-width or bool value buffer.
func values20(t colType, buf uint32) *pb20.ArrayEncoding {
	switch {
	case t.kind == kindBool:
		return flat20(1, buf)
	case t.dim > 0:
		return &pb20.ArrayEncoding{ArrayEncoding: &pb20.ArrayEncoding_FixedSizeList{FixedSizeList: &pb20.FixedSizeList{
			Dimension: uint32(t.dim), Items: noNulls20(flat20(uint64(8*t.item), buf))}}}
	}
	return flat20(uint64(8*t.width), buf)
}

func encodeBinary20(c *column) ([]gather, *pb20.ArrayEncoding) {
	k := uint64(len(c.data)) + 1
	idx := make([]byte, 8*c.n)
	for i := range c.n {
		v := uint64(c.offs[i+1])
		if !c.valid.get(i) {
			v += k
		}
		binary.LittleEndian.PutUint64(idx[8*i:], v)
	}
	enc := &pb20.ArrayEncoding{ArrayEncoding: &pb20.ArrayEncoding_Binary{Binary: &pb20.Binary{
		Indices: noNulls20(flat20(64, 0)), Bytes: flat20(8, 1), NullAdjustment: k}}}
	return []gather{{idx}, {c.data}}, enc
}
