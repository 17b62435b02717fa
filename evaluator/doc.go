// Package evaluator decides cell preconditions: exactly, provably, and
// fast.
//
// A worker reads a Lance table at some version, computes from what it read,
// and stages a transaction that writes the result. Conflict rules alone
// cannot protect such a read–compute–write: a transaction that reads x and
// writes y = f(x) is compatible with a concurrent update of x, and would
// publish a stale y. So the transaction carries cell preconditions, "the
// cells fields F × rows R are unchanged since my read version", and the
// committer checks them with this package before it commits.
//
// # The contract
//
// A precondition is a list of schema field ids F and a RowSelection R:
// per fragment, the whole fragment or a roaring bitmap of physical offsets
// (deleted rows counted, as in Lance row addresses). Preconditions are
// conjunctive. Let P be the manifest at the read version and H the manifest
// the commit would land on. Evaluate accepts only if, for every declared
// field f (with its nested children and parents) and every selected
// fragment:
//
//   - f is still in the schema with the same logical type, nullability and
//     parent (a rename is not a change);
//   - the fragment still exists with the same physical rows (a compaction
//     that moved the rows is a change: there is no remapping);
//   - the data files and columns holding f are the same (files holding only
//     other fields may change: two derived-column writers on one fragment
//     do not reject each other);
//   - the overlays covering f at the protected rows are the same, in order,
//     with the same committed versions and the same coverage up to the
//     last protected row (overlays elsewhere may come and go);
//   - deletions pass the dataset's DeletionPolicy.
//
// Anything else that could make a protected cell differ rejects: the
// evaluator never under-rejects. It may over-reject, and does so exactly
// where these structural rules cannot see that values are equal: a new
// data file with the same values, a column rewrite that copied the
// protected rows, a compaction that moved them, or a change confined to
// protected rows already deleted at both versions. The oracle test
// measures both directions against a simulation that knows every cell's
// value; see oracle_test.go.
//
// # Deletion policies
//
// ProtectedRows (the default) rejects only when the deletion state of a
// protected row changed: DV_H ∩ R ≠ DV_P ∩ R. Routine deletes of other rows
// do not disturb derived-column writers. It reads deletion vectors through
// Options.Deletions, and only for protected fragments whose deletion file
// changed; the ctx given to Evaluate bounds those reads (evaluation does
// no other I/O, and ctx is not used otherwise). If it cannot read them, it counts the changed file as a change
// and says so. Strict rejects on any deletion-file change in a protected
// fragment, as Lance's first implementation does. Ignore never rejects for
// deletions: deleted cells are masked anyway.
//
// # Use
//
// The committer, for each staged transaction:
//
//	pre, err := evaluator.Prepare(pinned, txn, limits) // decode + validate
//	if err != nil {
//		// errors.Is(err, evaluator.ErrInvalidPrecondition): reject for good.
//	}
//	v, err := evaluator.Evaluate(ctx, pinned, head, pre, evaluator.Options{
//		Policy:    policy,
//		Deletions: deletionReader,
//	})
//	if err != nil {
//		// A malformed manifest: the state, not the transaction, is broken.
//	}
//	if !v.Accepted() {
//		v = evaluator.Blame(ctx, pinned, history, pre, v, opts) // name version and txn
//		// reject, retryable: the worker recomputes what v.Violations name
//	}
//
// A committer that keeps a table.ChangeIndex (advanced with every committed
// manifest) decides stale reads without rebuilding old versions:
//
//	pre, err := evaluator.CheckTransaction(txn, limits) // decode, operation
//	v, err := evaluator.EvaluateIndexed(ctx, index, txn.GetReadVersion(), pre, evaluator.IndexedOptions{
//		Options: evaluator.Options{Policy: policy, Deletions: deletionReader},
//		Pin:     loadReadVersion, // only for read versions older than the index
//	})
//
// Its verdict is Evaluate's, exactly; violations come with their culprits
// named as Blame names them, at a cost bounded by how often the named
// fragments changed (and by IndexedOptions.MaxBlameSteps), not by how many
// versions passed. Where the search is cut short, by the step budget or
// by the index's horizon, a violation says "culprit not identified" and
// how far the search went, instead of stalling.
//
// pinned is the manifest at txn's read version (never a rebased one); head
// is the state the commit lands on. Evaluation runs on every attempt,
// before and independently of conflict resolution.
//
// A rejection is a Verdict, not an error: errors are for invalid input
// (*InvalidError, non-retryable), misuse, and manifests that cannot be
// read. A zero Verdict is not an acceptance.
//
// # Invalid preconditions
//
// Decode and Validate refuse, with a typed *InvalidError and never by
// ignoring: an unknown precondition kind or unknown protobuf field, an
// empty field list or selection, a negative field id, a field not in the
// read version's schema, a fragment not in the read version, an offset at
// or past a fragment's physical rows, a malformed bitmap or row address
// map, both row forms at once, preconditions on Overwrite, Restore, Clone,
// dataset creation or a detached version, and anything over Limits.
//
// # Cost
//
// Evaluate looks fragments up by id; it never scans the table. A fragment
// that both manifests share (the common case) costs two lookups and a
// pointer comparison, so a point-cell check takes well under a
// microsecond however large the table. A fragment that differs costs work
// proportional to its files and overlays and, under ProtectedRows, to the
// changed deletion vectors. The accept path allocates nothing unless
// overlay coverage or changed deletion vectors must be decoded and
// compared. Blame costs at most one single-group evaluation per violation
// per version of history; BlameIndexed one per version at which the
// violation's fragment, the schema or the base paths changed, within a
// budget.
//
// The package is pure: no I/O, clock, goroutines or global state. The same
// inputs give the same verdict, and no input makes it panic.
package evaluator
