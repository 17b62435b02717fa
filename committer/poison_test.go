package committer

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"cellguard/internal/declog"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// countingHandler counts log records by message, for asserting what a
// committer said (and how often) without timing anything.
type countingHandler struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countingHandler) WithGroup(string) slog.Handler            { return h }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.n {
		if strings.HasPrefix(r.Message, k) {
			h.n[k]++
		}
	}
	return nil
}

func (h *countingHandler) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[prefix]
}

// poisonRig is a server with two datasets created and decided, "poison"
// and "healthy", and no committer running.
type poisonRig struct {
	url string
	js  jetstream.JetStream
	cfg Config
}

func newPoisonRig(t *testing.T) *poisonRig {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	rig := &poisonRig{url: srv.URL(), js: js, cfg: testConfig()}
	r := start(t, rig.url, rig.cfg)
	for _, ds := range []string{"poison", "healthy"} {
		id := newUUID()
		stage(t, js, ds, id, mustMarshal(t, createTxn(id)))
		waitDecided(t, js, ds, 1, 20*time.Second)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	return rig
}

// forge publishes msg on the decision log, as someone with write access
// to cg.dec.> could.
func (rig *poisonRig) forge(t *testing.T, msg *nats.Msg) {
	t.Helper()
	if _, err := rig.js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
}

// check starts a committer over the poisoned log, stages one append on
// each dataset, and checks that the healthy one is decided while the
// poisoned one is stopped, loudly and once, with its message still staged
// and undecided. forged is the uuid of a forged record that parses ("":
// the log cannot be read back in full).
func (rig *poisonRig) check(t *testing.T, stageFirst bool, forged string) {
	t.Helper()
	var sc subject.Scheme
	stagePoison := func() uint64 {
		id := newUUID()
		ack, err := rig.js.Publish(t.Context(), sc.Txn("poison"), mustMarshal(t, appendTxn(id, 1)), jetstream.WithMsgID(id))
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	var poisonSeq uint64
	if stageFirst {
		poisonSeq = stagePoison()
	}
	logs := &countingHandler{n: map[string]int{"dataset stopped": 0, "dataset worker failed": 0}}
	reg := prometheus.NewRegistry()
	cfg := rig.cfg
	cfg.Logger, cfg.Registerer = slog.New(logs), reg
	r := start(t, rig.url, cfg)
	if !stageFirst {
		poisonSeq = stagePoison()
	}
	ok := newUUID()
	stage(t, rig.js, "healthy", ok, mustMarshal(t, appendTxn(ok, 1)))
	if l := waitDecided(t, rig.js, "healthy", 2, 20*time.Second); l[1].rec.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED {
		t.Errorf("healthy dataset: %v", l[1].rec)
	}
	deadline := time.Now().Add(20 * time.Second)
	var st DatasetStatus
	for {
		for _, s := range r.c.DatasetStatuses() {
			if s.Dataset == "poison" {
				st = s
			}
		}
		if st.State == DatasetStopped || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.State != DatasetStopped || st.Reason != reasonUntrustedLog || st.Detail == "" {
		t.Fatalf("poisoned dataset status %+v, want stopped (%s) with detail", st, reasonUntrustedLog)
	}
	if g := testutil.ToFloat64(r.c.metrics.stopped.WithLabelValues("poison", reasonUntrustedLog)); g != 1 {
		t.Errorf("stopped gauge = %v, want 1", g)
	}
	// Let the healthy dataset decide once more: the poisoned worker is
	// parked, not restarting, and its staged message was never acked.
	ok2 := newUUID()
	stage(t, rig.js, "healthy", ok2, mustMarshal(t, appendTxn(ok2, 2)))
	waitDecided(t, rig.js, "healthy", 3, 20*time.Second)
	if n := logs.count("dataset stopped"); n != 1 {
		t.Errorf("%d 'dataset stopped' logs, want 1", n)
	}
	if n := logs.count("dataset worker failed"); n != 0 {
		t.Errorf("%d worker restarts, want 0", n)
	}
	txn, err := rig.js.Stream(t.Context(), sc.TxnStream())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := txn.GetMsg(t.Context(), poisonSeq); err != nil {
		t.Errorf("the poisoned dataset's staged message %d is gone (acked without a decision?): %v", poisonSeq, err)
	}
	if forged == "" {
		return
	}
	for _, e := range readLog(t, rig.js, "poison") {
		if e.rec.TxnSeq == poisonSeq && e.rec.TxnUuid != forged {
			t.Errorf("the poisoned dataset decided message %d: %v", poisonSeq, e.rec)
		}
	}
}

// TestGarbageDecisionRecordStopsOnlyItsDataset is a regression test for a
// garbage record on cg.dec.<ds>.committed making the dataset's worker
// fail on every restart.
func TestGarbageDecisionRecordStopsOnlyItsDataset(t *testing.T) {
	rig := newPoisonRig(t)
	var sc subject.Scheme
	rig.forge(t, &nats.Msg{Subject: sc.Dec("poison", subject.Committed), Data: []byte("\x00 not a decision"), Header: nats.Header{}})
	rig.check(t, false, "")
}

// TestForgedTxnSeqStopsOnlyItsDataset is a regression test for a forged
// committed record with a huge Cg-Txn-Seq: every later staged transaction
// was acked and deleted with no decision.
func TestForgedTxnSeqStopsOnlyItsDataset(t *testing.T) {
	rig := newPoisonRig(t)
	m, id := forgedRecord(t, 1<<40)
	rig.forge(t, m)
	rig.check(t, false, id)
}

// TestForgedTxnSeqOfAStagedMessage: a forged record claims the staging
// sequence of a message that is staged and undecided. The sequence is
// plausible, so loading succeeds, but the message is not acked: the
// committer sees it has no decision for it and stops the dataset.
func TestForgedTxnSeqOfAStagedMessage(t *testing.T) {
	rig := newPoisonRig(t)
	var sc subject.Scheme
	txn, err := rig.js.Stream(t.Context(), sc.TxnStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := txn.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// check stages the poisoned dataset's message first: it gets the
	// next sequence, which the forged record claims.
	m, id := forgedRecord(t, info.State.LastSeq+1)
	rig.forge(t, m)
	rig.check(t, true, id)
}

// forgedRecord is a well-formed committed record of version 2 of
// "poison" claiming staging sequence txnSeq.
func forgedRecord(t *testing.T, txnSeq uint64) (*nats.Msg, string) {
	t.Helper()
	var sc subject.Scheme
	id := newUUID()
	m, err := declog.Message(sc, &cellguardpb.Decision{
		Dataset: "poison", TxnUuid: id, TxnSeq: txnSeq, Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED,
		Version: 2, ReadVersion: 1, HeadVersion: 1, Transaction: mustMarshal(t, appendTxn(id, 1)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, id
}

// TestFailedWorkerStatus: an ordinary failure is reported as retrying,
// drops the state and holds the dataset's messages back for a growing
// pause; it does not stop the dataset.
func TestFailedWorkerStatus(t *testing.T) {
	w := newWorker(&Committer{log: testLogger()}, "flaky")
	boom := errors.New("stream info: timeout")
	for i := range 3 {
		before := time.Now()
		if err := w.failed(t.Context(), boom, nil); err != nil {
			t.Fatalf("failed returned %v, want nil (handled)", err)
		}
		if s := w.status.Load(); s == nil || s.State != DatasetRetrying || s.Reason != reasonFailed || !strings.Contains(s.Detail, "timeout") {
			t.Errorf("status %+v, want retrying with the error", s)
		}
		if want := before.Add(workerRestart.Delay(i)); w.retryAt.Before(want) || w.stopped {
			t.Errorf("failure %d: retry at %v (stopped %v), want ≥ %v", i, w.retryAt, w.stopped, want)
		}
	}
}
