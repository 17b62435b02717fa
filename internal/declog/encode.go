package declog

// encode.go writes a decision record's body with protowire instead of
// reflection, for the records deciding writes by the thousand: those
// with no violation, no dataset configuration and no adopted manifest.
// The bytes are exactly proto.Marshal's (its order is by field number, and
// a Decision has no map); TestEncodeMatchesMarshal checks it on generated
// records. Anything else, a string that is not UTF-8 included (Marshal
// refuses it), is left to proto.Marshal.

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"cellguard/proto/cellguardpb"
)

// Decision field numbers.
const (
	decDataset         protowire.Number = 1
	decTxnUUID         protowire.Number = 2
	decOutcome         protowire.Number = 3
	decVersion         protowire.Number = 4
	decTransaction     protowire.Number = 5
	decTxnSeq          protowire.Number = 6
	decReadVersion     protowire.Number = 7
	decReason          protowire.Number = 8
	decMessage         protowire.Number = 10
	decHeadVersion     protowire.Number = 11
	decConflictVersion protowire.Number = 12
	decConflictTxnUUID protowire.Number = 13
)

// plainDecision reports whether d has only the fields appendDecision
// writes, with valid strings.
func plainDecision(d *cellguardpb.Decision) bool {
	return d != nil && len(d.Violations) == 0 && d.DatasetConfig == nil && len(d.AdoptedManifest) == 0 &&
		len(d.ProtoReflect().GetUnknown()) == 0 &&
		utf8.ValidString(d.Dataset) && utf8.ValidString(d.TxnUuid) &&
		utf8.ValidString(d.Message) && utf8.ValidString(d.ConflictTxnUuid)
}

// encodePlain encodes a plain decision (plainDecision) in one allocation
// of exactly its size.
func encodePlain(d *cellguardpb.Decision) []byte {
	n := sizeBytes(decDataset, len(d.Dataset)) + sizeBytes(decTxnUUID, len(d.TxnUuid)) +
		sizeUint(decOutcome, uint64(d.Outcome)) + sizeUint(decVersion, d.Version) +
		sizeBytes(decTransaction, len(d.Transaction)) + sizeUint(decTxnSeq, d.TxnSeq) +
		sizeUint(decReadVersion, d.ReadVersion) + sizeUint(decReason, uint64(d.Reason)) +
		sizeBytes(decMessage, len(d.Message)) + sizeUint(decHeadVersion, d.HeadVersion) +
		sizeUint(decConflictVersion, d.ConflictVersion) + sizeBytes(decConflictTxnUUID, len(d.ConflictTxnUuid))
	b := make([]byte, 0, n)
	b = appendString(b, decDataset, d.Dataset)
	b = appendString(b, decTxnUUID, d.TxnUuid)
	b = appendUint(b, decOutcome, uint64(d.Outcome))
	b = appendUint(b, decVersion, d.Version)
	if len(d.Transaction) > 0 {
		b = protowire.AppendBytes(protowire.AppendTag(b, decTransaction, protowire.BytesType), d.Transaction)
	}
	b = appendUint(b, decTxnSeq, d.TxnSeq)
	b = appendUint(b, decReadVersion, d.ReadVersion)
	b = appendUint(b, decReason, uint64(d.Reason))
	b = appendString(b, decMessage, d.Message)
	b = appendUint(b, decHeadVersion, d.HeadVersion)
	b = appendUint(b, decConflictVersion, d.ConflictVersion)
	b = appendString(b, decConflictTxnUUID, d.ConflictTxnUuid)
	return b
}

// sizeUint is the size of a varint field appendUint writes.
func sizeUint(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

// sizeBytes is the size of a length-delimited field of n bytes, as
// written when n > 0.
func sizeBytes(num protowire.Number, n int) int {
	if n == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// appendUint appends a varint field (an enum too: a negative one, which
// takes ten bytes, is sign-extended as proto does) unless it is zero.
func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}
