package committer

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// TestTombstoneRejectsEverything deletes a live dataset under a running
// committer that has its state in memory: the next transaction, decided
// on the stale state, is fenced out by the tombstone and rejected with
// DATASET_DELETED; so is a creating Overwrite of the same name; and a
// restarted committer, loading the state from the log, keeps rejecting.
func TestTombstoneRejectsEverything(t *testing.T) {
	srv := runServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	ensureStreamsFor(t, js, cfg)
	r := start(t, srv.URL(), cfg)
	ds := "doomed"
	stage(t, js, ds, "c-1", mustMarshal(t, createTxn("c-1")))
	stage(t, js, ds, "a-1", mustMarshal(t, appendTxn("a-1", 1)))
	before := waitDecided(t, js, ds, 2, 30*time.Second)

	var sc subject.Scheme
	dl, err := declog.Open(t.Context(), js, sc, declog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tomb, err := dl.AppendTombstone(t.Context(), ds, before[len(before)-1].seq, 2, "test")
	if err != nil {
		t.Fatal(err)
	}

	staged := []string{"a-2", "c-2"}
	stage(t, js, ds, "a-2", mustMarshal(t, appendTxn("a-2", 2)))
	stage(t, js, ds, "c-2", mustMarshal(t, createTxn("c-2")))
	checkDeletedTail(t, js, ds, tomb, staged)

	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	r = start(t, srv.URL(), cfg)
	staged = append(staged, "a-3")
	stage(t, js, ds, "a-3", mustMarshal(t, appendTxn("a-3", 2)))
	checkDeletedTail(t, js, ds, tomb, staged)
	waitState(t, r.c, ds, DatasetDeleted)
}

// checkDeletedTail waits for a decision of every id in staged after the
// tombstone at tomb and checks each is a DATASET_DELETED rejection.
func checkDeletedTail(t *testing.T, js jetstream.JetStream, ds string, tomb uint64, staged []string) {
	t.Helper()
	var tail []logged
	deadline := time.Now().Add(60 * time.Second)
	for {
		tail = tail[:0]
		for _, e := range readLog(t, js, ds) {
			if e.seq > tomb {
				tail = append(tail, e)
			}
		}
		if len(tail) >= len(staged) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d decisions after the tombstone, want %d", len(tail), len(staged))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(tail) != len(staged) {
		t.Fatalf("%d records after the tombstone, want %d: %v", len(tail), len(staged), tail)
	}
	for i, e := range tail {
		if e.rec.TxnUuid != staged[i] || e.rec.Outcome != cellguardpb.Outcome_OUTCOME_REJECTED || e.rec.Reason != cellguardpb.Reason_DATASET_DELETED {
			t.Errorf("record %d after the tombstone: %s %s %s (%s); want %s rejected DATASET_DELETED",
				i, e.rec.TxnUuid, e.rec.Outcome, e.rec.Reason, e.rec.Message, staged[i])
		}
	}
}
