// Package producer is the worker SDK of cellguard: read a dataset at a
// version, compute, write data files, and commit a Lance transaction whose
// cell preconditions say which inputs it was computed from. The committer
// commits it (a new version) or rejects it, naming the cells that changed
// and the transaction that changed them; the worker recomputes.
//
//	c, err := producer.New(nc, producer.Config{})        // nc: a *nats.Conn
//	snap, err := c.Latest(ctx, "orders")                  // or c.At(ctx, "orders", 41)
//	txn := snap.NewTxn()
//	b, err := txn.Read(ctx, store, frag, xField)          // reads x and protects the cells read
//	file, err := store.WriteColumns(ctx, schema, f, map[int32]arrow.Array{yField: ys})
//	txn.ReplaceColumns(frag, file)                        // y = f(x) for that fragment
//	v, err := c.Commit(ctx, txn)                          // the new version, or a *RejectedError
//
// # The caller's duties, in order
//
//  1. Read at a Snapshot (Latest or At) and build the Txn from it, so the
//     transaction's read version is the version actually read.
//  2. Protect what the result depends on: Txn.Read does it for reads
//     through a table/data Store; otherwise call Txn.CellsUnchanged with
//     the fields and rows read.
//  3. Write the data files first (table/data: Lance files of the dataset's
//     storage version — WriteFragmentFor, WriteColumns), then Commit.
//     Files of a rejected transaction are inert garbage.
//  4. On a *RejectedError that matches ErrRetryable, recompute from a newer
//     version, or let RetryWithRecompute do steps 1–4 again.
//  5. On ErrOutcomeUnknown, find the outcome (Outcome, or Commit the same
//     Txn again) before computing anything new.
//  6. On ErrBacklogFull, nothing was staged: the staging stream has no
//     room (the committer is behind or down). Commit the same Txn later.
//
// # Idempotency
//
// A transaction's uuid is its identity: Stage publishes it as Nats-Msg-Id,
// so the staging stream drops a repeat inside its duplicate window, and the
// committer gives each uuid exactly one decision, however often it is
// staged. Committing the same Txn twice is therefore safe and returns the
// first decision. A recomputation gets a new uuid (a new Txn) and must only
// be staged when the first one is known to be rejected or never staged:
// Outcome tells, by scanning the decision log from the read version on (a
// transaction read at v is decided after version v exists) and the staging
// stream. RetryWithRecompute follows this rule.
//
// # Ordering and waiting
//
// Each dataset the client touches is followed by one ordered consumer on
// its decision subjects, started at the latest committed version; it keeps
// the head manifest (Latest costs one direct get and no replay) and hands
// every Commit its decision. Commit registers for the decision before it
// publishes, so none can slip by. The decision log (CG_DEC) and the
// checkpoints (CG_CHECKPOINTS) are the only source of manifests: older
// versions are rebuilt from the newest checkpoint at or before them and the
// committed records after it, with table.Apply.
//
// Calls whose ctx has no deadline use Config.Timeout.
//
// # Caveats
//
// Outcome scans at most Config.MaxScan staged messages to tell a pending
// transaction from one never staged. A committer that keeps no rejected
// transaction bodies gives the rejection feed (package events) only the
// violations to go on; the Txn of a rejected job is not recoverable from
// the log.
package producer
