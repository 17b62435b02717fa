package table

// fragment_raw.go lets an appended fragment keep the bytes it was staged
// with. A staged Append's fragment usually arrives exactly as this
// package would encode it, less the id the committer assigns: then the
// Fragment's encoding is the id field followed by those bytes, and
// neither the checks of plainFragment nor an encoding pass are needed.
// canonicalFragment decides when that holds; TestRawFragmentMatchesEncode
// and FuzzDecodeAppend check it against encodePlainFragment.

import (
	"math"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"cellguard/internal/pbwire"
)

// canonicalFragment reports whether b, the encoding of a DataFragment,
// is exactly what encodePlainFragment writes for that fragment with id
// 0: its data files, then a non-zero physical_rows, and nothing else;
// every tag, length and varint in its shortest form, no field at its
// zero value, field ids and column indices as proto writes an int32, the
// path valid UTF-8.
func canonicalFragment(b []byte) bool {
	var last protowire.Number
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || n != protowire.SizeTag(num) {
			return false
		}
		b = b[n:]
		var m int
		switch {
		case num == fragFiles && typ == protowire.BytesType && last <= fragFiles:
			var v []byte
			v, m = protowire.ConsumeBytes(b)
			if m < 0 || m != protowire.SizeBytes(len(v)) || !canonicalFile(v) {
				return false
			}
		case num == fragPhysicalRows && typ == protowire.VarintType && last < fragPhysicalRows:
			if m = canonicalVarint(b, math.MaxUint64); m < 0 {
				return false
			}
		default:
			return false
		}
		b, last = b[m:], num
	}
	return last == fragPhysicalRows
}

// canonicalFile is canonicalFragment for a plain DataFile (appendFile).
func canonicalFile(b []byte) bool {
	var last protowire.Number
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || n != protowire.SizeTag(num) || num <= last {
			return false
		}
		b = b[n:]
		var m int
		switch {
		case typ == protowire.BytesType && (num == filePath || num == fileFields || num == fileColumns):
			var v []byte
			v, m = protowire.ConsumeBytes(b)
			if m < 0 || m != protowire.SizeBytes(len(v)) || len(v) == 0 {
				return false
			}
			if num == filePath && !utf8.Valid(v) || num != filePath && !canonicalInts(v) {
				return false
			}
		case typ == protowire.VarintType && (num == fileMajor || num == fileMinor):
			m = canonicalVarint(b, math.MaxUint32)
		case typ == protowire.VarintType && num == fileSizeBytes:
			m = canonicalVarint(b, math.MaxUint64)
		default:
			return false
		}
		if m < 0 {
			return false
		}
		b, last = b[m:], num
	}
	return true
}

// canonicalVarint returns the length of the varint at the start of b if
// it is non-zero, at most limit and in its shortest form; else -1.
func canonicalVarint(b []byte, limit uint64) int {
	v, m := protowire.ConsumeVarint(b)
	if m < 0 || v == 0 || v > limit || m != protowire.SizeVarint(v) {
		return -1
	}
	return m
}

// canonicalInts reports whether b is a packed int32 list as proto
// writes it: each value an int32, sign-extended, in its shortest form.
func canonicalInts(b []byte) bool {
	for len(b) > 0 {
		v, m := protowire.ConsumeVarint(b)
		if m < 0 || v != uint64(int64(int32(v))) || m != protowire.SizeVarint(v) {
			return false
		}
		b = b[m:]
	}
	return true
}

// newRawFragment returns the fragment whose encoding with id 0 is raw
// (canonicalFragment), with id set to id and rows physical rows: its
// encoding is the id field, then raw. The id comes first because it is
// field 1; an id of 0 is not written, as proto does not.
func newRawFragment(raw []byte, id, rows uint64) *Fragment {
	x, buf := fragmentWithRoom(pbwire.SizeUint(fragID, id) + len(raw))
	*x = Fragment{id: id, rows: rows, enc: append(pbwire.AppendUint(buf, fragID, id), raw...)}
	return x
}
