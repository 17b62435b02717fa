package committer

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"cellguard/evaluator"
	"cellguard/internal/declog"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// TestBrokenStateDecidesNothing: when the committed state itself does not
// read (here a checkpoint whose manifest holds an overlay with a garbage
// coverage bitmap, which Evaluate reports as ErrMalformedManifest), the
// transaction being decided is not to blame. Its dataset's worker must
// log the failure as an error and reload, again and again, without writing
// any decision for the transaction; other datasets keep deciding. Once the
// state reads again, the same staged transaction is decided normally.
func TestBrokenStateDecidesNothing(t *testing.T) {
	srv := runServer(t)
	cfg := testConfig()
	_, js := natstest.Connect(t, srv.ClientURL())
	r1 := start(t, srv.ClientURL(), cfg)
	create, grow := newUUID(), newUUID()
	stage(t, js, "bad", create, mustMarshal(t, createTxn(create)))
	stage(t, js, "bad", grow, mustMarshal(t, appendTxn(grow, 1)))
	l := waitDecided(t, js, "bad", 2, 30*time.Second)
	v2 := checkLog(t, l, []string{create, grow})
	if err := r1.stop(t); err != nil {
		t.Fatal(err)
	}

	// Replace the checkpoint of bad@2 by one whose manifest gives the
	// created fragment an overlay that cannot be read. It passes the trust
	// rule: it names bad@2 and the log's committed record of version 2.
	dl, err := declog.Open(t.Context(), js, subject.Scheme{}, declog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	first := firstFragment(t, v2)
	genuine := declog.Checkpoint{Dataset: "bad", Manifest: v2, DecSeq: l[1].seq, TxnSeq: l[1].rec.TxnSeq}
	broken := genuine
	broken.Manifest = withGarbageOverlay(t, v2, first)
	if err := dl.WriteCheckpoint(t.Context(), broken); err != nil {
		t.Fatal(err)
	}

	failures := &brokenStateLog{}
	cfg.Logger = slog.New(failures)
	start(t, srv.ClientURL(), cfg)
	// Read at version 1, protecting the created fragment's field 1: the
	// evaluation compares it at version 1 (rebuilt from the log) with the
	// broken head.
	guarded := newUUID()
	txn := appendTxn(guarded, 1)
	txn.Preconditions = []*lancepb.Precondition{evaluator.CellsUnchanged(evaluator.WholeFragments(first), 1).Proto()}
	stage(t, js, "bad", guarded, mustMarshal(t, txn))
	goodCreate, goodAppend := newUUID(), newUUID()
	stage(t, js, "good", goodCreate, mustMarshal(t, createTxn(goodCreate)))
	stage(t, js, "good", goodAppend, mustMarshal(t, appendTxn(goodAppend, 1)))

	checkLog(t, waitDecided(t, js, "good", 2, 30*time.Second), []string{goodCreate, goodAppend})
	waitFor(t, "two failed attempts on the broken state", func() bool { return failures.n.Load() >= 2 })
	// No hot loop: every restart waits, and the waits grow.
	if p := failures.restartPauses(); p[0] < workerRestart.Initial || p[1] <= p[0] {
		t.Errorf("restart pauses on the broken state %v: want at least %v, growing", p, workerRestart.Initial)
	}
	if got := readLog(t, js, "bad"); len(got) != 2 {
		t.Fatalf("bad has %d decisions while its state is broken, want 2 (none for %s): last %v", len(got), guarded, got[len(got)-1].rec)
	}

	// Repair the checkpoint: the worker's next reload reads the genuine
	// state and decides the transaction it kept staged.
	if err := dl.WriteCheckpoint(t.Context(), genuine); err != nil {
		t.Fatal(err)
	}
	l = waitDecided(t, js, "bad", 3, 60*time.Second)
	checkLog(t, l, []string{create, grow, guarded})
	if d := l[2].rec; d.TxnUuid != guarded || d.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED || d.Version != 3 {
		t.Errorf("after repair: decision %v, want %s committed at version 3", d, guarded)
	}
}

// firstFragment returns the id of m's first fragment.
func firstFragment(t *testing.T, m *table.Manifest) uint64 {
	t.Helper()
	for f := range m.Fragments() {
		return f.ID()
	}
	t.Fatal("manifest has no fragment")
	return 0
}

// withGarbageOverlay returns m with an overlay of field 1 on fragment id
// whose coverage bitmap does not decode.
func withGarbageOverlay(t *testing.T, m *table.Manifest, id uint64) *table.Manifest {
	t.Helper()
	pb := proto.CloneOf(m.Proto())
	for _, f := range pb.Fragments {
		if f.GetId() == id {
			f.Overlays = append(f.Overlays, &lancepb.DataOverlayFile{
				DataFile:         &lancepb.DataFile{Path: "data/overlay.lance", Fields: []int32{1}, ColumnIndices: []int32{0}, FileMajorVersion: 2},
				Coverage:         &lancepb.DataOverlayFile_SharedOffsetBitmap{SharedOffsetBitmap: []byte("not a bitmap")},
				CommittedVersion: m.Version(),
			})
		}
	}
	out, err := table.FromProto(pb)
	if err != nil {
		t.Fatalf("broken manifest does not load: %v", err)
	}
	return out
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// brokenStateLog counts error-level log records whose error is
// errBrokenState, and keeps the restart pauses they announce.
type brokenStateLog struct {
	n      atomic.Int64
	mu     sync.Mutex
	pauses []time.Duration
}

func (h *brokenStateLog) restartPauses() []time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.pauses)
}

func (h *brokenStateLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *brokenStateLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelError {
		return nil
	}
	broken, pause := false, time.Duration(-1)
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && errors.Is(err, errBrokenState) {
			broken = true
		}
		if a.Key == "pause" {
			pause = a.Value.Duration()
		}
		return true
	})
	if broken {
		h.mu.Lock()
		h.pauses = append(h.pauses, pause)
		h.mu.Unlock()
		h.n.Add(1)
	}
	return nil
}

func (h *brokenStateLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *brokenStateLog) WithGroup(string) slog.Handler      { return h }
