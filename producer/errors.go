package producer

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"cellguard/proto/cellguardpb"
)

// Errors of the producer SDK. Rejections are *RejectedError values that
// match ErrRejected and, where they apply, ErrPreconditionFailed and
// ErrRetryable.
var (
	// ErrRejected is matched by every *RejectedError: the committer decided
	// the transaction and did not commit it.
	ErrRejected = errors.New("transaction rejected")
	// ErrPreconditionFailed is matched by a rejection whose reason is
	// PRECONDITION_FAILED: cells the transaction protected changed since its
	// read version. The violations say which, and who changed them.
	ErrPreconditionFailed = errors.New("precondition failed")
	// ErrRetryable is matched by a rejection that a recomputation from a
	// newer version may turn into a commit (PRECONDITION_FAILED,
	// CONFLICT_RETRYABLE, READ_VERSION_TOO_OLD, INTERNAL).
	ErrRetryable = errors.New("retryable")

	// ErrOutcomeUnknown reports a Commit or Outcome that ended (deadline,
	// cancellation, lost connection) before the decision was seen. The
	// transaction may still commit: look it up with Outcome, or commit the
	// same Txn again; never stage a recomputation under a new uuid first.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrNotStaged reports, from Outcome, a transaction that has neither a
	// decision nor a staged message: it never reached the staging stream,
	// so recomputing it under a new uuid cannot publish anything twice.
	ErrNotStaged = errors.New("transaction not staged")

	// ErrDatasetNotFound reports a dataset with no committed version.
	ErrDatasetNotFound = errors.New("dataset not found")
	// ErrVersionNotFound reports a version the dataset does not have (yet).
	ErrVersionNotFound = errors.New("version not found")
	// ErrInvalidTxn reports a transaction the builder cannot make valid:
	// two kinds of operation in one Txn, an unknown fragment, no operation.
	ErrInvalidTxn = errors.New("invalid transaction")
	// ErrInvalidOption reports a per-call option with a bad value.
	ErrInvalidOption = errors.New("invalid option")
	// ErrClosed reports a call on a closed Client.
	ErrClosed = errors.New("producer: client closed")
)

// RejectedError is a rejection decided by the committer. Find it with
// errors.As; errors.Is matches ErrRejected, and ErrPreconditionFailed or
// ErrRetryable where they apply.
type RejectedError struct {
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

func (e *RejectedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "txn %s on %s rejected: %s", e.TxnID, e.Dataset, e.Reason)
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Is reports whether target is ErrRejected, or ErrPreconditionFailed or
// ErrRetryable for the reasons they stand for.
func (e *RejectedError) Is(target error) bool {
	switch target {
	case ErrRejected:
		return true
	case ErrPreconditionFailed:
		return e.Reason == cellguardpb.Reason_PRECONDITION_FAILED
	case ErrRetryable:
		return Retryable(e.Reason)
	}
	return false
}

// Retryable reports whether a rejection for reason may turn into a commit
// when the transaction is recomputed from a newer version.
func Retryable(reason cellguardpb.Reason) bool {
	switch reason {
	case cellguardpb.Reason_PRECONDITION_FAILED, cellguardpb.Reason_CONFLICT_RETRYABLE,
		cellguardpb.Reason_READ_VERSION_TOO_OLD, cellguardpb.Reason_INTERNAL:
		return true
	}
	return false
}

// Fragments returns the ids of the fragments the violations name,
// ascending and without repeats: what a worker recomputes first.
func (e *RejectedError) Fragments() []uint64 {
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

// Rejection builds the *RejectedError of a rejected decision record. The
// events package uses it for the rejection feed.
func Rejection(d *cellguardpb.Decision) *RejectedError {
	e := &RejectedError{
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
