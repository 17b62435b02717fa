package decide

// tombstone.go: what a deleted dataset's state knows of its deletion.
//
// `cellguard dataset delete` (internal/drop) appends the dataset's
// tombstone to the decision log, fenced on the dataset's last record like
// any decision. The committer never writes one; it learns of it where it
// learns of every record it did not write itself: the load that builds a
// dataset's state, and the catch-up after its own append was fenced out
// (the tombstone moved the dataset's last sequence). From then on every
// staged transaction of the dataset, whatever it holds, is rejected with
// DATASET_DELETED, so no version is ever committed after the tombstone
// and a worker waiting on its Commit gets a typed answer. A restarted
// committer reloads the state from the log and finds the tombstone again.

import (
	"cellguard/internal/logrec"
	"cellguard/proto/cellguardpb"
)

// tombstone locates a dataset's deletion in the log.
type tombstone struct {
	seq uint64 // CG_DEC sequence of the tombstone
}

// noteTombstone records r when it is the dataset's tombstone. A log has
// at most one (its Nats-Msg-Id is fixed per dataset); the first is kept.
func (s *State) noteTombstone(r logrec.Record) {
	if r.Deleted() && s.Deleted == nil {
		s.Deleted = &tombstone{seq: r.Seq}
	}
}

// deletedRejection is the rejection of every transaction of a deleted
// dataset, or nil while the dataset lives.
func (s *State) deletedRejection() *Rejection {
	if s.Deleted == nil {
		return nil
	}
	return Reject(cellguardpb.Reason_DATASET_DELETED,
		"dataset %q was deleted (tombstone at decision log sequence %d); nothing more is committed to it", s.Dataset, s.Deleted.seq)
}
