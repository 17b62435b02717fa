package declog

import (
	"context"
	"fmt"

	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// A tombstone is the record that deletes a dataset: OUTCOME_DELETED on
// <prefix>.dec.<dataset>.deleted, written by an admin, never by the
// committer. It lives in the dataset's fencing domain (DecOf), so it is
// ordered with the dataset's decisions: appended fenced on the last
// record the admin saw, it lands between two decisions, never inside a
// batch, and a committer that decided without knowing it is fenced out,
// re-reads the log and finds it. The decision log is never purged: the
// tombstone is permanent, and so is the dataset's history before it.

// Tombstone returns ds's tombstone, or ok=false if ds is not deleted.
func (l *Log) Tombstone(ctx context.Context, ds string) (Record, bool, error) {
	return l.Last(ctx, l.sc.Dec(ds, subject.Deleted))
}

// AppendTombstone appends ds's tombstone, fenced on expect (the sequence
// of the last record on ds's subjects the caller read; 0 for none), and
// returns its sequence. head is the dataset's last committed version and
// why a human-readable note (who deleted it, and why). Errors wrap
// ErrFenced (the log moved, or ds already has a tombstone: re-read it)
// or ErrAppend (the outcome is unknown: re-read it).
func (l *Log) AppendTombstone(ctx context.Context, ds string, expect, head uint64, why string) (uint64, error) {
	if err := subject.Validate(ds); err != nil {
		return 0, fmt.Errorf("declog: tombstone: %w", err)
	}
	t := &cellguardpb.Decision{
		Dataset: ds, Outcome: cellguardpb.Outcome_OUTCOME_DELETED, HeadVersion: head, Message: why,
	}
	seqs, err := l.Append(ctx, ds, expect, []*cellguardpb.Decision{t})
	if err != nil {
		return 0, err
	}
	return seqs[0], nil
}
