// Package logrec is the decision log's records as values: a [Record] and
// its encoding ([Encode], [EncodeLanded]), a [Checkpoint] and the
// [LogState] it carries, the dataset configuration and adoption a creating
// transaction carries ([SetConfig], [ConfigOf], [SetAdoption],
// [AdoptionOf]), and [Replay], which applies one committed record to the
// manifest before it. It is pure: no NATS, no clock, no goroutines. The
// log itself (the stream, appends, reads, the checkpoint store) is
// internal/declog, which builds on it.
//
// Start reading at [Replay]: it is the one place a record becomes a
// manifest.
package logrec
