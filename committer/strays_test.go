package committer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// publishRaw publishes body on a literal subject, as a careless or
// hostile publisher could.
func publishRaw(t *testing.T, js jetstream.JetStream, subj, id string, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, subj, body, jetstream.WithMsgID(id)); err != nil {
		t.Fatalf("publish on %q: %v", subj, err)
	}
}

// waitTxnEmpty waits until CG_TXN holds no message: everything staged
// was decided and removed.
func waitTxnEmpty(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	var sc subject.Scheme
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := js.Stream(ctx, sc.TxnStream())
		var n uint64
		if err == nil {
			n = s.CachedInfo().State.Msgs
		}
		cancel()
		if err == nil && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CG_TXN still holds %d messages (err %v)", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkStrays checks that the reserved log rejected the stray messages
// ids, naming their subjects.
func checkStrays(t *testing.T, js jetstream.JetStream, want map[string]string) {
	t.Helper()
	l := waitDecided(t, js, subject.StrayDataset, len(want), 30*time.Second)
	if len(l) != len(want) {
		t.Fatalf("%d stray decisions, want %d", len(l), len(want))
	}
	for _, e := range l {
		subj, ok := want[e.rec.TxnUuid]
		if !ok {
			t.Errorf("stray decision for unknown txn %q", e.rec.TxnUuid)
			continue
		}
		if e.rec.Outcome != cellguardpb.Outcome_OUTCOME_REJECTED || e.rec.Reason != cellguardpb.Reason_INVALID_DATASET_NAME {
			t.Errorf("stray %s: %v %v, want rejected INVALID_DATASET_NAME", subj, e.rec.Outcome, e.rec.Reason)
		}
		if !strings.Contains(e.rec.Message, `"`+subj+`"`) || !strings.Contains(e.rec.Message, "wildcard") {
			t.Errorf("stray %s: message %q does not name the subject and the problem", subj, e.rec.Message)
		}
	}
}

// TestWildcardSubjectsWhileServing: messages published on the literal
// subjects cg.txn.* and cg.txn.> while a dataset is served get a rejection
// each on the reserved log and leave the stream; the dataset keeps
// deciding.
func TestWildcardSubjectsWhileServing(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	start(t, srv.URL(), testConfig())
	create := newUUID()
	stage(t, js, "a", create, mustMarshal(t, createTxn(create)))
	waitDecided(t, js, "a", 1, 10*time.Second)

	want := map[string]string{}
	for _, subj := range []string{"cg.txn.*", "cg.txn.>", "cg.txn.*"} {
		id := newUUID()
		want[id] = subj
		publishRaw(t, js, subj, id, mustMarshal(t, appendTxn(id, 1)))
	}
	garbage := "garbage-" + newUUID()
	want[garbage] = "cg.txn.>"
	publishRaw(t, js, "cg.txn.>", garbage, []byte("not a transaction"))
	next := newUUID()
	stage(t, js, "a", next, mustMarshal(t, appendTxn(next, 1)))

	l := waitDecided(t, js, "a", 2, 30*time.Second)
	if l[1].rec.TxnUuid != next || l[1].rec.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED {
		t.Errorf("dataset a after the strays: %v, want %s committed", l[1].rec, next)
	}
	checkStrays(t, js, want)
	waitTxnEmpty(t, js)
}

// TestWildcardSubjectsFirst: on a fresh server, wildcard messages staged
// before any dataset (and a wildcard consumer an older version left) take
// no dataset's traffic; two committers sweep them once.
func TestWildcardSubjectsFirst(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	ensureStreamsFor(t, js, cfg)
	want := map[string]string{}
	for _, subj := range []string{"cg.txn.>", "cg.txn.*"} {
		id := newUUID()
		want[id] = subj
		publishRaw(t, js, subj, id, mustMarshal(t, createTxn(id)))
	}
	var sc subject.Scheme
	txn, err := js.Stream(t.Context(), sc.TxnStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := txn.CreateConsumer(t.Context(), jetstream.ConsumerConfig{
		Durable: sc.Consumer("*"), FilterSubject: sc.TxnAll(), AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	start(t, srv.URL(), cfg)
	start(t, srv.URL(), cfg)
	for _, ds := range []string{"a", "b"} {
		id := newUUID()
		stage(t, js, ds, id, mustMarshal(t, createTxn(id)))
	}
	for _, ds := range []string{"a", "b"} {
		l := waitDecided(t, js, ds, 1, 30*time.Second)
		if l[0].rec.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED {
			t.Errorf("%s: %v, want committed", ds, l[0].rec)
		}
	}
	checkStrays(t, js, want)
	waitTxnEmpty(t, js)
}
