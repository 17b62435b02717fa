package committer

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"cellguard/internal/declog"
	"cellguard/internal/natstest"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// staleLog is a dataset of lag+3 versions: v1 creates fragment 0, v2
// appends fragment 1, v3 deletes fragment 1, then lag appends.
type staleLog struct {
	st      *state
	h       *countingHistory
	delUUID string
	recs    []*cellguardpb.Decision // recs[v-1] committed version v
}

func buildStaleLog(t *testing.T, lag int, lim limits) *staleLog {
	t.Helper()
	l := &staleLog{h: newCountingHistory(), delUUID: newUUID()}
	l.st = newState("stale", lim, l.h)
	txns := []*lancepb.Transaction{createTxn(newUUID()), appendTxn(newUUID(), 1), deleteFragmentTxn(l.delUUID, 2, 1)}
	for i := range lag {
		txns = append(txns, appendTxn(newUUID(), uint64(3+i)))
	}
	for i, v := range decideAll(t, l.st, &l.h.MemHistory, txns...) {
		if v.Rec.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED {
			t.Fatalf("building the log: txn %d: %v", i, v.Rec)
		}
		l.recs = append(l.recs, v.Rec)
	}
	return l
}

// decideOne decides and commits one transaction at the next staging
// sequence.
func decideOne(t *testing.T, st *state, txn *lancepb.Transaction) *cellguardpb.Decision {
	t.Helper()
	seq := st.LastTxnSeq + 1
	m := st.Mark()
	v := st.Decide(t.Context(), staged{Seq: seq, Data: mustMarshal(t, txn)})
	if v.Skip || v.Broken != nil {
		t.Fatalf("decide: skip=%v broken=%v", v.Skip, v.Broken)
	}
	st.Commit(m, []*cellguardpb.Decision{v.Rec}, []uint64{seq})
	return v.Rec
}

func staleLimits() limits {
	return limits{MaxTxnBytes: 1 << 20, Window: 16, MaxLag: 100000, MaxRebaseLag: 1000, IndexBytes: 8 << 20}
}

// TestStaleReadDoesNotReplayTheLag is the regression test for a stale
// read stalling its dataset: a PRECONDITION_FAILED transaction 5,000
// versions behind head is decided, with its culprit named, without
// reading a single old manifest or transaction; the valid transaction
// staged right behind it commits next.
func TestStaleReadDoesNotReplayTheLag(t *testing.T) {
	l := buildStaleLog(t, 5000, staleLimits())
	st, h := l.st, l.h
	head := st.HeadVersion()
	h.Reset()
	rec := decideOne(t, st, staleTxn())
	if rec.Reason != cellguardpb.Reason_PRECONDITION_FAILED {
		t.Fatalf("stale txn: %v, want PRECONDITION_FAILED", rec)
	}
	if len(rec.Violations) != 1 || rec.Violations[0].CulpritVersion != 3 || rec.Violations[0].CulpritTxnUuid != l.delUUID {
		t.Errorf("violations %v, want culprit version 3 (%s)", rec.Violations, l.delUUID)
	}
	if h.ManifestReads != 0 || h.CommittedReads != 0 {
		t.Errorf("stale decision read %d old manifests and %d old transactions, want 0 and 0", h.ManifestReads, h.CommittedReads)
	}
	ok := decideOne(t, st, appendTxn(newUUID(), head))
	if ok.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED || ok.Version != head+1 {
		t.Errorf("valid txn behind the stale one: %v", ok)
	}
	if h.ManifestReads != 0 || h.CommittedReads != 0 {
		t.Errorf("reads after the valid txn: %d manifests, %d transactions, want 0", h.ManifestReads, h.CommittedReads)
	}
}

// TestStaleReadAfterRestart rebuilds the state as a starting committer
// does, from a checkpoint and the log after it: the change index then
// starts at the checkpoint, and a transaction read before it is still
// rejected, with one manifest pinned and no transaction replayed.
func TestStaleReadAfterRestart(t *testing.T) {
	l := buildStaleLog(t, 5000, staleLimits())
	const checkpoint = 4000
	h := l.h
	st := newState("stale", staleLimits(), h)
	st.SetBase(h.Manifests[checkpoint])
	for _, r := range l.recs[checkpoint:] {
		rec := declog.Record{Seq: r.Version, Dataset: "stale", Outcome: r.Outcome, TxnID: r.TxnUuid, TxnSeq: r.TxnSeq, Version: r.Version, Decision: r}
		if err := st.Advance(t.Context(), rec); err != nil {
			t.Fatal(err)
		}
	}
	if st.HeadVersion() != l.st.HeadVersion() || st.ChangeIndex.Horizon() != checkpoint {
		t.Fatalf("restarted state: head %d, index horizon %d", st.HeadVersion(), st.ChangeIndex.Horizon())
	}
	h.Reset()
	rec := decideOne(t, st, staleTxn())
	if rec.Reason != cellguardpb.Reason_PRECONDITION_FAILED {
		t.Fatalf("stale txn after restart: %v, want PRECONDITION_FAILED", rec)
	}
	if !strings.Contains(rec.Message, "culprit not identified") || rec.Violations[0].CulpritVersion != 0 {
		t.Errorf("culprit before the index: %q %v, want 'culprit not identified'", rec.Message, rec.Violations)
	}
	if h.ManifestReads > 1 || h.CommittedReads != 0 {
		t.Errorf("stale decision after restart read %d manifests, %d transactions; want ≤ 1 and 0", h.ManifestReads, h.CommittedReads)
	}
}

// TestStaleAcceptedReadTooOld: a transaction whose preconditions hold but
// which read further behind head than the committer rebases is rejected
// READ_VERSION_TOO_OLD (retryable) without reading the versions between.
func TestStaleAcceptedReadTooOld(t *testing.T) {
	l := buildStaleLog(t, 5000, staleLimits())
	st, h := l.st, l.h
	for name, txn := range map[string]*lancepb.Transaction{
		"precondition holds": withPre(appendTxn(newUUID(), 2), cellsUnchanged([]int32{1}, wholeFragment(0))),
		"no precondition":    appendTxn(newUUID(), 2),
	} {
		h.Reset()
		rec := decideOne(t, st, txn)
		if rec.Reason != cellguardpb.Reason_READ_VERSION_TOO_OLD || !strings.Contains(rec.Message, "rebases at most 1000") {
			t.Errorf("%s: %v, want READ_VERSION_TOO_OLD (rebase bound)", name, rec)
		}
		if h.ManifestReads != 0 || h.CommittedReads != 0 {
			t.Errorf("%s: read %d manifests, %d transactions; want 0", name, h.ManifestReads, h.CommittedReads)
		}
	}
	// Within the bound it lands (reading the transactions since from
	// older history, beyond the window).
	rec := decideOne(t, st, withPre(appendTxn(newUUID(), st.HeadVersion()-500), cellsUnchanged([]int32{1}, wholeFragment(0))))
	if rec.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED {
		t.Errorf("lag 500: %v, want committed", rec)
	}
}

// TestStaleReadEndToEnd stages a stale PRECONDITION_FAILED transaction
// 5,000 versions behind head, then a valid one, on a running committer,
// then does the same after a restart (state rebuilt from a checkpoint):
// both times the stale one is rejected and the valid one committed right
// after it, and deciding the stale one read a handful of log records, not
// the 5,000 versions in between.
func TestStaleReadEndToEnd(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	cfg.BatchSize = 256
	r := start(t, srv.URL(), cfg)
	ds := "lagging"
	create, del := newUUID(), newUUID()
	stage(t, js, ds, create, mustMarshal(t, createTxn(create)))
	stageAppends(t, js, ds, 1, 1)
	stage(t, js, ds, del, mustMarshal(t, deleteFragmentTxn(del, 2, 1)))
	const lag = 5000
	stageAppends(t, js, ds, 3, lag)
	head := uint64(3 + lag)
	waitVersion(t, js, ds, head)
	for round, name := range []string{"running", "restarted"} {
		if round == 1 {
			if err := r.stop(t); err != nil {
				t.Fatal(err)
			}
			r = start(t, srv.URL(), cfg)
		}
		loads0, reads0 := historyWork(r.c, ds)
		stale := staleTxn()
		stage(t, js, ds, stale.Uuid, mustMarshal(t, stale))
		stageAppends(t, js, ds, head, 1)
		head++
		waitVersion(t, js, ds, head)
		l := readLog(t, js, ds)
		got := l[len(l)-2].rec
		if got.TxnUuid != stale.Uuid || got.Reason != cellguardpb.Reason_PRECONDITION_FAILED {
			t.Fatalf("%s: decision before the valid one: %v, want the stale txn PRECONDITION_FAILED", name, got)
		}
		loads, reads := historyWork(r.c, ds)
		if loads, reads := loads-loads0, reads-reads0; loads > 1 || reads > float64(2*cfg.CheckpointEvery) {
			t.Errorf("%s: deciding the stale txn rebuilt %v manifests from %v log records; want ≤ 1 from ≤ %d", name, loads, reads, 2*cfg.CheckpointEvery)
		}
	}
}

// historyWork returns the manifests rebuilt and log records read by
// ds's worker so far.
func historyWork(c *Committer, ds string) (loads, reads float64) {
	return testutil.ToFloat64(c.metrics.historyLoads.WithLabelValues(ds)), testutil.ToFloat64(c.metrics.historyReads.WithLabelValues(ds))
}

// TestCulpritRightAfterAForgottenHorizon: a change index that forgot
// everything up to the head (a tiny budget: fragments heavy with
// overlays do this) still names the culprit of a transaction read one
// version before it, the only version in between; its uuid comes from
// the committer's own history, not "culprit not identified" although the
// culprit is certain.
func TestCulpritRightAfterAForgottenHorizon(t *testing.T) {
	lim := staleLimits()
	lim.IndexBytes = 1
	l := buildStaleLog(t, 0, lim)
	if h := l.st.ChangeIndex.Horizon(); h != 3 {
		t.Fatalf("horizon %d, want 3 (the head)", h)
	}
	rec := decideOne(t, l.st, staleTxn())
	if rec.Reason != cellguardpb.Reason_PRECONDITION_FAILED {
		t.Fatalf("stale txn: %v, want PRECONDITION_FAILED", rec)
	}
	if len(rec.Violations) != 1 || rec.Violations[0].CulpritVersion != 3 || rec.Violations[0].CulpritTxnUuid != l.delUUID {
		t.Errorf("violations %v, want culprit version 3 (%s)", rec.Violations, l.delUUID)
	}
}
