package logrec

// encode.go writes a decision record's body with protowire instead of
// reflection, for the records deciding writes by the thousand: those
// with no violation, no dataset configuration and no adopted manifest
// (or index section).
// The bytes are exactly proto.Marshal's (its order is by field number, and
// a Decision has no map); TestEncodeMatchesMarshal checks it on generated
// records. A large transaction is then compressed (compress.go). Anything else, a string that is not UTF-8 included (Marshal
// refuses it), is left to proto.Marshal.

import (
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"

	"cellguard/internal/pbwire"
	"cellguard/proto/cellguardpb"
	"cellguard/table"
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
	return d != nil && len(d.Violations) == 0 && d.DatasetConfig == nil && len(d.AdoptedManifest) == 0 && len(d.AdoptedIndexSection) == 0 &&
		len(d.ProtoReflect().GetUnknown()) == 0 &&
		utf8.ValidString(d.Dataset) && utf8.ValidString(d.TxnUuid) &&
		utf8.ValidString(d.Message) && utf8.ValidString(d.ConflictTxnUuid)
}

// encodePlain encodes a plain decision (plainDecision) in one allocation
// of exactly its size.
func encodePlain(d *cellguardpb.Decision) []byte {
	b, _, _ := encodePlainWith(d, len(d.Transaction), func(b []byte) []byte { return append(b, d.Transaction...) })
	return b
}

// EncodeLanded is Encode for a committed decision d whose transaction is
// t, a staged transaction with its read version set. It sets
// d.Transaction to t's bytes, which it writes straight into the record's
// body, d.Transaction a slice of it: one allocation and one copy of the
// transaction instead of two. d must not have a transaction yet. A
// transaction large enough to be compressed (Encode) is copied instead.
func EncodeLanded(d *cellguardpb.Decision, t table.Landed) (Encoded, error) {
	if !plainDecision(d) || len(d.Transaction) > 0 || t.Len() == 0 || t.Len() >= compressMin {
		d.Transaction = t.Bytes()
		return Encode(d)
	}
	b, from, to := encodePlainWith(d, t.Len(), t.AppendTo)
	d.Transaction = b[from:to:to]
	return Encoded{Decision: d, Body: b}, nil
}

// encodePlainWith encodes a plain decision whose transaction, txnLen
// bytes, appendTxn writes; it returns the body and where the transaction
// is in it.
func encodePlainWith(d *cellguardpb.Decision, txnLen int, appendTxn func([]byte) []byte) (b []byte, from, to int) {
	n := pbwire.SizeBytes(decDataset, len(d.Dataset)) + pbwire.SizeBytes(decTxnUUID, len(d.TxnUuid)) +
		pbwire.SizeUint(decOutcome, uint64(d.Outcome)) + pbwire.SizeUint(decVersion, d.Version) +
		pbwire.SizeBytes(decTransaction, txnLen) + pbwire.SizeUint(decTxnSeq, d.TxnSeq) +
		pbwire.SizeUint(decReadVersion, d.ReadVersion) + pbwire.SizeUint(decReason, uint64(d.Reason)) +
		pbwire.SizeBytes(decMessage, len(d.Message)) + pbwire.SizeUint(decHeadVersion, d.HeadVersion) +
		pbwire.SizeUint(decConflictVersion, d.ConflictVersion) + pbwire.SizeBytes(decConflictTxnUUID, len(d.ConflictTxnUuid))
	b = make([]byte, 0, n)
	b = pbwire.AppendString(b, decDataset, d.Dataset)
	b = pbwire.AppendString(b, decTxnUUID, d.TxnUuid)
	b = pbwire.AppendUint(b, decOutcome, uint64(d.Outcome))
	b = pbwire.AppendUint(b, decVersion, d.Version)
	if txnLen > 0 {
		b = protowire.AppendVarint(protowire.AppendTag(b, decTransaction, protowire.BytesType), uint64(txnLen))
		from = len(b)
		b = appendTxn(b)
		to = len(b)
	}
	b = pbwire.AppendUint(b, decTxnSeq, d.TxnSeq)
	b = pbwire.AppendUint(b, decReadVersion, d.ReadVersion)
	b = pbwire.AppendUint(b, decReason, uint64(d.Reason))
	b = pbwire.AppendString(b, decMessage, d.Message)
	b = pbwire.AppendUint(b, decHeadVersion, d.HeadVersion)
	b = pbwire.AppendUint(b, decConflictVersion, d.ConflictVersion)
	b = pbwire.AppendString(b, decConflictTxnUUID, d.ConflictTxnUuid)
	return b, from, to
}
