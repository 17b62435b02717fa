// Package decide is cellguard's decision core: one dataset's State and
// every rule that decides a staged transaction — committed or rejected,
// naming the culprit — with no NATS, no clock and no goroutines. The
// committer (package committer) owns the transport: it feeds a State the
// staged messages of its dataset, appends the verdicts to the decision
// log, and commits or rolls back the State once the log has answered.
//
// The flow starts at [State.Decide] (judge.go): identify the message,
// then judge runs the checks in order (tombstone, name, size, decoding,
// the stager's refusal (refusal.go), the readers (readers.go), the read
// version, preconditions and conflicts (rules.go: checkPreconditions,
// candidates, land, ApplyTxn)), finish fills the committed record and
// record folds the verdict into the state. A batch is decided between
// [State.Mark] and [State.Commit] or [State.Rollback] (state.go); the
// decision log is folded in with [State.Replay]. What the state keeps
// besides the head — recent manifests and transactions, the conflict and
// change indexes — is bounded in statecache.go and caches.go; the decided
// ids live in idset.go, the version → log sequence index in seqindex.go.
//
// The scenario scripts in testdata/*.txt drive a State command by
// command (scenario_test.go; the commands are in testdata/README.txt).
package decide
