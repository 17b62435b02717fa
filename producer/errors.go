package producer

import (
	"errors"

	"cellguard/internal/natsperm"
	"cellguard/rejection"
)

// Errors of the producer SDK. Rejections are *RejectedError values that
// match ErrRejected and, where they apply, ErrPreconditionFailed and
// ErrRetryable.
var (
	// ErrRejected, ErrPreconditionFailed and ErrRetryable are the
	// rejection package's sentinels, which *RejectedError matches.
	ErrRejected           = rejection.ErrRejected
	ErrPreconditionFailed = rejection.ErrPreconditionFailed
	ErrRetryable          = rejection.ErrRetryable
	// ErrDatasetDeleted is matched by the rejection of a transaction
	// staged to a deleted dataset (reason DATASET_DELETED): stop working
	// on it, nothing will commit.
	ErrDatasetDeleted = rejection.ErrDatasetDeleted

	// ErrOutcomeUnknown reports a Commit or Outcome that ended (deadline,
	// cancellation, lost connection) before the decision was seen. The
	// transaction may still commit: look it up with Outcome, or commit the
	// same Txn again; never stage a recomputation under a new uuid first.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrNotStaged reports a transaction whose uuid was withdrawn: Outcome
	// found it neither staged nor decided and staged a withdrawal under
	// its uuid, which the committer decided first. The transaction never
	// commits, so recomputing it under a new uuid cannot apply it twice.
	ErrNotStaged = errors.New("transaction not staged")

	// ErrBacklogFull reports a transaction the staging stream refused
	// for want of room: the undecided backlog is at the stream's limit
	// (the committer is behind or down), or JetStream has no storage
	// left. Nothing was stored and nothing will commit from this call;
	// stage the same Txn again later (its uuid is unchanged, so a retry
	// can never apply it twice).
	ErrBacklogFull = errors.New("staging backlog full")

	// ErrDatasetNotFound reports a dataset with no committed version.
	ErrDatasetNotFound = errors.New("dataset not found")
	// ErrVersionNotFound reports a version the dataset does not have (yet).
	ErrVersionNotFound = errors.New("version not found")
	// ErrInvalidTxn reports a transaction the builder cannot make valid:
	// two kinds of operation in one Txn, an unknown fragment, no operation.
	ErrInvalidTxn = errors.New("invalid transaction")
	// ErrInvalidOption reports a per-call option with a bad value.
	ErrInvalidOption = errors.New("invalid option")
	// ErrPermission reports a call the NATS server refused for lack of
	// permission (the user's role does not allow a subject): it fails at
	// once, with a *natsperm.Error naming the subject, instead of waiting
	// out the deadline. A Commit refused after its stage landed also
	// matches ErrOutcomeUnknown.
	ErrPermission = natsperm.ErrPermission
	// ErrClosed reports a call on a closed Client.
	ErrClosed = errors.New("producer: client closed")
)

// RejectedError is a rejection decided by the committer: the type is
// rejection.Error, shared with the events package's rejection feed.
// Find it with errors.As; errors.Is matches ErrRejected, and
// ErrPreconditionFailed or ErrRetryable where they apply.
type RejectedError = rejection.Error

// Violation is one group of protected cells that changed (see
// rejection.Violation).
type Violation = rejection.Violation
