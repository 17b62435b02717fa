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
// then runs one worker goroutine per dataset it finds staged messages for.
// Each worker owns its dataset's state and exits when Run's context ends.
//
// # Ordering
//
// Per dataset, transactions are decided in CG_TXN stream order: a worker
// sorts each batch by stream sequence and checks that no undecided message
// precedes it or lies between its members (after a start, a redelivery, a
// pin change, a lost delivery or a fence) and otherwise resets the
// consumer so delivery restarts, in order, at the oldest unacked message.
// A batch is decided sequentially against the state that includes the
// batch's earlier decisions, so group commit equals serial evaluation.
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
// rebuilt from the log at start-up, and skips them.
//
// # Failure handling
//
// A fenced append (another committer appended first) or an append whose
// outcome is unknown rolls the in-memory state back, reads the log tail,
// and re-decides what is still undecided. Committers can run as replicas:
// the dataset's consumer pins one, and the fence keeps any other (or a
// paused former leader) from writing. Safety never depends on the pin.
//
// # Caveats
//
// The decided-uuid set and the version index grow with the log (about 40
// bytes per decision). Deletion files (Lance's .arrow and .bin forms) are
// read and written through the dataset's location (deletions.go); a
// dataset with no location and no Config.DatasetRoot has none to read, and
// a rule that needs their contents treats them as changed.
//
// A dataset's configuration (declog.Config) is part of its state:
// datasets published for Lance 8 readers reject DataOverlay, and
// published datasets reject CreateIndex (readers.go); an adoption starts
// a dataset at a Lance table's version (adopt.go).
package committer
