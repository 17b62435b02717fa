package committer

import (
	"math/rand/v2"
	"testing"

	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// TestAppendBeyondWindowReadsNoHistory decides appends read further
// behind head than the window (and its byte bound) keeps: the conflict
// index still covers their read versions, so they land as they are,
// reading no manifest and no transaction from older history (the log).
func TestAppendBeyondWindowReadsNoHistory(t *testing.T) {
	h := newCountingHistory()
	lim := limits{maxTxnBytes: 1 << 20, window: 8, windowBytes: 1, maxLag: 1000, maxRebaseLag: 400}
	st := newState("beyond", lim, h)
	txns := []*lancepb.Transaction{createTxn(newUUID())}
	for range 300 {
		txns = append(txns, appendTxn(newUUID(), uint64(len(txns))))
	}
	decideAll(t, st, &h.memHistory, txns...)
	head := st.headVersion()
	if len(st.txns) > lim.window {
		t.Fatalf("the window keeps %d transactions, more than %d", len(st.txns), lim.window)
	}
	h.reset()
	for _, lag := range []uint64{9, 100, 250, 299} {
		v := decideAll(t, st, &h.memHistory, appendTxn(newUUID(), st.headVersion()-lag))[0]
		if v.rec.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED {
			t.Fatalf("append at lag %d: %v", lag, v.rec)
		}
	}
	if h.manifests != 0 || h.committed != 0 {
		t.Errorf("appends up to %d versions behind head %d read %d manifests and %d transactions from history, want none",
			299, head, h.manifests, h.committed)
	}
}

// TestConflictIndexSpan checks what the conflict index keeps: back to
// maxRebaseLag versions below head, its bytes counted in the cache cost,
// dropped entirely when the budget asks for everything.
func TestConflictIndexSpan(t *testing.T) {
	h := &memHistory{ms: map[uint64]*table.Manifest{}, txns: map[uint64]*lancepb.Transaction{}}
	lim := limits{maxTxnBytes: 1 << 20, window: 4, maxLag: 1000, maxRebaseLag: 50}
	st := newState("span", lim, h)
	txns := []*lancepb.Transaction{createTxn(newUUID())}
	for range 120 {
		txns = append(txns, appendTxn(newUUID(), uint64(len(txns))))
	}
	decideAll(t, st, h, txns...)
	head := st.headVersion()
	checkConflictMirror(t, st)
	if got := uint64(st.cx.Len()); got != lim.maxRebaseLag {
		t.Errorf("the conflict index covers %d versions, want %d", got, lim.maxRebaseLag)
	}
	if !st.cx.Covers(head-lim.maxRebaseLag, head) {
		t.Errorf("the conflict index does not cover the %d versions below head %d", lim.maxRebaseLag, head)
	}
	if st.cacheCost() < st.cxc.bytes || st.cxc.bytes == 0 {
		t.Errorf("cache cost %d does not count the conflict index's %d bytes", st.cacheCost(), st.cxc.bytes)
	}
	st.shrinkCaches(0)
	if st.cx.Len() != 0 || st.cxc.len() != 0 || st.cxc.bytes != 0 {
		t.Errorf("after dropping the caches the conflict index keeps %d versions (%d mirrored, %d bytes)", st.cx.Len(), st.cxc.len(), st.cxc.bytes)
	}
}

// TestConflictIndexBeyondWindowMatchesWalk decides one random stream of
// appends and deletes read up to 30 versions behind head, with a window
// of 4 and rolled-back batches in between, in two states: one lands
// through the conflict index (which outlives the window), the other,
// whose index is emptied before every decision, reads every committed
// version. Every decision must be the same, and the index must mirror its
// costs exactly throughout.
func TestConflictIndexBeyondWindowMatchesWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	lim := limits{maxTxnBytes: 1 << 20, window: 4, windowBytes: 4 << 10, maxLag: 1000, maxRebaseLag: 40}
	type side struct {
		st *state
		h  *memHistory
	}
	newSide := func() side {
		h := &memHistory{ms: map[uint64]*table.Manifest{}, txns: map[uint64]*lancepb.Transaction{}}
		return side{newState("span", lim, h), h}
	}
	indexed, walked := newSide(), newSide()
	seq := uint64(0)
	batch := func(txns []*lancepb.Transaction, keep bool) {
		t.Helper()
		var got [2][]*cellguardpb.Decision
		for i, s := range []side{indexed, walked} {
			m := s.st.mark()
			var recs []*cellguardpb.Decision
			var seqs []uint64
			for j, txn := range txns {
				if s.st == walked.st {
					s.st.forgetConflicts(0)
				}
				v := s.st.decide(t.Context(), staged{seq: seq + uint64(j) + 1, data: mustMarshal(t, txn)})
				if v.skip || v.broken != nil {
					t.Fatalf("decide %d: skip=%v broken=%v", seq+uint64(j)+1, v.skip, v.broken)
				}
				recs, seqs = append(recs, v.rec), append(seqs, seq+uint64(j)+1)
				if keep && v.next != nil {
					s.h.ms[v.next.Version()], s.h.txns[v.next.Version()] = v.next, v.txn
				}
			}
			got[i] = recs
			if keep {
				s.st.commit(m, recs, seqs)
			} else {
				s.st.rollback(m)
			}
			checkConflictMirror(t, s.st)
		}
		if keep {
			seq += uint64(len(txns))
		}
		for j := range got[0] {
			a, b := got[0][j], got[1][j]
			if a.Outcome != b.Outcome || a.Reason != b.Reason || a.Version != b.Version || a.Message != b.Message ||
				a.ConflictVersion != b.ConflictVersion || string(a.Transaction) != string(b.Transaction) {
				t.Fatalf("decision %d differs:\nindexed %v\nwalked  %v", seq+uint64(j)+1, a, b)
			}
		}
	}
	batch([]*lancepb.Transaction{createTxn(newUUID())}, true)
	for range 300 {
		var txns []*lancepb.Transaction
		for range 1 + rng.IntN(4) {
			head := indexed.st.headVersion()
			rv := head - uint64(rng.IntN(int(min(head, 30))))
			if rng.IntN(4) == 0 {
				txns = append(txns, deleteFragmentTxn(newUUID(), rv, uint64(rng.IntN(int(head)+1))))
			} else {
				txns = append(txns, appendTxn(newUUID(), rv))
			}
		}
		batch(txns, rng.IntN(6) != 0)
	}
	if h := indexed.st.headVersion(); h < 300 || !indexed.st.cx.Covers(h-lim.maxRebaseLag, h) {
		t.Errorf("head %d; the conflict index covers %d versions, want the %d below head", h, indexed.st.cx.Len(), lim.maxRebaseLag)
	}
}

// checkConflictMirror checks that the state's record of the conflict
// index's costs covers the same versions as the index.
func checkConflictMirror(t *testing.T, st *state) {
	t.Helper()
	if st.cx.Len() != st.cxc.len() {
		t.Fatalf("the conflict index covers %d versions, its costs %d", st.cx.Len(), st.cxc.len())
	}
	sum := 0
	for _, c := range st.cxc.costs {
		sum += c
	}
	if sum != st.cxc.bytes {
		t.Fatalf("conflict index costs sum to %d, recorded %d", sum, st.cxc.bytes)
	}
	if n := st.cxc.len(); n > 0 && !st.cx.Covers(st.cxc.first-1, st.cxc.last()) {
		t.Fatalf("the conflict index does not cover %d..%d as its costs do", st.cxc.first, st.cxc.last())
	}
}
