package lancefile

import (
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// kind is how a column's values are laid out in memory and in pages.
type kind uint8

const (
	kindFixed kind = iota // width bytes per value (numbers, fixed-size lists)
	kindBool              // one bit per value
	kindVar               // offsets and bytes (strings, binary)
	kindList              // a list of elem values (read only)
)

// colType is what the encoders and decoders need to know about a type.
type colType struct {
	dt      arrow.DataType
	kind    kind
	width   int      // bytes per value (kindFixed)
	dim     int      // items per value for a fixed-size list, else 0
	item    int      // bytes per item for a fixed-size list
	large   bool     // 64-bit Arrow offsets (kindVar)
	logical string   // Lance logical type string
	elem    *colType // kindList: the items' type
}

// listType is a list of items of type elem (a top-level type other than a
// list), the items nullable or not.
func listType(item string, nullable bool, elem colType) colType {
	dt := arrow.ListOfField(arrow.Field{Name: item, Type: elem.dt, Nullable: nullable})
	return colType{dt: dt, kind: kindList, logical: "list", elem: &elem}
}

// primitiveNames maps the fixed-width Arrow types we store to Lance logical
// type names.
var primitiveNames = map[arrow.Type]string{
	arrow.INT8: "int8", arrow.INT16: "int16", arrow.INT32: "int32", arrow.INT64: "int64",
	arrow.UINT8: "uint8", arrow.UINT16: "uint16", arrow.UINT32: "uint32", arrow.UINT64: "uint64",
	arrow.FLOAT32: "float", arrow.FLOAT64: "double",
}

var primitiveTypes = map[string]arrow.DataType{
	"int8": arrow.PrimitiveTypes.Int8, "int16": arrow.PrimitiveTypes.Int16,
	"int32": arrow.PrimitiveTypes.Int32, "int64": arrow.PrimitiveTypes.Int64,
	"uint8": arrow.PrimitiveTypes.Uint8, "uint16": arrow.PrimitiveTypes.Uint16,
	"uint32": arrow.PrimitiveTypes.Uint32, "uint64": arrow.PrimitiveTypes.Uint64,
	"float": arrow.PrimitiveTypes.Float32, "double": arrow.PrimitiveTypes.Float64,
}

// timeUnits are the units of Lance's timestamp logical types
// ("timestamp:us:-", "timestamp:ms:UTC").
var timeUnits = map[string]arrow.TimeUnit{"s": arrow.Second, "ms": arrow.Millisecond, "us": arrow.Microsecond, "ns": arrow.Nanosecond}

// maxDim bounds the dimension of a fixed-size list so that value sizes
// cannot overflow.
const maxDim = 1 << 20

// colTypeOf describes an Arrow type, or fails for types we do not store.
func colTypeOf(name string, dt arrow.DataType) (colType, error) {
	if n, ok := primitiveNames[dt.ID()]; ok {
		w := dt.(arrow.FixedWidthDataType).BitWidth() / 8
		return colType{dt: dt, kind: kindFixed, width: w, logical: n}, nil
	}
	switch dt.ID() {
	case arrow.TIMESTAMP:
		ts := dt.(*arrow.TimestampType)
		tz := ts.TimeZone
		if tz == "" {
			tz = "-"
		}
		return colType{dt: dt, kind: kindFixed, width: 8, logical: "timestamp:" + ts.Unit.String() + ":" + tz}, nil
	case arrow.DATE32:
		return colType{dt: dt, kind: kindFixed, width: 4, logical: "date32:day"}, nil
	case arrow.BOOL:
		return colType{dt: dt, kind: kindBool, logical: "bool"}, nil
	case arrow.STRING:
		return colType{dt: dt, kind: kindVar, logical: "string"}, nil
	case arrow.LARGE_STRING:
		return colType{dt: dt, kind: kindVar, large: true, logical: "large_string"}, nil
	case arrow.BINARY:
		return colType{dt: dt, kind: kindVar, logical: "binary"}, nil
	case arrow.LARGE_BINARY:
		return colType{dt: dt, kind: kindVar, large: true, logical: "large_binary"}, nil
	case arrow.FIXED_SIZE_LIST:
		fsl := dt.(*arrow.FixedSizeListType)
		in, ok := primitiveNames[fsl.Elem().ID()]
		d := int(fsl.Len())
		if !ok || d <= 0 || d > maxDim {
			break
		}
		w := fsl.Elem().(arrow.FixedWidthDataType).BitWidth() / 8
		return colType{dt: dt, kind: kindFixed, width: w * d, dim: d, item: w,
			logical: "fixed_size_list:" + in + ":" + strconv.Itoa(d)}, nil
	}
	return colType{}, &UnsupportedTypeError{Field: name, Type: dt.String()}
}

// colTypeOfLogical is colTypeOf for a Lance logical type string.
func colTypeOfLogical(name, logical string) (colType, error) {
	var dt arrow.DataType
	switch logical {
	case "bool":
		dt = arrow.FixedWidthTypes.Boolean
	case "string":
		dt = arrow.BinaryTypes.String
	case "large_string":
		dt = arrow.BinaryTypes.LargeString
	case "binary":
		dt = arrow.BinaryTypes.Binary
	case "large_binary":
		dt = arrow.BinaryTypes.LargeBinary
	case "date32:day":
		dt = arrow.FixedWidthTypes.Date32
	default:
		if p, ok := primitiveTypes[logical]; ok {
			dt = p
			break
		}
		parts := strings.SplitN(logical, ":", 3)
		if len(parts) == 3 && parts[0] == "timestamp" {
			if u, ok := timeUnits[parts[1]]; ok && parts[2] != "" {
				tz := parts[2]
				if tz == "-" {
					tz = ""
				}
				dt = &arrow.TimestampType{Unit: u, TimeZone: tz}
			}
			break
		}
		if len(parts) == 3 && parts[0] == "fixed_size_list" {
			item, ok := primitiveTypes[parts[1]]
			d, err := strconv.Atoi(parts[2])
			if ok && err == nil && d > 0 && d <= maxDim {
				dt = arrow.FixedSizeListOf(int32(d), item)
			}
		}
	}
	if dt == nil {
		return colType{}, &UnsupportedTypeError{Field: name, Type: strconv.Quote(logical)}
	}
	return colTypeOf(name, dt)
}
