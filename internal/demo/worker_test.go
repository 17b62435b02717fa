package demo

import (
	"slices"
	"testing"

	"cellguard/events"
	"cellguard/proto/cellguardpb"
	"cellguard/rejection"
)

// A rejection can reach the queue handler of the worker whose own
// recomputation it rejects before that worker's Commit has returned: the
// fragment is still held, so the handler cannot recompute it. The
// fragment must then be looked at again when the recomputation in hand
// ends: were the handler to acknowledge the rejection and drop the
// fragment, a rejection from a change that is not a write of x (rows
// deleted: a conflict, or a protected row gone) would leave nothing to
// schedule the fragment again and y stale at the head: the workers
// would never catch up.
func TestDemoWorkerRejectionOfFragmentInHand(t *testing.T) {
	const f = 2
	for _, tc := range []struct {
		name string
		err  *rejection.Error
	}{
		{"conflict with a delete", &rejection.Error{Reason: cellguardpb.Reason_CONFLICT_RETRYABLE, ReadVersion: 5, HeadVersion: 6, ConflictVersion: 6}},
		{"protected row deleted", &rejection.Error{Reason: cellguardpb.Reason_PRECONDITION_FAILED, ReadVersion: 5, HeadVersion: 6,
			Violations: []rejection.Violation{{FieldID: FieldX, FragmentID: f, Reason: "rows-deleted", Rows: []uint32{7}, CulpritVersion: 6}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &demoWorker{
				id: 2, name: "worker 2", n: 3, tr: newDemoTracker(),
				d:  &demoRun{stats: demoStats{rejected: map[string]int64{}, updateKinds: map[string]int64{}}},
				in: map[uint64]bool{}, again: map[uint64]bool{}, wake: make(chan struct{}, 1), dead: make(chan struct{}),
			}
			// x of fragment 2 changed at version 5 after y was read at
			// version 3, and version 6 deleted rows of it: y is stale.
			w.tr.frags[f] = true
			w.tr.xWritten[f], w.tr.yRead[f] = 5, 3
			w.tr.touched[6] = []uint64{f}
			w.tr.v = 6

			// The jobs loop takes fragment 2 and commits y for it...
			w.schedule(f)
			w.mu.Lock()
			w.queued = w.queued[1:]
			w.busy++
			w.mu.Unlock()

			// ...and the queue hands this worker that commit's rejection
			// before Commit has returned.
			rej := &events.Rejected{
				Dataset: demoDataset, TxnID: "txn-of-jobs", Err: tc.err, Delivery: 1,
				Decision: &cellguardpb.Decision{ReadVersion: 5, HeadVersion: 6, ConflictVersion: tc.err.ConflictVersion},
			}
			if err := w.onRejected(t.Context(), rej); err != nil {
				t.Fatalf("onRejected = %v; want nil (the fragment is held: nothing to recompute now)", err)
			}
			w.release(f) // Commit returned: the jobs loop lets the fragment go

			w.mu.Lock()
			queued := slices.Clone(w.queued)
			w.mu.Unlock()
			if !slices.Equal(queued, []uint64{f}) {
				t.Fatalf("after the rejection of the commit in hand: queued %v; want [%d] (stale fragments %v)",
					queued, f, w.tr.staleFragments())
			}
			if w.idle(6) {
				t.Errorf("idle(6) = true with fragment %d stale and queued", f)
			}
		})
	}
}
