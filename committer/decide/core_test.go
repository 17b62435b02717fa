package decide

import (
	"encoding/hex"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// TestDecideIndexedMatchesWalk decides one random stream of transactions
// (appends, deletes, overlays and indexes read up to 20 versions behind
// head, with rolled-back batches in between) in two states: one lands
// transactions through the conflict index, the other, whose index is
// emptied before every decision, reads every committed version as before
// the index existed. Every decision must be the same, record for record.
func TestDecideIndexedMatchesWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	lim := Limits{MaxTxnBytes: 1 << 20, Window: 16, MaxLag: 1000}
	newSide := func() (*State, *memHistory) {
		h := newMemHistory()
		return NewState("core", lim, h), h
	}
	indexed, ih := newSide()
	walked, wh := newSide()
	seq := uint64(0)
	decide := func(txn *lancepb.Transaction, keep bool) {
		t.Helper()
		seq++
		body := mustMarshal(t, txn)
		var recs [2]*cellguardpb.Decision
		for i, side := range []struct {
			st *State
			h  *memHistory
		}{{indexed, ih}, {walked, wh}} {
			if side.st == walked {
				side.st.conflicts.Reset()
			}
			m := side.st.Mark()
			v := side.st.Decide(t.Context(), Staged{Seq: seq, Data: body})
			if v.Skip || v.Broken != nil {
				t.Fatalf("decide %d: skip=%v broken=%v", seq, v.Skip, v.Broken)
			}
			recs[i] = v.Rec
			if v.Next != nil { // the committed bytes are the committed transaction
				want := v.Txn
				if v.borrowed { // an Append as staged, landed at the head it was decided on
					if v.Txn != nil {
						t.Fatalf("decision %d: a borrowed transaction was returned", seq)
					}
					want = proto.CloneOf(txn)
					want.ReadVersion = v.Next.Version() - 1
				}
				var got lancepb.Transaction
				if err := proto.Unmarshal(v.Rec.Transaction, &got); err != nil || !proto.Equal(&got, want) {
					t.Fatalf("decision %d: the record's transaction %v (%v) is not the one committed, %v", seq, &got, err, want)
				}
			}
			if !keep {
				side.st.Rollback(m)
				continue
			}
			side.st.Commit(m, []*cellguardpb.Decision{v.Rec}, []uint64{seq})
			if v.Next != nil {
				side.h.Manifests[v.Next.Version()], side.h.Txns[v.Next.Version()] = v.Next, mustCommitted(t, v)
			}
		}
		if keep && indexed.Head != nil && !proto.Equal(indexed.Head.Proto(), walked.Head.Proto()) {
			t.Fatalf("decision %d: the heads differ:\nindexed %v\nwalked  %v", seq, indexed.Head.Proto(), walked.Head.Proto())
		}
		a, b := recs[0], recs[1]
		if a.Outcome != b.Outcome || a.Reason != b.Reason || a.Version != b.Version || a.Message != b.Message ||
			a.ConflictVersion != b.ConflictVersion || a.ConflictTxnUuid != b.ConflictTxnUuid || string(a.Transaction) != string(b.Transaction) {
			t.Fatalf("decision %d differs:\nindexed %v\nwalked  %v", seq, a, b)
		}
	}
	decide(createTxn(newUUID()), true)
	for range 1500 {
		head := indexed.HeadVersion()
		rv := head - uint64(rng.IntN(int(min(head, 20))))
		var txn *lancepb.Transaction
		switch k := rng.IntN(10); {
		case k < 5:
			txn = appendTxn(newUUID(), rv)
		case k < 8:
			txn = deleteFragmentTxn(newUUID(), rv, uint64(rng.IntN(int(head)+1)))
		case k < 9:
			txn = overlayTxn(t, newUUID(), rv)
		default:
			txn = indexTxn(t, newUUID(), rv)
		}
		decide(txn, rng.IntN(8) != 0)
	}
	if h := indexed.HeadVersion(); !indexed.conflicts.Covers(h-uint64(lim.Window), h) {
		t.Errorf("the conflict index does not cover the window (%d versions up to %d)", indexed.conflicts.Len(), h)
	}
	if indexed.HeadVersion() < 500 {
		t.Errorf("only %d versions committed: the stream exercises too little", indexed.HeadVersion())
	}
}

// TestUUIDKeyMatchesHex checks uuidKey, which reads the hex digits
// itself, against decoding them with encoding/hex, on valid ids and on
// every single-byte corruption of one.
func TestUUIDKeyMatchesHex(t *testing.T) {
	ref := func(id string) ([16]byte, bool) {
		var k [16]byte
		if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
			return k, false
		}
		h := id[0:8] + id[9:13] + id[14:18] + id[19:23] + id[24:36]
		if strings.ToLower(h) != h {
			return k, false
		}
		if _, err := hex.Decode(k[:], []byte(h)); err != nil {
			return k, false
		}
		return k, true
	}
	check := func(id string) {
		t.Helper()
		gk, gok := uuidKey(id)
		wk, wok := ref(id)
		if gok != wok || gok && gk.bytes() != wk {
			t.Fatalf("uuidKey(%q) = %x, %v; want %x, %v", id, gk, gok, wk, wok)
		}
	}
	for range 200 {
		id := newUUID()
		check(id)
		check(strings.ToUpper(id))
		for i := range len(id) {
			for _, c := range []byte{'0', '9', 'a', 'f', 'g', 'A', 'F', '-', ' ', 0xff} {
				check(id[:i] + string(c) + id[i+1:])
			}
		}
	}
}

// TestSchemaAtEveryVersion: the state's schema history answers the schema
// of every version since its base, across a schema change and a rolled
// back one, without the window or the change index.
func TestSchemaAtEveryVersion(t *testing.T) {
	st := NewState("schemas", Limits{MaxTxnBytes: 1 << 20, Window: 2, MaxLag: 1000}, nil)
	want := map[uint64]*table.Schema{}
	seq := uint64(0)
	decide := func(txn *lancepb.Transaction, keep bool) {
		t.Helper()
		seq++
		m := st.Mark()
		v := st.Decide(t.Context(), Staged{Seq: seq, Data: mustMarshal(t, txn)})
		if v.Next == nil {
			t.Fatalf("decision %d not committed: %v", seq, v.Rec)
		}
		if !keep {
			st.Rollback(m)
			return
		}
		st.Commit(m, []*cellguardpb.Decision{v.Rec}, []uint64{seq})
		want[v.Next.Version()] = v.Next.Schema()
	}
	decide(createTxn(newUUID()), true)
	for i := range 5 {
		decide(appendTxn(newUUID(), uint64(i+1)), true)
	}
	wider := &lancepb.Transaction{Uuid: newUUID(), ReadVersion: st.HeadVersion(), Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{
		Fragments: []*lancepb.DataFragment{dataFragment("w.lance", 3)},
		Schema: []*lancepb.Field{{Id: 0, Name: "a", ParentId: -1, LogicalType: "int64"}, {Id: 1, Name: "b", ParentId: -1, LogicalType: "int64"},
			{Id: 2, Name: "c", ParentId: -1, LogicalType: "string"}},
	}}}
	decide(proto.CloneOf(wider), false) // rolled back: not in the history
	wider.Uuid = newUUID()
	decide(wider, true)
	for range 3 {
		decide(appendTxn(newUUID(), st.HeadVersion()), true)
	}
	if len(st.schemas) != 2 {
		t.Errorf("%d schema changes recorded, want 2", len(st.schemas))
	}
	for v := uint64(1); v <= st.HeadVersion(); v++ {
		got, ok := st.schemaAt(v)
		if !ok || got != want[v] {
			t.Errorf("schemaAt(%d) = %p, %v; want %p", v, got, ok, want[v])
		}
	}
	if _, ok := st.schemaAt(st.HeadVersion() + 1); ok {
		t.Error("schemaAt beyond head answered")
	}
}

// TestDecisionsShareDecoders decides appends for two datasets in turn:
// each decision borrows a decoder from table's pool and gives it back,
// so the next one, of the other dataset, decodes into the same memory.
// Neither state may hold it between decisions, nor keep anything it
// decoded: each head must stay what it was when its decision returned.
func TestDecisionsShareDecoders(t *testing.T) {
	lim := Limits{MaxTxnBytes: 1 << 20, Window: 16, MaxLag: 1000}
	states := []*State{NewState("a", lim, newMemHistory()), NewState("b", lim, newMemHistory())}
	heads := make([]*lancepb.Manifest, len(states))
	seq := uint64(0)
	for round := range 50 {
		for i, st := range states {
			seq++
			txn := createTxn(newUUID())
			if round > 0 {
				txn = appendTxn(newUUID(), st.HeadVersion())
			}
			m := st.Mark()
			v := st.Decide(t.Context(), Staged{Seq: seq, Data: mustMarshal(t, txn)})
			if v.Next == nil {
				t.Fatalf("round %d, %s: not committed: %v", round, st.Dataset, v.Rec)
			}
			if st.decoder != nil {
				t.Fatalf("round %d, %s: the state holds a decoder between decisions", round, st.Dataset)
			}
			st.Commit(m, []*cellguardpb.Decision{v.Rec}, []uint64{seq})
			for j, other := range states {
				if j != i && heads[j] != nil && !proto.Equal(other.Head.Proto(), heads[j]) {
					t.Fatalf("round %d: deciding for %s changed %s's head:\n%v\nwant %v", round, st.Dataset, other.Dataset, other.Head.Proto(), heads[j])
				}
			}
			heads[i] = proto.CloneOf(st.Head.Proto())
		}
	}
}
