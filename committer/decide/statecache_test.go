package decide

import (
	"math/rand/v2"
	"testing"

	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// TestAppendBeyondWindowReadsNoHistory decides appends read further
// behind head than the window (and its byte bound) keeps: the conflict
// index still covers their read versions, so they land as they are,
// reading no manifest and no transaction from older history (the log).
func TestAppendBeyondWindowReadsNoHistory(t *testing.T) {
	h := newCountingHistory()
	lim := Limits{MaxTxnBytes: 1 << 20, Window: 8, WindowBytes: 1, MaxLag: 1000, MaxRebaseLag: 400}
	st := NewState("beyond", lim, h)
	txns := []*lancepb.Transaction{createTxn(newUUID())}
	for range 300 {
		txns = append(txns, appendTxn(newUUID(), uint64(len(txns))))
	}
	decideAll(t, st, &h.MemHistory, txns...)
	head := st.HeadVersion()
	if st.Txns.len() > lim.Window {
		t.Fatalf("the window keeps %d transactions, more than %d", st.Txns.len(), lim.Window)
	}
	h.Reset()
	for _, lag := range []uint64{9, 100, 250, 299} {
		v := decideAll(t, st, &h.MemHistory, appendTxn(newUUID(), st.HeadVersion()-lag))[0]
		if v.Rec.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED {
			t.Fatalf("append at lag %d: %v", lag, v.Rec)
		}
	}
	if h.ManifestReads != 0 || h.CommittedReads != 0 {
		t.Errorf("appends up to %d versions behind head %d read %d manifests and %d transactions from history, want none",
			299, head, h.ManifestReads, h.CommittedReads)
	}
}

// TestConflictIndexSpan checks what the conflict index keeps: back to
// maxRebaseLag versions below head, its bytes counted in the cache cost,
// dropped entirely when the budget asks for everything.
func TestConflictIndexSpan(t *testing.T) {
	h := newMemHistory()
	lim := Limits{MaxTxnBytes: 1 << 20, Window: 4, MaxLag: 1000, MaxRebaseLag: 50}
	st := NewState("span", lim, h)
	txns := []*lancepb.Transaction{createTxn(newUUID())}
	for range 120 {
		txns = append(txns, appendTxn(newUUID(), uint64(len(txns))))
	}
	decideAll(t, st, h, txns...)
	head := st.HeadVersion()
	checkConflictMirror(t, st)
	if got := uint64(st.conflicts.Len()); got != lim.MaxRebaseLag {
		t.Errorf("the conflict index covers %d versions, want %d", got, lim.MaxRebaseLag)
	}
	if !st.conflicts.Covers(head-lim.MaxRebaseLag, head) {
		t.Errorf("the conflict index does not cover the %d versions below head %d", lim.MaxRebaseLag, head)
	}
	if st.CacheCost() < st.conflictBytes.bytes || st.conflictBytes.bytes == 0 {
		t.Errorf("cache cost %d does not count the conflict index's %d bytes", st.CacheCost(), st.conflictBytes.bytes)
	}
	st.ShrinkCaches(0)
	if st.conflicts.Len() != 0 || st.conflictBytes.len() != 0 || st.conflictBytes.bytes != 0 {
		t.Errorf("after dropping the caches the conflict index keeps %d versions (%d mirrored, %d bytes)", st.conflicts.Len(), st.conflictBytes.len(), st.conflictBytes.bytes)
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
	lim := Limits{MaxTxnBytes: 1 << 20, Window: 4, WindowBytes: 4 << 10, MaxLag: 1000, MaxRebaseLag: 40}
	type side struct {
		st *State
		h  *memHistory
	}
	newSide := func() side {
		h := newMemHistory()
		return side{NewState("span", lim, h), h}
	}
	indexed, walked := newSide(), newSide()
	seq := uint64(0)
	batch := func(txns []*lancepb.Transaction, keep bool) {
		t.Helper()
		var got [2][]*cellguardpb.Decision
		for i, s := range []side{indexed, walked} {
			m := s.st.Mark()
			var recs []*cellguardpb.Decision
			var seqs []uint64
			for j, txn := range txns {
				if s.st == walked.st {
					s.st.forgetConflicts(0)
				}
				v := s.st.Decide(t.Context(), Staged{Seq: seq + uint64(j) + 1, Data: mustMarshal(t, txn)})
				if v.Skip || v.Broken != nil {
					t.Fatalf("decide %d: skip=%v broken=%v", seq+uint64(j)+1, v.Skip, v.Broken)
				}
				recs, seqs = append(recs, v.Rec), append(seqs, seq+uint64(j)+1)
				if keep && v.Next != nil {
					s.h.Manifests[v.Next.Version()], s.h.Txns[v.Next.Version()] = v.Next, mustCommitted(t, v)
				}
			}
			got[i] = recs
			if keep {
				s.st.Commit(m, recs, seqs)
			} else {
				s.st.Rollback(m)
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
			head := indexed.st.HeadVersion()
			rv := head - uint64(rng.IntN(int(min(head, 30))))
			if rng.IntN(4) == 0 {
				txns = append(txns, deleteFragmentTxn(newUUID(), rv, uint64(rng.IntN(int(head)+1))))
			} else {
				txns = append(txns, appendTxn(newUUID(), rv))
			}
		}
		batch(txns, rng.IntN(6) != 0)
	}
	if h := indexed.st.HeadVersion(); h < 300 || !indexed.st.conflicts.Covers(h-lim.MaxRebaseLag, h) {
		t.Errorf("head %d; the conflict index covers %d versions, want the %d below head", h, indexed.st.conflicts.Len(), lim.MaxRebaseLag)
	}
}

// checkConflictMirror checks that the state's record of the conflict
// index's costs covers the same versions as the index.
func checkConflictMirror(t *testing.T, st *State) {
	t.Helper()
	if st.conflicts.Len() != st.conflictBytes.len() {
		t.Fatalf("the conflict index covers %d versions, its costs %d", st.conflicts.Len(), st.conflictBytes.len())
	}
	sum := 0
	for _, c := range st.conflictBytes.costs {
		sum += c
	}
	if sum != st.conflictBytes.bytes {
		t.Fatalf("conflict index costs sum to %d, recorded %d", sum, st.conflictBytes.bytes)
	}
	if n := st.conflictBytes.len(); n > 0 && !st.conflicts.Covers(st.conflictBytes.first-1, st.conflictBytes.last()) {
		t.Fatalf("the conflict index does not cover %d..%d as its costs do", st.conflictBytes.first, st.conflictBytes.last())
	}
}

// TestCommitUnderThenRollback commits a batch while a second one, decided
// on top of it, stays provisional; rolling the second back must leave the
// state exactly as if the first had been committed alone: its versions,
// ids and log position kept, the second's gone.
func TestCommitUnderThenRollback(t *testing.T) {
	h := newMemHistory()
	st := NewState("under", Limits{MaxTxnBytes: 1 << 20, Window: 2, MaxLag: 1000, MaxRebaseLag: 100}, h)
	decideAll(t, st, h, createTxn(newUUID()))
	seq := st.LastTxnSeq
	decideN := func(n int) (Mark, []*cellguardpb.Decision, []string) {
		m := st.Mark()
		var recs []*cellguardpb.Decision
		var ids []string
		for range n {
			id := newUUID()
			seq++
			v := st.Decide(t.Context(), Staged{Seq: seq, Data: mustMarshal(t, appendTxn(id, st.HeadVersion()))})
			if v.Rec.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED {
				t.Fatalf("decide %s: %v", id, v.Rec)
			}
			recs, ids = append(recs, v.Rec), append(ids, id)
		}
		return m, recs, ids
	}
	ma, recsA, idsA := decideN(3)
	mb, _, idsB := decideN(4)
	seqsA := []uint64{101, 102, 103}
	st.CommitUnder(ma, recsA, seqsA, &mb)
	if mb.LastDecSeq != 103 || mb.journal != 0 {
		t.Fatalf("next mark after commitUnder: lastDecSeq %d journal %d, want 103 and 0", mb.LastDecSeq, mb.journal)
	}
	if st.HeadVersion() != 8 {
		t.Fatalf("provisional head %d, want 8", st.HeadVersion())
	}
	st.Rollback(mb)
	if st.HeadVersion() != 4 || st.LastDecSeq != 103 || st.LastTxnSeq != seq-4 {
		t.Errorf("after rollback: head %d lastDecSeq %d lastTxnSeq %d, want 4, 103, %d", st.HeadVersion(), st.LastDecSeq, st.LastTxnSeq, seq-4)
	}
	for _, id := range idsA {
		if !st.Decided.Has(id) {
			t.Errorf("committed id %s forgotten by the rollback", id)
		}
	}
	for _, id := range idsB {
		if st.Decided.Has(id) {
			t.Errorf("rolled-back id %s still decided", id)
		}
	}
	for v, want := range map[uint64]uint64{2: 101, 3: 102, 4: 103} {
		if got, ok := st.VersionSeq.At(v); !ok || got != want {
			t.Errorf("version %d at log sequence %d (%v), want %d", v, got, ok, want)
		}
	}
	if top := st.VersionSeq.Top(); top != 4 {
		t.Errorf("version index tops at %d, want 4", top)
	}
	checkConflictMirror(t, st)
	if !st.conflicts.Covers(1, 4) || st.conflicts.Covers(1, 5) {
		t.Errorf("conflict index covers %d..%d, want up to 4", st.conflictBytes.first, st.conflictBytes.last())
	}
}
