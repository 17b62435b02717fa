// Package pbwire writes protobuf fields by hand, for the hot paths that
// encode a message of known shape without reflection: decision records
// (internal/declog) and appended fragments (table). Scalar and string
// fields with a zero value are not written, as proto3 does for fields of
// implicit presence, so the bytes equal proto.Marshal's for the same
// message. It is a pure package: functions of their arguments only.
package pbwire

import "google.golang.org/protobuf/encoding/protowire"

// SizeUint is the size of the field AppendUint writes.
func SizeUint(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

// SizeBytes is the size of a length-delimited field of n bytes as
// written when present: not at all when n is 0 (AppendString's rule).
func SizeBytes(num protowire.Number, n int) int {
	if n == 0 {
		return 0
	}
	return SizeLen(num, n)
}

// SizeLen is the size of a length-delimited field of n bytes written
// even when empty (a message field that is set).
func SizeLen(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// AppendUint appends a varint field unless v is zero. An enum goes
// through it too: a negative one, sign-extended to 64 bits, takes ten
// bytes, as proto writes it.
func AppendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

// AppendString appends a string field unless s is empty.
func AppendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}
