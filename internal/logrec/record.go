package logrec

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// ErrMalformedRecord reports a log message that is not a valid decision
// record (bad subject, header or body).
var ErrMalformedRecord = errors.New("malformed decision record")

// Record is one decision read from the log. Read headers-only, Decision
// is nil and the other fields come from the subject and the headers.
type Record struct {
	Seq      uint64 // CG_DEC stream sequence
	Dataset  string
	Outcome  cellguardpb.Outcome
	TxnID    string
	TxnSeq   uint64 // CG_TXN sequence of the staged message decided
	Version  uint64 // committed records only
	Decision *cellguardpb.Decision
	// Time is when the log stored the record (the server's clock); zero
	// when the read did not carry it.
	Time time.Time
}

// Committed reports whether the record commits a version.
func (r Record) Committed() bool { return r.Outcome == cellguardpb.Outcome_OUTCOME_COMMITTED }

// Deleted reports whether the record is the dataset's tombstone.
func (r Record) Deleted() bool { return r.Outcome == cellguardpb.Outcome_OUTCOME_DELETED }

// Txn decodes the transaction the record carries: as committed for a
// committed record, as staged for a rejected one.
func (r Record) Txn() (*lancepb.Transaction, error) {
	if r.Decision == nil {
		return nil, fmt.Errorf("declog: record %d: %w: read headers only", r.Seq, ErrMalformedRecord)
	}
	txn := &lancepb.Transaction{}
	if err := proto.Unmarshal(r.Decision.GetTransaction(), txn); err != nil {
		return nil, fmt.Errorf("declog: record %d: %w: decode transaction: %v", r.Seq, ErrMalformedRecord, err)
	}
	return txn, nil
}

// Encoded is a decision with the body the log stores for it, encoded
// once: Append sends Body as it is, however often it is retried. Body nil
// means not encoded yet.
type Encoded struct {
	Decision *cellguardpb.Decision
	Body     []byte
}

// Encode encodes d once, for AppendEncoded. A large transaction is
// stored compressed (compressTxn); d keeps it plain.
func Encode(d *cellguardpb.Decision) (Encoded, error) {
	if len(d.GetTransactionZstd()) > 0 {
		return Encoded{}, fmt.Errorf("declog: encode decision: the transaction is compressed by the log, not by its writer")
	}
	if plainDecision(d) {
		return Encoded{Decision: d, Body: compressTxn(encodePlain(d), d.Transaction)}, nil
	}
	body, err := proto.Marshal(d)
	if err != nil {
		return Encoded{}, fmt.Errorf("declog: encode decision: %w", err)
	}
	return Encoded{Decision: d, Body: compressTxn(body, d.Transaction)}, nil
}

// Checkpoint is a trusted manifest snapshot: the manifest of Version and
// the log positions it was taken at.
type Checkpoint struct {
	Dataset  string
	Version  uint64
	DecSeq   uint64 // CG_DEC sequence of the committed record of Version
	TxnSeq   uint64 // highest CG_TXN sequence decided by then
	Manifest *table.Manifest
	// Log, when set, is what the writer knew of the log up to DecSeq (a
	// committer's decided ids and version index), so a load can read
	// only the records after DecSeq.
	Log *LogState
}

// LogState is the part of a committer's state that a full pass over the
// log would rebuild: the ids decided up to a sequence and the log
// sequence of each committed version.
type LogState struct {
	UUIDs      [][16]byte // decided transaction uuids
	IDs        []string   // decided ids that are not uuids
	IndexFirst uint64     // version of IndexSeqs[0]
	IndexSeqs  []uint64
}
