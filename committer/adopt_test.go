package committer

import (
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
// 3 commits version 4; then the read version 3 is no longer in the
// state's window (the state was made quiet, as the idle sweep does; its
// caches were dropped, as the cache budget does; it was loaded again, as
// after a failed batch, and made quiet), and a Delete read at 3 needs its
// manifest. It is rebuilt from the adoption record, not from a
// version 1 the log never had, and the Delete commits as version 5.
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
		t.Run(tc.name, func(t *testing.T) {
			srv := runServer(t)
			_, js := natstest.Connect(t, srv.URL())
			cfg := testConfig()
			r := start(t, srv.URL(), cfg)
			const ds = "adopted"

			id := newUUID()
			stage(t, js, ds, id, mustMarshal(t, adoptionTxn(t, id, 3)))
			decidedAs(t, js, ds, 1, id, 3)
			id = newUUID()
			stage(t, js, ds, id, mustMarshal(t, appendTxn(id, 3)))
			decidedAs(t, js, ds, 2, id, 4)

			w, unlock := workerOf(t, r.c, ds)
			tc.evict(t, w)
			if n := w.st.WindowManifests(); n != 0 {
				t.Fatalf("the window still holds %d manifests", n)
			}
			unlock()

			id = newUUID()
			stage(t, js, ds, id, mustMarshal(t, deleteFragmentTxn(id, 3, 0)))
			decidedAs(t, js, ds, 3, id, 5)
		})
	}
}
