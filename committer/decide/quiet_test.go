package decide

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/internal/gctest"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// TestQuietStateDecidesAlike decides one random stream of appends,
// deletes and precondition-carrying appends, read up to 30 versions
// behind head, in batches (some rolled back) in two states: one is made
// quiet before about half of its batches, the other never. Every
// decision record must be the same bytes, and so must the heads after
// every batch; the quiet state's head must have been packed, and a
// batch that only appends onto it must leave it packed (undecoded).
func TestQuietStateDecidesAlike(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	lim := Limits{MaxTxnBytes: 1 << 20, Window: 8, MaxLag: 1000, MaxRebaseLag: 40}
	type side struct {
		st *State
		h  *memHistory
	}
	newSide := func() side {
		h := newMemHistory()
		return side{NewState("quiet", lim, h), h}
	}
	active, quiet := newSide(), newSide()
	seq := uint64(0)
	packed, stayed := 0, 0
	batch := func(txns []*lancepb.Transaction, keep bool) {
		t.Helper()
		wasPacked := false
		if rng.IntN(2) == 0 {
			quiet.st.Quiet()
			if !quiet.st.IsQuiet() {
				t.Fatal("a state just made quiet is not quiet")
			}
			if quiet.st.Head != nil && quiet.st.Head.IsPacked() {
				packed++
				wasPacked = true
			}
		}
		var got [2][][]byte
		var gotRecs [2][]*cellguardpb.Decision
		for i, s := range []side{active, quiet} {
			m := s.st.Mark()
			var recs []*cellguardpb.Decision
			var seqs []uint64
			for j, txn := range txns {
				v := s.st.Decide(t.Context(), Staged{Seq: seq + uint64(j) + 1, Data: mustMarshal(t, txn)})
				if v.Skip || v.Broken != nil {
					t.Fatalf("decide %d: skip=%v broken=%v", seq+uint64(j)+1, v.Skip, v.Broken)
				}
				b, err := proto.MarshalOptions{Deterministic: true}.Marshal(v.Rec)
				if err != nil {
					t.Fatal(err)
				}
				recs, seqs, got[i] = append(recs, v.Rec), append(seqs, seq+uint64(j)+1), append(got[i], b)
				gotRecs[i] = append(gotRecs[i], v.Rec)
				if keep && v.Next != nil {
					s.h.Manifests[v.Next.Version()], s.h.Txns[v.Next.Version()] = v.Next, mustCommitted(t, v)
				}
			}
			if keep {
				s.st.Commit(m, recs, seqs)
			} else {
				s.st.Rollback(m)
			}
		}
		for j := range got[0] {
			if !bytes.Equal(got[0][j], got[1][j]) {
				t.Fatalf("decision %d differs once quiet:\nactive %v\nquiet  %v", seq+uint64(j)+1, gotRecs[0][j], gotRecs[1][j])
			}
		}
		if wasPacked && keep && quiet.st.Head.IsPacked() {
			stayed++ // appends only, onto the packed head: nothing decoded it
		}
		if a, b := headBytes(t, active.st), headBytes(t, quiet.st); !bytes.Equal(a, b) {
			t.Fatalf("after decision %d the quiet state's head differs", seq+uint64(len(txns)))
		}
		if keep {
			seq += uint64(len(txns))
		}
	}
	batch([]*lancepb.Transaction{createTxn(newUUID())}, true)
	for range 300 {
		var txns []*lancepb.Transaction
		for range 1 + rng.IntN(4) {
			head := active.st.HeadVersion()
			rv := head - uint64(rng.IntN(int(min(head, 30))))
			switch rng.IntN(4) {
			case 0:
				txns = append(txns, deleteFragmentTxn(newUUID(), rv, uint64(rng.IntN(int(head)+1))))
			case 1:
				txns = append(txns, withPre(appendTxn(newUUID(), rv), cellsUnchanged([]int32{1}, wholeFragment(uint64(rng.IntN(int(head)+1))))))
			default:
				txns = append(txns, appendTxn(newUUID(), rv))
			}
		}
		batch(txns, rng.IntN(6) != 0)
	}
	if packed < 100 {
		t.Errorf("the quiet state's head was packed before %d batches, want most of ~150", packed)
	}
	if stayed < 10 {
		t.Errorf("the quiet state's head stayed packed through %d batches, want the ones appending onto it", stayed)
	}
	t.Logf("packed before %d batches, still packed after %d", packed, stayed)
}

func headBytes(t *testing.T, st *State) []byte {
	t.Helper()
	if st.Head == nil {
		return nil
	}
	b, err := st.Head.AppendEncoding(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestQuietStateKeepsNoStagedBody: the strings a decision decodes are
// its staged body's own bytes; once a creation and an append are
// committed and the state is made quiet with its caches dropped, neither
// body is reachable from the state.
func TestQuietStateKeepsNoStagedBody(t *testing.T) {
	h := newMemHistory()
	st := NewState("bodies", Limits{MaxTxnBytes: 1 << 20, Window: 8, MaxLag: 1000, MaxRebaseLag: 40}, h)
	for i, txn := range []*lancepb.Transaction{createTxn(newUUID()), appendTxn(newUUID(), 1)} {
		body := mustMarshal(t, txn)
		released := gctest.Watch(&body[0])
		m := st.Mark()
		seq := st.LastTxnSeq + 1
		v := st.Decide(t.Context(), Staged{Seq: seq, Data: body})
		if v.Rec.GetOutcome() != cellguardpb.Outcome_OUTCOME_COMMITTED {
			t.Fatalf("txn %d: %v", i, v.Rec)
		}
		st.Commit(m, []*cellguardpb.Decision{v.Rec}, []uint64{seq})
		st.Quiet()
		st.DropCaches()
		body, v = nil, Verdict{}
		gctest.AwaitReleased(t, released, fmt.Sprintf("txn %d's staged body", i))
	}
}

// TestLargeCommittedTxnKeptEncoded: a committed transaction of
// keepEncodedMin bytes or more stays in the window as its encoding, not
// decoded; the verdict hands it out decoded again on request, and a later
// decision that conflicts with it still names it.
func TestLargeCommittedTxnKeptEncoded(t *testing.T) {
	st := NewState("large", Limits{MaxTxnBytes: 1 << 20, Window: 8, MaxLag: 1000, MaxRebaseLag: 40}, newMemHistory())
	overwrite := func(rv uint64) *lancepb.Transaction {
		txn := createTxn(newUUID())
		txn.ReadVersion = rv
		ow := txn.GetOverwrite()
		for i := range 127 {
			ow.Fragments = append(ow.Fragments, dataFragment(fmt.Sprintf("data/part-%04d-%s.lance", i, newUUID()), 100))
		}
		return txn
	}
	decide := func(seq uint64, txn *lancepb.Transaction) Verdict {
		t.Helper()
		m := st.Mark()
		v := st.Decide(t.Context(), Staged{Seq: seq, Data: mustMarshal(t, txn)})
		st.Commit(m, []*cellguardpb.Decision{v.Rec}, []uint64{seq})
		return v
	}
	for seq, txn := range []*lancepb.Transaction{overwrite(0), overwrite(1)} {
		if n := len(mustMarshal(t, txn)); n < keepEncodedMin {
			t.Fatalf("overwrite is %d bytes, want at least %d", n, keepEncodedMin)
		}
		v := decide(uint64(seq+1), txn)
		if v.Rec.GetOutcome() != cellguardpb.Outcome_OUTCOME_COMMITTED {
			t.Fatalf("overwrite %d: %v", seq, v.Rec)
		}
		if v.Txn != nil {
			t.Errorf("overwrite %d: the verdict holds it decoded", seq)
		}
		want := proto.CloneOf(txn)
		if got := mustCommitted(t, v); !proto.Equal(got, want) {
			t.Errorf("overwrite %d: committed transaction decodes to %v, want %v", seq, got, want)
		}
		w, ok := st.Txns.get(v.Rec.GetVersion())
		if !ok || w.v.txn != nil || !bytes.Equal(w.v.enc, v.Rec.GetTransaction()) {
			t.Fatalf("window at version %d: present %v, decoded %v, %d bytes encoded", v.Rec.GetVersion(), ok, w.v.txn != nil, len(w.v.enc))
		}
	}
	second := st.Txns.slot(2).v.v.enc
	late := appendTxn(newUUID(), 1) // read before the second overwrite: conflicts with it
	v := decide(3, late)
	if v.Rec.GetOutcome() != cellguardpb.Outcome_OUTCOME_REJECTED || v.Rec.GetConflictVersion() != 2 {
		t.Fatalf("append read at version 1: %v", v.Rec)
	}
	if txn, _, err := table.DecodeTransaction(second); err != nil || v.Rec.GetConflictTxnUuid() != txn.GetUuid() {
		t.Errorf("append read at version 1 names %q as the conflict (%v)", v.Rec.GetConflictTxnUuid(), err)
	}
}

// TestPackCreatedWhileCreationAppends: a creation's head may be packed
// while the creation is still provisional (its record appending), so
// that its decoded head is not held through the append. Rolled back
// after, the state is empty again and decides the same creation to the
// same record; committed after, its head is the one a state never packed
// early has; either way the decoded head is released at once. A batch
// that made more versions than the creation is left as it is.
func TestPackCreatedWhileCreationAppends(t *testing.T) {
	lim := Limits{MaxTxnBytes: 1 << 20, Window: 8, MaxLag: 1000, MaxRebaseLag: 40}
	txn := createTxn(newUUID())
	ow := txn.GetOverwrite()
	for i := range 63 {
		ow.Fragments = append(ow.Fragments, dataFragment(fmt.Sprintf("data/part-%04d.lance", i), 100))
	}
	body := mustMarshal(t, txn)
	decide := func(st *State) ([]byte, Verdict) {
		t.Helper()
		v := st.Decide(t.Context(), Staged{Seq: 1, Data: body})
		if v.Rec.GetOutcome() != cellguardpb.Outcome_OUTCOME_COMMITTED || v.Next == nil {
			t.Fatalf("creation: %v", v.Rec)
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(v.Rec)
		if err != nil {
			t.Fatal(err)
		}
		return b, v
	}
	never := NewState("created", lim, newMemHistory())
	m := never.Mark()
	want, v := decide(never)
	never.Commit(m, []*cellguardpb.Decision{v.Rec}, []uint64{1})

	st := NewState("created", lim, newMemHistory())
	for _, keep := range []bool{false, true} {
		m := st.Mark()
		got, v := decide(st)
		if !bytes.Equal(got, want) {
			t.Fatalf("creation decided to\n%v\nwant the record of a state never packed early", v.Rec)
		}
		released := gctest.Watch(v.Next)
		if !st.PackCreated() || !st.IsQuiet() || !st.Head.IsPacked() {
			t.Fatal("a provisional creation's head was not packed, or its state is not quiet")
		}
		v = Verdict{}
		gctest.AwaitReleased(t, released, "the provisional creation's decoded head")
		if !keep {
			st.Rollback(m)
			if st.Head != nil || st.Config != nil || st.VersionSeq.Top() != 0 {
				t.Fatalf("rolled back: head %v, config %v, versions to %d; want an empty state", st.Head, st.Config, st.VersionSeq.Top())
			}
			continue
		}
		st.Commit(m, []*cellguardpb.Decision{decodeRec(t, got)}, []uint64{1})
	}
	if a, b := headBytes(t, never), headBytes(t, st); !bytes.Equal(a, b) {
		t.Fatal("the head committed after packing while provisional differs from a state's never packed early")
	}

	more := NewState("more", lim, newMemHistory())
	for i, b := range [][]byte{body, mustMarshal(t, appendTxn(newUUID(), 1))} {
		if v := more.Decide(t.Context(), Staged{Seq: uint64(i + 1), Data: b}); v.Rec.GetOutcome() != cellguardpb.Outcome_OUTCOME_COMMITTED {
			t.Fatalf("decision %d: %v", i, v.Rec)
		}
	}
	if more.PackCreated() || more.WindowManifests() != 1 || more.Head.IsPacked() {
		t.Errorf("a provisional creation and append: packed %t, window manifests %d; want the state left as it is", more.Head.IsPacked(), more.WindowManifests())
	}
}

// TestRollbackBoundsDroppedMarks: the window's marks of what was dropped
// never outlive the versions a rollback removes, so the state decided
// again can still be made quiet.
func TestRollbackBoundsDroppedMarks(t *testing.T) {
	lim := Limits{MaxTxnBytes: 1 << 20, Window: 8, MaxLag: 1000, MaxRebaseLag: 40}
	st := NewState("ds", lim, newMemHistory())
	batch := [][]byte{mustMarshal(t, createTxn(newUUID())), mustMarshal(t, appendTxn(newUUID(), 1)), mustMarshal(t, appendTxn(newUUID(), 2))}
	decide := func() []*cellguardpb.Decision {
		var recs []*cellguardpb.Decision
		for i, b := range batch {
			v := st.Decide(t.Context(), Staged{Seq: uint64(i + 1), Data: b})
			if v.Rec.GetOutcome() != cellguardpb.Outcome_OUTCOME_COMMITTED {
				t.Fatalf("decision %d: %v", i, v.Rec)
			}
			recs = append(recs, v.Rec)
		}
		return recs
	}
	m := st.Mark()
	decide()
	st.Quiet() // not what the committer does over provisional decisions; the marks move
	st.Rollback(m)
	recs := decide()
	st.Commit(m, recs, []uint64{1, 2, 3})
	st.Quiet()
	if !st.IsQuiet() {
		t.Errorf("decided again after a rollback, Quiet leaves %d window manifests", st.WindowManifests())
	}
}

func decodeRec(t *testing.T, b []byte) *cellguardpb.Decision {
	t.Helper()
	rec := &cellguardpb.Decision{}
	if err := proto.Unmarshal(b, rec); err != nil {
		t.Fatal(err)
	}
	return rec
}
