package decide

// rules.go is the only file that calls the table model's apply and rebase
// rules and the precondition evaluator. The rest of the package sees their
// results as rejection reasons, violations and manifests.

import (
	"cellguard/internal/logrec"
	"context"
	"errors"
	"fmt"

	"cellguard/evaluator"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// history gives the decision core access to versions before head: the
// manifests (to pin a read version) and the transactions committed at each
// version (to check conflicts). It reads from memory first, then from
// checkpoints and the decision log.
type History interface {
	table.Versions
	// Committed returns the transaction committed at version.
	Committed(ctx context.Context, version uint64) (*lancepb.Transaction, error)
}

// errBrokenState reports committed state the rules cannot read (a
// malformed manifest of the pinned or head version). It is no fault of
// the transaction being decided: the worker decides nothing, logs it as
// an error and restarts from the log.
var ErrBrokenState = errors.New("committer: committed state is unreadable")

// rejection is a typed reason to reject, produced by the rules.
type Rejection struct {
	reason          cellguardpb.Reason
	msg             string
	violations      []*cellguardpb.Violation
	conflictVersion uint64
	conflictTxn     string
}

func (r *Rejection) Error() string { return r.reason.String() + ": " + r.msg }

func Reject(reason cellguardpb.Reason, format string, args ...any) *Rejection {
	return &Rejection{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// deletionWrite is a deletion file a rebase asks the committer to write
// before the decision is appended.
type DeletionWrite = table.NewDeletionFile

// ruleOptions carries per-committer settings into the rules.
type RuleOptions struct {
	Deletions table.DeletionVectors
	Policy    evaluator.DeletionPolicy
	Limits    evaluator.Limits
	hist      History
	// conflicts, when set, names the committed versions a transaction
	// must be checked against; versions it does not cover are all read.
	conflicts *table.ConflictIndex
}

// checkPreconditions evaluates txn's preconditions, read at version rv,
// against the index's head. The table at rv is read through the change
// index; pin is called only when rv is older than the index's horizon.
// The cost depends on what the preconditions name and how often those
// cells changed, not on how far rv is behind: no intermediate version is
// rebuilt. Any failure is a *rejection; a violation names the version and
// transaction that changed the cells, or says how far the search went.
func checkPreconditions(ctx context.Context, ix *table.ChangeIndex, rv uint64, pre []evaluator.Precondition, pin func() (*table.Manifest, error), opts RuleOptions) error {
	if len(pre) == 0 {
		return nil
	}
	io := evaluator.IndexedOptions{
		Options: evaluator.Options{Policy: opts.Policy, Deletions: opts.Deletions},
		Pin:     pin,
	}
	v, err := evaluator.EvaluateIndexed(ctx, ix, rv, pre, io)
	switch _, invalid := errors.AsType[*evaluator.InvalidError](err); {
	case invalid:
		return Reject(cellguardpb.Reason_INVALID_PRECONDITION, "%v", err)
	case errors.Is(err, evaluator.ErrMalformedManifest):
		// The committed manifests themselves do not read: the state is
		// broken, not the transaction. Decide nothing.
		return fmt.Errorf("%w: evaluate: %w", ErrBrokenState, err)
	case errors.Is(err, table.ErrVersionNotFound):
		return Reject(cellguardpb.Reason_READ_VERSION_TOO_OLD, "read_version %d is no longer retained: %v", rv, err)
	case err != nil:
		return Reject(cellguardpb.Reason_INTERNAL, "evaluate preconditions: %v", err)
	case v.Accepted():
		return nil
	}
	r := Reject(cellguardpb.Reason_PRECONDITION_FAILED, "%d protected cell group(s) changed since version %d", len(v.Violations), rv)
	for i := range v.Violations {
		x := &v.Violations[i]
		if x.Version > 0 && x.TxnUUID == "" && opts.hist != nil {
			// A culprit version the change index no longer has the uuid
			// of: the window or the log has its transaction.
			if t, err := opts.hist.Committed(ctx, x.Version); err == nil {
				x.TxnUUID = t.GetUuid()
			}
		}
		r.violations = append(r.violations, &cellguardpb.Violation{
			PreconditionIndex: uint32(x.Precondition),
			FieldId:           x.FieldID,
			FragmentId:        x.FragmentID,
			Reason:            x.Reason.String(),
			SampleRows:        x.Rows,
			CulpritVersion:    x.Version,
			CulpritTxnUuid:    x.TxnUUID,
		})
	}
	if len(v.Violations) > 0 {
		x := v.Violations[0]
		r.msg += fmt.Sprintf("; first: %s", x)
	}
	return r
}

// landsAsIs reports whether landing txn on head changes nothing but its
// read version: the conflict index covers its read version and names no
// committed version it must be checked against, and its kind is not one
// Rebase rebuilds against the head afterwards (delete, update, overlay).
// Then the read version's manifest is not needed at all: a worker that
// read long ago (beyond the window of manifests kept in memory) costs no
// rebuild from the log. Rebase on the same input returns the same
// transaction (TestDecideIndexedMatchesWalk decides the same staged
// transactions with and without the index, record for record).
func landsAsIs(op table.Op, c landing) bool {
	return c.indexed && len(c.versions) == 0 && op != table.OpDelete && op != table.OpUpdate && op != table.OpDataOverlay
}

// landing names the committed versions txn must be checked against:
// those the conflict index names when it covers txn's read version
// (indexed), else every version after it.
type landing struct {
	versions []uint64
	indexed  bool
}

func candidates(txn *lancepb.Transaction, head *table.Manifest, opts RuleOptions) landing {
	var c landing
	rv := txn.GetReadVersion()
	if opts.conflicts != nil {
		c.versions, c.indexed = opts.conflicts.Candidates(txn, rv, head.Version(), nil)
	}
	if !c.indexed {
		c.versions = c.versions[:0]
		for v := rv + 1; v <= head.Version(); v++ {
			c.versions = append(c.versions, v)
		}
	}
	return c
}

// land checks txn for conflicts with everything committed after its read
// version and rebases it onto head. It returns the transaction as it will
// be committed and the deletion files to write first. Conflicts are
// *rejection values. txn is the caller's own: it is rebased in place. Of
// the versions committed since txn's read version, only those c names
// (candidates) are read.
func land(ctx context.Context, pinned, head *table.Manifest, txn *lancepb.Transaction, c landing, opts RuleOptions) (*lancepb.Transaction, []DeletionWrite, error) {
	in := table.RebaseInput{Txn: txn, Read: pinned, Head: head, Deletions: opts.Deletions, InPlace: true, Indexed: c.indexed}
	for _, v := range c.versions {
		other, err := opts.hist.Committed(ctx, v)
		if err != nil {
			return nil, nil, err
		}
		in.Committed = append(in.Committed, table.Committed{Version: v, Txn: other})
	}
	res, err := table.Rebase(ctx, in)
	if err != nil {
		return nil, nil, err
	}
	if c := res.Conflict; c != nil {
		reason := cellguardpb.Reason_CONFLICT_RETRYABLE
		if c.Resolution == table.Incompatible {
			reason = cellguardpb.Reason_CONFLICT_INCOMPATIBLE
		}
		r := Reject(reason, "%s conflicts with %s committed at version %d: %s", c.Ours, c.Theirs, c.TheirsVersion, c.Reason)
		r.conflictVersion, r.conflictTxn = c.TheirsVersion, c.TheirsUUID
		return nil, nil, r
	}
	return res.Txn, res.NewDeletionFiles, nil
}

// ApplyTxn applies a committed transaction to head (nil for creation:
// logrec.Create, in the storage version the transaction's configuration
// names; replays of a creation use logrec.CreateAs with the creating
// record's) and returns the next manifest. It is used both when deciding
// and when replaying the log, so the two cannot diverge.
func ApplyTxn(ctx context.Context, head *table.Manifest, txn *lancepb.Transaction, older table.Versions) (*table.Manifest, error) {
	if head == nil {
		return logrec.Create(txn)
	}
	return table.Apply(ctx, head, txn, older)
}

// errorReason maps an error from the table model to a rejection reason:
// problems with the transaction are INVALID_TRANSACTION, anything else
// (storage, I/O) is INTERNAL.
func errorReason(err error) cellguardpb.Reason {
	switch {
	case errors.Is(err, table.ErrMalformed), errors.Is(err, table.ErrUnsupportedOperation), errors.Is(err, table.ErrInvalidTransaction):
		return cellguardpb.Reason_INVALID_TRANSACTION
	case errors.Is(err, table.ErrVersionNotFound):
		return cellguardpb.Reason_READ_VERSION_TOO_OLD
	}
	return cellguardpb.Reason_INTERNAL
}
