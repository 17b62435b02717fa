package committer

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/natstest"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// adoptionTxn stages the adoption of a Lance table at version v: one
// fragment (id 0) of 50 rows.
func adoptionTxn(t *testing.T, id string, v uint64) *lancepb.Transaction {
	t.Helper()
	zero := uint32(0)
	m := &lancepb.Manifest{Fields: testSchema, Fragments: []*lancepb.DataFragment{dataFragment("data/adopted.lance", 50)}, Version: v, MaxFragmentId: &zero}
	txn := &lancepb.Transaction{Uuid: id, Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{Schema: testSchema}}}
	if err := declog.SetConfig(txn, &cellguardpb.DatasetConfig{Location: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if err := declog.SetAdoption(txn, m, nil); err != nil {
		t.Fatal(err)
	}
	return txn
}

// workerOf returns the worker of ds, holding its lock: the batch in hand
// is over, and no other starts until unlock is called.
func workerOf(t *testing.T, c *Committer, ds string) (w *worker, unlock func()) {
	t.Helper()
	c.mu.Lock()
	w = c.workers[ds]
	c.mu.Unlock()
	if w == nil {
		t.Fatalf("no worker for %s", ds)
	}
	w.mu.Lock()
	return w, w.mu.Unlock
}

// decidedAs waits for the n-th decision of ds and checks that it
// committed id as version v.
func decidedAs(t *testing.T, js jetstream.JetStream, ds string, n int, id string, v uint64) {
	t.Helper()
	l := waitDecided(t, js, ds, n, 30*time.Second)
	got := l[n-1].rec
	if got.TxnUuid != id || got.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED || got.Version != v {
		t.Fatalf("decision %d: %s %s %s v%d (%s), want %s committed as version %d",
			n, got.TxnUuid, got.Outcome, got.Reason, got.Version, got.Message, id, v)
	}
}

// TestAdoptedDatasetPinsVersionOutOfWindow: a dataset adopted at version
// N (3, or 1) commits version N+1; then the read version N is no longer
// in the state's window (the state was made quiet, as the idle sweep
// does; its caches were dropped, as the cache budget does; it was loaded
// again, as after a failed batch, and made quiet), and a Delete read at N
// needs its manifest. It is rebuilt from the adoption record (the adopted
// fragment), neither from a version 1 the log never had nor as a creation
// of none, and the Delete commits as version N+2.
func TestAdoptedDatasetPinsVersionOutOfWindow(t *testing.T) {
	for _, tc := range []struct {
		name  string
		evict func(t *testing.T, w *worker)
	}{
		{"quiet", func(t *testing.T, w *worker) { w.st.Quiet() }},
		{"cachesDropped", func(t *testing.T, w *worker) { w.st.DropCaches() }},
		{"reloadedQuiet", func(t *testing.T, w *worker) {
			w.dropState()
			if err := w.load(t.Context()); err != nil {
				t.Fatal(err)
			}
			w.st.Quiet()
		}},
	} {
		for _, at := range []uint64{3, 1} { // 1: LanceDB created the table and never wrote again
			t.Run(fmt.Sprintf("%s/at%d", tc.name, at), func(t *testing.T) {
				srv := runServer(t)
				_, js := natstest.Connect(t, srv.URL())
				r := start(t, srv.URL(), testConfig())
				const ds = "adopted"

				id := newUUID()
				stage(t, js, ds, id, mustMarshal(t, adoptionTxn(t, id, at)))
				decidedAs(t, js, ds, 1, id, at)
				id = newUUID()
				stage(t, js, ds, id, mustMarshal(t, appendTxn(id, at)))
				decidedAs(t, js, ds, 2, id, at+1)

				w, unlock := workerOf(t, r.c, ds)
				tc.evict(t, w)
				if n := w.st.WindowManifests(); n != 0 {
					t.Fatalf("the window still holds %d manifests", n)
				}
				// Rebuilt from the adoption record: the adopted fragment,
				// not a creation of none.
				if m, err := w.st.Older.Manifest(t.Context(), at); err != nil || m.NumFragments() != 1 {
					t.Errorf("version %d from the history: %v, want the adopted fragment", at, err)
				}
				unlock()

				id = newUUID()
				stage(t, js, ds, id, mustMarshal(t, deleteFragmentTxn(id, at, 0)))
				decidedAs(t, js, ds, 3, id, at+2)
			})
		}
	}
}

// TestProvisionalAdoptionPackedDecidesAlike: a batch that adopts a table
// is packed while it appends only when the adoption is all it decided
// (PackCreated), and either way a Delete decided into the next batch on
// top, read at the adopted version, commits: nothing the next batch may
// read was dropped while provisional.
func TestProvisionalAdoptionPackedDecidesAlike(t *testing.T) {
	lim := limits{MaxTxnBytes: 1 << 20, Window: 8, MaxLag: 1000, MaxRebaseLag: 40}
	for _, withAppend := range []bool{false, true} {
		st := newState("adopted", lim, nil)
		st.Older = &logHistory{c: &Committer{cps: map[string][]uint64{}}, st: st, maxReplay: 20}
		batch := [][]byte{mustMarshal(t, adoptionTxn(t, newUUID(), 3))}
		if withAppend {
			batch = append(batch, mustMarshal(t, appendTxn(newUUID(), 3)))
		}
		for i, b := range batch {
			if v := st.Decide(t.Context(), staged{Seq: uint64(i + 1), Data: b}); v.Rec.GetOutcome() != cellguardpb.Outcome_OUTCOME_COMMITTED {
				t.Fatal(v.Rec)
			}
		}
		if packed := st.PackCreated(); packed == withAppend {
			t.Errorf("with an append %t: packed %t", withAppend, packed)
		}
		v := st.Decide(t.Context(), staged{Seq: uint64(len(batch) + 1), Data: mustMarshal(t, deleteFragmentTxn(newUUID(), 3, 0))})
		if v.Rec.GetOutcome() != cellguardpb.Outcome_OUTCOME_COMMITTED {
			t.Errorf("with an append %t: a Delete read at 3 was %s (%s)", withAppend, v.Rec.GetReason(), v.Rec.GetMessage())
		}
	}
}
