// Package declog owns the decision log: the CG_DEC stream that is the
// source of truth of every dataset, and the CG_CHECKPOINTS object store
// that shortens reading it.
//
// The log holds one record per decided transaction, on the subject
// <prefix>.dec.<dataset>.committed or .rejected. A committed record of
// version v carries the transaction as committed; applying the committed
// records of a dataset in order, from nothing or from a checkpoint,
// rebuilds the manifest of any version. Every reader and the one writer
// go through this package:
//
//   - [Parse] decodes a log message into a [Record] (headers only, or
//     with the body), and [Message] builds the message of a decision.
//   - [Log.Scan] iterates over the records on a filter from a sequence
//     on, up to the end present when it starts or, live, forever;
//     [Log.Pull] does the same over a consumer the caller owns (a
//     durable one it acknowledges). [Log.Last] and [Log.At] read one
//     record directly.
//   - [Log.Checkpoint] and [Log.ReadCheckpoint] load a checkpoint under
//     one trust rule: it must decode, name the dataset and version asked
//     for, and the log's record at its sequence must be the committed
//     record of that version. Anything else is [ErrUntrustedCheckpoint],
//     and the reader replays from the start instead.
//   - [Replay] applies one committed record to the manifest before it and
//     checks the version it makes; [Log.Load] rebuilds a version from the
//     newest trusted checkpoint and the log tail.
//   - [Log.Find] looks a transaction's decision up by uuid;
//     [Log.VersionSeq] finds the record of a version.
//   - [Log.Config] reads a dataset's configuration (where it is
//     published, which readers it serves) from its first committed
//     record; [SetConfig]/[ConfigOf] carry it on the creating transaction.
//     An adoption record ([SetAdoption], [AdoptionOf]) starts a dataset at
//     the version of a Lance table it adopts; [Replay] accepts it only as
//     a dataset's first record.
//   - [Log.Append] is the writer: a fenced, deduplicated append of one
//     decision or an atomic batch, which fails with [ErrFenced] when the
//     log moved past the sequence the writer expected.
//
// The package does no retrying and starts no goroutines of its own beyond
// the ones nats.go runs for a pull while it is being ranged over. A
// consumer the caller acknowledges is read one Fetch at a time (see
// pull.go for why not with a Messages iterator).
package declog
