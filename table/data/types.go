package data

import (
	"cellguard/proto/lancepb"

	"github.com/apache/arrow-go/v18/arrow"
)

// Lance names column types with logical_type strings in the schema (the
// strings Lance derives from Arrow types: a real Lance table with int32,
// int64, double, string and bool columns records exactly "int32",
// "int64", "double", "string" and "bool"). These are the ones this package
// reads and writes; every other logical type (nested, temporal, decimal,
// dictionary, half float) is ErrUnsupported.
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

// ArrowType returns the Arrow type of a Lance logical type string, such as
// "int64" → int64, "double" → float64, "string" → utf8, "bool" → bool.
func ArrowType(logicalType string) (arrow.DataType, bool) {
	t, ok := logicalTypes[logicalType]
	return t, ok
}

// LogicalType returns the Lance logical type string of an Arrow type: the
// inverse of ArrowType. Use it to build a schema Field for new columns.
func LogicalType(t arrow.DataType) (string, bool) {
	for name, lt := range logicalTypes {
		if arrow.TypeEqual(lt, t) {
			return name, true
		}
	}
	return "", false
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
