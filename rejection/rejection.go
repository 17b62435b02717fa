// Package rejection is the error a committer's rejection becomes in
// cellguard's SDKs: the producer returns it from Commit, and the events
// package delivers it with every rejected transaction of the decision log.
// It depends on nothing but the decision record's protobuf, so both SDKs
// share it without depending on each other.
//
// An *Error carries the reason, the committer's message and, for a failed
// precondition, every protected cell group that changed with the version
// and transaction that changed it. errors.Is matches ErrRejected always,
// ErrPreconditionFailed for PRECONDITION_FAILED, ErrDatasetDeleted for
// DATASET_DELETED, and ErrRetryable for the reasons a recomputation from a
// newer version may turn into a commit.
package rejection

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"cellguard/proto/cellguardpb"
)

// Sentinels matched by *Error.
var (
	// ErrRejected is matched by every *Error: the committer decided
	// the transaction and did not commit it.
	ErrRejected = errors.New("transaction rejected")
	// ErrPreconditionFailed is matched by a rejection whose reason is
	// PRECONDITION_FAILED: cells the transaction protected changed since its
	// read version. The violations say which, and who changed them.
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrRetryable is matched by a rejection that a recomputation from a
	// newer version may turn into a commit (PRECONDITION_FAILED,
	// CONFLICT_RETRYABLE, READ_VERSION_TOO_OLD, INTERNAL, VERSION_MOVED).
	ErrRetryable = errors.New("retryable")
	// ErrDatasetDeleted is matched by a rejection whose reason is
	// DATASET_DELETED: an admin deleted the dataset (`cellguard dataset
	// delete`), and nothing will ever commit to it again.
	ErrDatasetDeleted = errors.New("dataset deleted")
)

// Error is a rejection decided by the committer. Find it with errors.As; errors.Is matches ErrRejected, and ErrPreconditionFailed or
// ErrRetryable where they apply.
type Error struct {
	Dataset     string
	TxnID       string
	Reason      cellguardpb.Reason
	Message     string
	Violations  []Violation
	ReadVersion uint64 // the version the transaction was read at
	HeadVersion uint64 // the head when it was decided
	// ConflictVersion and ConflictTxnID name the committed transaction a
	// conflict rejection collided with (zero otherwise).
	ConflictVersion uint64
	ConflictTxnID   string
	// Decision is the record from the decision log.
	Decision *cellguardpb.Decision
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "txn %s on %s rejected: %s", e.TxnID, e.Dataset, e.Reason)
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Is reports whether target is ErrRejected, or ErrPreconditionFailed,
// ErrDatasetDeleted or ErrRetryable for the reasons they stand for.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrRejected:
		return true
	case ErrPreconditionFailed:
		return e.Reason == cellguardpb.Reason_PRECONDITION_FAILED
	case ErrRetryable:
		return Retryable(e.Reason)
	case ErrDatasetDeleted:
		return e.Reason == cellguardpb.Reason_DATASET_DELETED
	}
	return false
}

// Retryable reports whether a rejection for reason may turn into a commit
// when the transaction is recomputed from a newer version.
func Retryable(reason cellguardpb.Reason) bool {
	switch reason {
	case cellguardpb.Reason_PRECONDITION_FAILED, cellguardpb.Reason_CONFLICT_RETRYABLE,
		cellguardpb.Reason_READ_VERSION_TOO_OLD, cellguardpb.Reason_INTERNAL, cellguardpb.Reason_VERSION_MOVED:
		return true
	}
	return false
}

// Fragments returns the ids of the fragments the violations name,
// ascending and without repeats: what a worker recomputes first.
func (e *Error) Fragments() []uint64 {
	seen := map[uint64]bool{}
	var out []uint64
	for _, v := range e.Violations {
		if !seen[v.FragmentID] {
			seen[v.FragmentID] = true
			out = append(out, v.FragmentID)
		}
	}
	slices.Sort(out)
	return out
}

// Violation is one group of protected cells that changed: field FieldID of
// fragment FragmentID, protected by precondition Precondition, with a
// sample of the rows and the version and transaction that changed them.
type Violation struct {
	Precondition   int
	FieldID        int32
	FragmentID     uint64
	Reason         string // "base-data-changed", "rows-deleted", …
	Rows           []uint32
	CulpritVersion uint64 // 0 when unknown
	CulpritTxnID   string
}

// String renders the violation on one line, as in "field 0 fragment 3
// rows [17 18]: overlay-changed at version 42 by 9f…".
func (v Violation) String() string {
	var b strings.Builder
	b.WriteString("field ")
	b.WriteString(strconv.FormatInt(int64(v.FieldID), 10))
	b.WriteString(" fragment ")
	b.WriteString(strconv.FormatUint(v.FragmentID, 10))
	if len(v.Rows) > 0 {
		b.WriteString(" rows [")
		for i, r := range v.Rows {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.FormatUint(uint64(r), 10))
		}
		b.WriteByte(']')
	}
	b.WriteString(": ")
	b.WriteString(v.Reason)
	if v.CulpritVersion != 0 {
		b.WriteString(" at version ")
		b.WriteString(strconv.FormatUint(v.CulpritVersion, 10))
	}
	if v.CulpritTxnID != "" {
		b.WriteString(" by ")
		b.WriteString(v.CulpritTxnID)
	}
	return b.String()
}

// FromDecision builds the *Error of a rejected decision record.
func FromDecision(d *cellguardpb.Decision) *Error {
	e := &Error{
		Dataset: d.GetDataset(), TxnID: d.GetTxnUuid(), Reason: d.GetReason(), Message: d.GetMessage(),
		ReadVersion: d.GetReadVersion(), HeadVersion: d.GetHeadVersion(),
		ConflictVersion: d.GetConflictVersion(), ConflictTxnID: d.GetConflictTxnUuid(), Decision: d,
	}
	for _, v := range d.GetViolations() {
		e.Violations = append(e.Violations, Violation{
			Precondition: int(v.GetPreconditionIndex()), FieldID: v.GetFieldId(), FragmentID: v.GetFragmentId(),
			Reason: v.GetReason(), Rows: v.GetSampleRows(),
			CulpritVersion: v.GetCulpritVersion(), CulpritTxnID: v.GetCulpritTxnUuid(),
		})
	}
	return e
}
