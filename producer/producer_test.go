package producer_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"cellguard/internal/declog"
	"cellguard/internal/subject"
	"cellguard/producer"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

// yTxn reads x of fragment id at snap and stages y = 2x for it.
func yTxn(t *testing.T, s *data.Store, snap *producer.Snapshot, id uint64) *producer.Txn {
	t.Helper()
	ctx := t.Context()
	txn := snap.NewTxn()
	b, err := txn.Read(ctx, s, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := snap.Manifest().Fragment(id)
	ys := make([]int64, f.PhysicalRows())
	valid := make([]bool, f.PhysicalRows())
	xs := b.Columns[0].(*array.Int64)
	for i, off := range b.Offsets {
		ys[off], valid[off] = 2*xs.Value(i), true
	}
	yb := array.NewInt64Builder(memory.DefaultAllocator)
	yb.AppendValues(ys, valid)
	file, err := s.WriteColumns(ctx, snap.Manifest().Schema(), f, map[int32]arrow.Array{1: yb.NewArray()})
	if err != nil {
		t.Fatal(err)
	}
	return txn.ReplaceColumns(id, file)
}

// overlayX commits x = v at offset off of fragment id.
func overlayX(t *testing.T, c *producer.Client, s *data.Store, id uint64, off uint32, v int64) uint64 {
	t.Helper()
	snap, err := c.Latest(t.Context(), "ds")
	if err != nil {
		t.Fatal(err)
	}
	f, _ := snap.Manifest().Fragment(id)
	ov, err := s.WriteOverlay(t.Context(), snap.Manifest().Schema(), f, map[int32]data.Cells{0: {Offsets: []uint32{off}, Values: int64s(v)}})
	if err != nil {
		t.Fatal(err)
	}
	ver, err := c.Commit(t.Context(), snap.NewTxn().Overlay(id, ov))
	if err != nil {
		t.Fatal(err)
	}
	return ver
}

// scan reads fields of fragment id at version v.
func scan(t *testing.T, c *producer.Client, s *data.Store, v, id uint64, fields ...int32) *data.Batch {
	t.Helper()
	snap, err := c.At(t.Context(), "ds", v)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.ReadFragment(t.Context(), snap.Manifest(), id, fields)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCommitRejectionNamesCellsAndCulprit(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client(t)
	s := e.store(t, "ds")
	ctx := t.Context()
	if got, want := create(t, c, s, "ds", []int64{1, 2, 3}, []int64{4, 5}), uint64(1); got != want {
		t.Fatalf("create: version %d, want %d", got, want)
	}
	snap, err := c.Latest(ctx, "ds")
	if err != nil {
		t.Fatal(err)
	}
	work0, work1 := yTxn(t, s, snap, 0), yTxn(t, s, snap, 1)
	culprit := overlayX(t, c, s, 0, 1, 20)

	_, err = c.Commit(ctx, work0)
	var rej *producer.RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("Commit(stale y) = %v, want a *RejectedError", err)
	}
	if !errors.Is(err, producer.ErrPreconditionFailed) || !errors.Is(err, producer.ErrRetryable) || !errors.Is(err, producer.ErrRejected) {
		t.Errorf("rejection %v does not match ErrPreconditionFailed, ErrRetryable and ErrRejected", err)
	}
	want := producer.Violation{Precondition: 0, FieldID: 0, FragmentID: 0, Reason: rej.Violations[0].Reason, Rows: []uint32{1}, CulpritVersion: culprit}
	got := rej.Violations[0]
	got.CulpritTxnID = ""
	if len(rej.Violations) != 1 || !slices.Equal(got.Rows, want.Rows) || got.FragmentID != want.FragmentID || got.CulpritVersion != want.CulpritVersion || got.FieldID != 0 {
		t.Errorf("violations %v, want one like %v", rej.Violations, want)
	}
	if rej.Violations[0].CulpritTxnID == "" || rej.TxnID != work0.ID() || rej.ReadVersion != 1 {
		t.Errorf("rejection %+v: want culprit txn, txn id %s, read version 1", rej, work0.ID())
	}
	// The other fragment's y did not read the changed cells: it commits.
	v, err := c.Commit(ctx, work1)
	if err != nil || v != culprit+1 {
		t.Fatalf("Commit(y of fragment 1) = %d, %v; want %d", v, err, culprit+1)
	}
	b := scan(t, c, s, v, 1, 0, 1)
	if got := b.Columns[1].(*array.Int64).Int64Values(); !slices.Equal(got, []int64{8, 10}) {
		t.Errorf("y of fragment 1 at v%d = %v, want [8 10]", v, got)
	}
}

func TestLatestAndAt(t *testing.T) {
	e := newEnv(t) // checkpoints every 5 versions
	ctx := t.Context()
	c, _ := e.client(t)
	s := e.store(t, "ds")
	if _, err := c.Latest(ctx, "ds"); !errors.Is(err, producer.ErrDatasetNotFound) {
		t.Fatalf("Latest(no dataset) = %v, want ErrDatasetNotFound", err)
	}
	create(t, c, s, "ds", []int64{0, 0, 0})
	for i := range 12 {
		overlayX(t, c, s, 0, uint32(i%3), int64(i+1))
	}
	// A second client, with a small window, reads old versions from a
	// checkpoint plus the log.
	_, nc2 := e.client(t)
	c2, err := producer.New(nc2, producer.Config{Window: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	head, err := c2.Latest(ctx, "ds")
	if err != nil || head.Version() != 13 {
		t.Fatalf("Latest = %v, %v; want version 13", head, err)
	}
	for _, tc := range []struct {
		v    uint64
		want []int64
	}{
		{1, []int64{0, 0, 0}},
		{4, []int64{1, 2, 3}},
		{6, []int64{4, 5, 3}},
		{13, []int64{10, 11, 12}},
	} {
		snap, err := c2.At(ctx, "ds", tc.v)
		if err != nil {
			t.Fatalf("At(%d): %v", tc.v, err)
		}
		b, err := s.ReadFragment(ctx, snap.Manifest(), 0, []int32{0})
		if err != nil {
			t.Fatal(err)
		}
		if got := b.Columns[0].(*array.Int64).Int64Values(); snap.Version() != tc.v || !slices.Equal(got, tc.want) {
			t.Errorf("At(%d): version %d x %v, want x %v", tc.v, snap.Version(), got, tc.want)
		}
	}
	if _, err := c2.At(ctx, "ds", 14); !errors.Is(err, producer.ErrVersionNotFound) {
		t.Errorf("At(14) = %v, want ErrVersionNotFound", err)
	}
}

// Every builder produces a transaction the committer applies, with the
// data the scan expects.
func TestTxnBuilders(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	c, _ := e.client(t)
	s := e.store(t, "ds")
	create(t, c, s, "ds", []int64{1, 2, 3, 4}, []int64{5, 6})
	commit := func(name string, build func(snap *producer.Snapshot) *producer.Txn) uint64 {
		t.Helper()
		snap, err := c.Latest(ctx, "ds")
		if err != nil {
			t.Fatal(err)
		}
		v, err := c.Commit(ctx, build(snap))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return v
	}
	col := func(snap *producer.Snapshot, id uint64, field int32, v ...int64) *lancepb.DataFile {
		f, _ := snap.Manifest().Fragment(id)
		file, err := s.WriteColumns(ctx, snap.Manifest().Schema(), f, map[int32]arrow.Array{field: int64s(v...)})
		if err != nil {
			t.Fatal(err)
		}
		return file
	}
	v := commit("append", func(snap *producer.Snapshot) *producer.Txn {
		f, err := s.WriteFragmentFor(ctx, snap.Manifest(), nil, map[int32]arrow.Array{0: int64s(7, 8)})
		if err != nil {
			t.Fatal(err)
		}
		return snap.NewTxn().Append(f)
	})
	check := func(v, id uint64, field int32, want ...int64) {
		t.Helper()
		b := scan(t, c, s, v, id, field)
		arr := b.Columns[field].(*array.Int64)
		var got []int64
		for i := range arr.Len() {
			if arr.IsNull(i) {
				got = append(got, -1)
			} else {
				got = append(got, arr.Value(i))
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("v%d fragment %d field %d = %v, want %v", v, id, field, got, want)
		}
	}
	check(v, 2, 0, 7, 8)
	v = commit("replace columns", func(snap *producer.Snapshot) *producer.Txn {
		return snap.NewTxn().ReplaceColumns(0, col(snap, 0, 1, 10, 20, 30, 40)).ReplaceColumns(1, col(snap, 1, 1, 50, 60))
	})
	check(v, 0, 1, 10, 20, 30, 40)
	check(v, 1, 1, 50, 60)
	v = commit("rewrite columns", func(snap *producer.Snapshot) *producer.Txn {
		return snap.NewTxn().RewriteColumns(1, col(snap, 1, 0, 55, 66))
	})
	check(v, 1, 0, 55, 66)
	check(v, 1, 1, 50, 60)
	v = commit("overlay", func(snap *producer.Snapshot) *producer.Txn {
		f, _ := snap.Manifest().Fragment(0)
		ov, err := s.WriteOverlay(ctx, snap.Manifest().Schema(), f, map[int32]data.Cells{1: {Offsets: []uint32{3}, Values: int64s(400)}})
		if err != nil {
			t.Fatal(err)
		}
		return snap.NewTxn().Overlay(0, ov)
	})
	check(v, 0, 1, 10, 20, 30, 400)
	v = commit("delete rows", func(snap *producer.Snapshot) *producer.Txn {
		txn := snap.NewTxn()
		if err := txn.DeleteRows(ctx, s, 0, 0, 2); err != nil {
			t.Fatal(err)
		}
		return txn
	})
	check(v, 0, 0, 2, 4)
	v = commit("update rows", func(snap *producer.Snapshot) *producer.Txn {
		del, err := s.DeleteRows(ctx, snap.Manifest(), 2, []uint32{0})
		if err != nil {
			t.Fatal(err)
		}
		moved, err := s.WriteFragmentFor(ctx, snap.Manifest(), nil, map[int32]arrow.Array{0: int64s(70)})
		if err != nil {
			t.Fatal(err)
		}
		return snap.NewTxn().UpdateRows(2, del, moved)
	})
	check(v, 2, 0, 8)
	check(v, 3, 0, 70)
	v = commit("add column", func(snap *producer.Snapshot) *producer.Txn {
		z := &lancepb.Field{Name: "z", Id: 2, ParentId: -1, LogicalType: "int64", Nullable: true}
		txn := snap.NewTxn()
		schema := append(slices.Clone(snap.Manifest().Schema().Fields()), z)
		sch, err := table.NewSchema(schema)
		if err != nil {
			t.Fatal(err)
		}
		f, _ := snap.Manifest().Fragment(1)
		file, err := s.WriteColumns(ctx, sch, f, map[int32]arrow.Array{2: int64s(-5, -6)})
		if err != nil {
			t.Fatal(err)
		}
		return txn.AddColumns([]*lancepb.Field{z}, map[uint64]*lancepb.DataFile{1: file})
	})
	check(v, 1, 2, -5, -6)
	check(v, 0, 2, -1, -1)
	v = commit("delete fragments", func(snap *producer.Snapshot) *producer.Txn {
		return snap.NewTxn().DeleteFragments(3)
	})
	if snap, _ := c.At(ctx, "ds", v); snap.Manifest().NumFragments() != 3 {
		t.Errorf("v%d has %d fragments, want 3", v, snap.Manifest().NumFragments())
	}

	// Builder misuse is reported, not staged.
	snap, _ := c.Latest(ctx, "ds")
	for name, txn := range map[string]*producer.Txn{
		"two operations":   snap.NewTxn().DeleteFragments(0).Overlay(0, nil),
		"unknown fragment": snap.NewTxn().DeleteFragments(99),
		"no operation":     snap.NewTxn(),
	} {
		if _, err := c.Commit(ctx, txn); !errors.Is(err, producer.ErrInvalidTxn) {
			t.Errorf("%s: Commit = %v, want ErrInvalidTxn", name, err)
		}
	}
}

// A client that loses its connection after staging does not learn the
// decision; a new client recovers it by uuid, and committing the same
// transaction again publishes nothing new.
func TestCrashMidCommitRecoversTrueOutcome(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	c, _ := e.client(t)
	s := e.store(t, "ds")
	create(t, c, s, "ds", []int64{1, 2}, []int64{3})
	snap, err := c.Latest(ctx, "ds")
	if err != nil {
		t.Fatal(err)
	}

	e.stop() // no decision can arrive now
	crashing, nc := e.client(t)
	txn := yTxn(t, s, snap, 0)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = crashing.Commit(cctx, txn)
	cancel()
	if !errors.Is(err, producer.ErrOutcomeUnknown) {
		t.Fatalf("Commit without a committer = %v, want ErrOutcomeUnknown", err)
	}
	nc.Close() // the worker dies

	fresh, _ := e.client(t)
	// With no committer the transaction is pending: Outcome waits for it
	// until its deadline.
	octx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = fresh.Outcome(octx, "ds", txn.ID(), 1)
	cancel()
	if !errors.Is(err, producer.ErrOutcomeUnknown) {
		t.Fatalf("Outcome(pending) = %v, want ErrOutcomeUnknown", err)
	}
	e.stop = e.startCommitter(t)
	v, err := fresh.Outcome(ctx, "ds", txn.ID(), 1)
	if err != nil || v != 2 {
		t.Fatalf("Outcome after restart = %d, %v; want version 2", v, err)
	}
	// The recovered Txn (same uuid) committed again: same answer, no second
	// decision, no second version.
	again, err := fresh.Commit(ctx, txn)
	if err != nil || again != 2 {
		t.Fatalf("Commit(same txn) = %d, %v; want 2", again, err)
	}
	if n := decisionsFor(t, fresh, "ds", txn.ID()); n != 1 {
		t.Errorf("%d decisions for %s, want 1", n, txn.ID())
	}
	head, _ := fresh.Latest(ctx, "ds")
	if head.Version() != 2 {
		t.Errorf("head %d, want 2", head.Version())
	}
	if _, err := fresh.Outcome(ctx, "ds", "never-staged", 1); !errors.Is(err, producer.ErrNotStaged) {
		t.Errorf("Outcome(never staged) = %v, want ErrNotStaged", err)
	}
}

// A Commit that times out waiting reports ErrOutcomeUnknown; committing
// the same Txn again once a committer runs returns the one decision.
func TestCommitTimeoutThenRecommit(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	c, _ := e.client(t)
	s := e.store(t, "ds")
	create(t, c, s, "ds", []int64{1})
	snap, _ := c.Latest(ctx, "ds")
	e.stop()
	txn := yTxn(t, s, snap, 0)
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err := c.Commit(cctx, txn)
	cancel()
	if !errors.Is(err, producer.ErrOutcomeUnknown) {
		t.Fatalf("Commit = %v, want ErrOutcomeUnknown", err)
	}
	e.stop = e.startCommitter(t)
	v, err := c.Commit(ctx, txn)
	if err != nil || v != 2 {
		t.Fatalf("Commit again = %d, %v; want 2", v, err)
	}
	if n := decisionsFor(t, c, "ds", txn.ID()); n != 1 {
		t.Errorf("%d decisions, want 1", n)
	}
}

func TestRetryWithRecompute(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	c, _ := e.client(t)
	s := e.store(t, "ds")
	create(t, c, s, "ds", []int64{1, 2})

	// The first computation is overtaken by an update of x; the retry
	// reads the new x.
	attempts, retries := 0, 0
	v, err := c.RetryWithRecompute(ctx, "ds", func(ctx context.Context, snap *producer.Snapshot) (*producer.Txn, error) {
		attempts++
		txn := yTxn(t, s, snap, 0)
		if attempts == 1 {
			overlayX(t, c, s, 0, 0, 100)
		}
		return txn, nil
	}, producer.OnRetry(func(attempt int, err error) {
		retries++
		if !errors.Is(err, producer.ErrPreconditionFailed) {
			t.Errorf("retry after %v, want a precondition failure", err)
		}
	}), producer.Backoff(time.Millisecond, 10*time.Millisecond))
	if err != nil || attempts != 2 || retries != 1 || v != 3 {
		t.Fatalf("RetryWithRecompute = %d, %v after %d attempts, %d retries; want version 3 after 2, 1", v, err, attempts, retries)
	}
	if got := scan(t, c, s, v, 0, 1).Columns[1].(*array.Int64).Int64Values(); !slices.Equal(got, []int64{200, 4}) {
		t.Errorf("y = %v, want [200 4]", got)
	}

	// A rejection that recomputing cannot fix ends it at once.
	attempts = 0
	_, err = c.RetryWithRecompute(ctx, "ds", func(ctx context.Context, snap *producer.Snapshot) (*producer.Txn, error) {
		attempts++
		return snap.NewTxn().ReplaceColumns(0, &lancepb.DataFile{Path: "x.arrow", Fields: []int32{7}, FileMajorVersion: 2, FileMinorVersion: 1}), nil
	})
	var rej *producer.RejectedError
	if !errors.As(err, &rej) || errors.Is(err, producer.ErrRetryable) || attempts != 1 {
		t.Errorf("RetryWithRecompute(invalid) = %v after %d attempts, want one non-retryable rejection", err, attempts)
	}
	if rej != nil && rej.Reason != cellguardpb.Reason_INVALID_TRANSACTION {
		t.Errorf("reason %v, want INVALID_TRANSACTION", rej.Reason)
	}

	// Bounded attempts.
	attempts = 0
	_, err = c.RetryWithRecompute(ctx, "ds", func(ctx context.Context, snap *producer.Snapshot) (*producer.Txn, error) {
		attempts++
		txn := yTxn(t, s, snap, 0)
		overlayX(t, c, s, 0, 1, int64(attempts))
		return txn, nil
	}, producer.MaxAttempts(3), producer.Backoff(time.Millisecond, time.Millisecond))
	if !errors.Is(err, producer.ErrPreconditionFailed) || attempts != 3 {
		t.Errorf("RetryWithRecompute(always stale) = %v after %d attempts, want a precondition failure after 3", err, attempts)
	}
	if _, err := c.RetryWithRecompute(ctx, "ds", nil, producer.MaxAttempts(0)); !errors.Is(err, producer.ErrInvalidOption) {
		t.Errorf("MaxAttempts(0): %v, want ErrInvalidOption", err)
	}
}

// decisionsFor counts the log records of txn id.
func decisionsFor(t *testing.T, c *producer.Client, ds, id string) int {
	t.Helper()
	sc, err := subject.NewScheme(c.Prefix())
	if err != nil {
		t.Fatal(err)
	}
	dl, err := declog.Open(t.Context(), c.JetStream(), sc, declog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for r, err := range dl.Scan(t.Context(), sc.DecOf(ds), 1, declog.ScanOptions{HeadersOnly: true}) {
		if err != nil {
			t.Fatal(err)
		}
		if r.TxnID == id {
			n++
		}
	}
	return n
}

// TestStorageVersion: a creating transaction names its table's storage
// version; the committer's creation (declog.Create) gives an empty table
// that version and refuses files of another; bad uses are errors.
func TestStorageVersion(t *testing.T) {
	fields := []*lancepb.Field{{Id: 0, Name: "id", LogicalType: "int64", Type: lancepb.Field_LEAF}}
	pb, err := producer.Create("ds", fields).StorageVersion("2.2").Proto()
	if err != nil {
		t.Fatal(err)
	}
	m, err := declog.Create(pb)
	if err != nil || m.DataFormat().GetVersion() != "2.2" {
		t.Fatalf("created %v, %v; want storage version 2.2", m, err)
	}
	frag := &lancepb.DataFragment{PhysicalRows: 1, Files: []*lancepb.DataFile{{Path: "a.lance", Fields: []int32{0}, ColumnIndices: []int32{0}, FileMajorVersion: 2, FileMinorVersion: 1}}}
	pb, err = producer.Create("ds", fields, frag).StorageVersion("2.2").Proto()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := declog.Create(pb); !errors.Is(err, table.ErrInvalidTransaction) {
		t.Errorf("2.1 files in a 2.2 creation: %v, want ErrInvalidTransaction", err)
	}
	if _, err := producer.Create("ds", fields).StorageVersion("3.0").Proto(); err == nil {
		t.Error(`StorageVersion("3.0") accepted`)
	}
}
