package data

import (
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"

	"cellguard/proto/lancepb"
)

// Lance names column types with logical_type strings in the schema (the
// strings Lance derives from Arrow types: a real Lance table with int32,
// int64, double, string and bool columns records exactly "int32",
// "int64", "double", "string" and "bool"). These, and fixed-size lists of
// the numeric ones ("fixed_size_list:float:768", an embedding vector), are
// the ones this package reads and writes; every other logical type
// (nested, temporal, decimal, dictionary, half float) is ErrUnsupported.
var logicalTypes = map[string]arrow.DataType{
	"bool":         arrow.FixedWidthTypes.Boolean,
	"int8":         arrow.PrimitiveTypes.Int8,
	"int16":        arrow.PrimitiveTypes.Int16,
	"int32":        arrow.PrimitiveTypes.Int32,
	"int64":        arrow.PrimitiveTypes.Int64,
	"uint8":        arrow.PrimitiveTypes.Uint8,
	"uint16":       arrow.PrimitiveTypes.Uint16,
	"uint32":       arrow.PrimitiveTypes.Uint32,
	"uint64":       arrow.PrimitiveTypes.Uint64,
	"float":        arrow.PrimitiveTypes.Float32,
	"double":       arrow.PrimitiveTypes.Float64,
	"string":       arrow.BinaryTypes.String,
	"large_string": arrow.BinaryTypes.LargeString,
	"binary":       arrow.BinaryTypes.Binary,
	"large_binary": arrow.BinaryTypes.LargeBinary,
}

// fslPrefix starts the logical type of a fixed-size list:
// "fixed_size_list:<item logical type>:<dimension>".
const fslPrefix = "fixed_size_list:"

// maxDim bounds the dimension of a fixed-size list we accept.
const maxDim = 1 << 20

// ArrowType returns the Arrow type of a Lance logical type string, such as
// "int64" → int64, "double" → float64, "string" → utf8, "bool" → bool,
// "fixed_size_list:float:768" → fixed_size_list<float32>[768].
func ArrowType(logicalType string) (arrow.DataType, bool) {
	if t, ok := logicalTypes[logicalType]; ok {
		return t, true
	}
	rest, ok := strings.CutPrefix(logicalType, fslPrefix)
	if !ok {
		return nil, false
	}
	item, dim, ok := strings.Cut(rest, ":")
	it, isItem := logicalTypes[item]
	d, err := strconv.Atoi(dim)
	if !ok || !isItem || !numeric(it) || err != nil || d <= 0 || d > maxDim || strconv.Itoa(d) != dim {
		return nil, false
	}
	return arrow.FixedSizeListOf(int32(d), it), true
}

// LogicalType returns the Lance logical type string of an Arrow type: the
// inverse of ArrowType. Use it to build a schema Field for new columns.
func LogicalType(t arrow.DataType) (string, bool) {
	if fsl, ok := t.(*arrow.FixedSizeListType); ok {
		item, ok := LogicalType(fsl.Elem())
		if !ok || !numeric(fsl.Elem()) || fsl.Len() <= 0 || fsl.Len() > maxDim || !arrow.TypeEqual(t, arrow.FixedSizeListOf(fsl.Len(), fsl.Elem())) {
			return "", false
		}
		return fslPrefix + item + ":" + strconv.Itoa(int(fsl.Len())), true
	}
	for name, lt := range logicalTypes {
		if arrow.TypeEqual(lt, t) {
			return name, true
		}
	}
	return "", false
}

// numeric reports whether t is an integer or floating point type: the
// items a fixed-size list may hold.
func numeric(t arrow.DataType) bool {
	return arrow.IsInteger(t.ID()) || arrow.IsFloating(t.ID()) && t.ID() != arrow.FLOAT16
}

// fieldType returns the Arrow type of a schema field, or an error if the
// field is nested or its type is not supported.
func fieldType(op string, f *lancepb.Field) (arrow.DataType, error) {
	t, ok := ArrowType(f.GetLogicalType())
	if !ok {
		return nil, errorf(op, ErrUnsupported, "field %d (%q) has logical type %q", f.GetId(), f.GetName(), f.GetLogicalType())
	}
	if f.GetParentId() != -1 {
		return nil, errorf(op, ErrUnsupported, "field %d (%q) is nested in field %d", f.GetId(), f.GetName(), f.GetParentId())
	}
	return t, nil
}
