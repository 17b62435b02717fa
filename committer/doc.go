// Package committer is cellguard's commit service: it decides the staged
// Lance transactions of every dataset, in order, exactly once, and appends
// each decision to the decision log, the source of truth.
//
//	c, err := committer.New(nc, committer.Config{Registerer: reg})
//	...
//	err = c.Run(ctx) // blocks until ctx is done
//
// Run creates (or verifies) the streams CG_TXN (staged transactions, a work
// queue) and CG_DEC (the decision log) and the object store CG_CHECKPOINTS,
// then consumes the partitions of CG_TXN assigned to it.
//
// # Partitions
//
// CG_TXN's subject transform stores what is staged on <prefix>.txn.<ds>
// under <prefix>.txp.<n>.<p>.<ds>, p = subject.Partition(ds, n): a fixed
// number n of partitions (Config.Partitions, default 16), one durable
// pinned consumer each, whatever the number of datasets. A dataset has no
// goroutine and no consumer of its own: the partition loop hands each
// dataset's worker its messages, and an idle dataset costs only its
// entry. Committers running together share the partitions (assign.go): a
// committer consumes its share, and the shares move when one joins or
// dies. `cellguard partitions` shows who consumes what; `cellguard
// partitions set N` changes n while everything keeps running.
//
// # Ordering
//
// Per dataset, transactions are decided in CG_TXN stream order. A
// partition delivers in stream order, and its loop sorts each dataset's
// messages by stream sequence. Whenever a message of the dataset may be
// elsewhere — after a start or a load, a redelivery, a pin change, a gap
// in delivery sequences, during a change of the partition count, or while
// messages staged before partitioning remain — the worker first reads
// from the stream every undecided message of the dataset staged before
// its batch (direct gets on the dataset's subjects), decides those first,
// in order, and deletes them from CG_TXN once decided. A batch is decided
// sequentially against the state that includes the batch's earlier
// decisions, so group commit equals serial evaluation.
//
// # Commit point and acknowledgement
//
// The append to CG_DEC is the commit point. It is fenced with the expected
// last sequence on cg.dec.<dataset>.* (a committer that does not know the
// latest record cannot append) and deduplicated with a message id derived
// from the transaction uuid. Staged messages are acked only after their
// decisions are in the log; a crash before the ack redelivers them, and the
// worker then finds them decided and only acks.
//
// # Exactly once
//
// Every transaction uuid gets exactly one decision, however often it is
// delivered or republished: the worker keeps the set of decided uuids,
// rebuilt at load from the newest checkpoint and the log after it (or
// the whole retained log), and skips them.
//
// # Failure handling
//
// A fenced append (another committer appended first) or an append whose
// outcome is unknown rolls the in-memory state back, reads the log tail,
// and re-decides what is still undecided. Committers can run as replicas:
// each partition's consumer pins one, and the fence keeps any other (or a
// paused former owner) from writing. Safety never depends on the pin or
// on the assignment of partitions.
//
// A dataset whose batch fails (its log unreachable, its state broken)
// drops its state and hands its messages back with a growing delay; the
// other datasets of its partition go on.
//
// A message with no usable identity (a body that does not decode, or
// whose uuid is not a valid id, and no valid Nats-Msg-Id) is decided under
// subject.AnonymousTxnID of its stream sequence, a namespace no valid id
// may take (subject.ValidTxnID): two messages never share an identity.
//
// # Stale reads
//
// Each dataset keeps a table.ChangeIndex advanced with every committed
// manifest. Preconditions are evaluated, and their culprits named, through
// it (evaluator.EvaluateIndexed): a transaction read thousands of versions
// ago costs what its preconditions name, not the versions in between. A
// read older than the index is pinned from the nearest checkpoint and at
// most two checkpoint intervals of log; one whose preconditions hold but
// that read more than MaxRebaseLag versions ago is rejected
// READ_VERSION_TOO_OLD (retryable) rather than rebased over all of them.
//
// # A log record that cannot be trusted
//
// A record that does not parse or replay, versions that are not
// contiguous, or a record claiming a staging sequence that was never
// staged (or a message the log has no decision for) stops that dataset:
// nothing is decided or acked for it, DatasetStatuses reports it stopped
// with the reason, the cellguard_committer_dataset_stopped gauge is 1 and
// an error is logged once. Other datasets go on.
//
// # Memory and retention
//
// Per dataset, the committer keeps the head manifest, recent manifests and
// transactions within WindowBytes, the change index within IndexBytes, the
// decided-uuid set (about 20 bytes per decision, decide/idset.go) and the version → log
// sequence index (8 bytes per retained version). The caches among these
// (recent manifests and transactions, change index, history read from the
// log) also share one budget across all datasets, CacheBytes: over it,
// the least recently active datasets drop theirs first, down to the head
// manifest (see budget.go and decide/caches.go). A dataset idle for IdleEvict drops all of it
// and reloads on its next message. CG_DEC keeps
// DecisionsPerSubject records per dataset and outcome and denies deletes
// and purges; the committer holds back a batch rather than let retention
// drop a record newer than the dataset's newest checkpoint, and keeps the
// newest KeepCheckpoints checkpoints.
//
// # Caveats
//
// Deletion files (Lance's .arrow and .bin forms) are read and written
// through the dataset's location (deletions.go); a dataset with no
// location and no Config.DatasetRoot has none to read, and a rule that
// needs their contents treats them as changed.
//
// A dataset's configuration (declog.Config) is part of its state:
// datasets published for Lance 8 readers reject DataOverlay
// (decide/readers.go); an adoption starts a dataset at a Lance table's
// version, with its index section (decide/adopt.go).
//
// # Where to start reading
//
// The transport's flow starts at Committer.Run (committer.go), then
// partition.handle (partition.go: a partition's messages to its datasets'
// workers), worker.handle and worker.process (worker.go: a batch),
// pipeline.go (deciding a batch while the one before it appends) and
// checkpoint.go (loading a state). Every decision
// itself is made by the pure core in committer/decide: State.Decide.
package committer
