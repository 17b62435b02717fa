package publish_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"cellguard/committer"
	"cellguard/internal/publish"
	"cellguard/internal/retry"
	"cellguard/producer"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

var plainFields = []*lancepb.Field{{Name: "id", Id: 0, ParentId: -1, LogicalType: "int64"}}

// frag is a fragment naming a data file; these tests never read data.
func frag(rows uint64) *lancepb.DataFragment {
	return &lancepb.DataFragment{PhysicalRows: rows, Files: []*lancepb.DataFile{{
		Path: newName() + ".lance", Fields: []int32{0}, ColumnIndices: []int32{0}, FileMajorVersion: 2, FileMinorVersion: 1,
	}}}
}

// running is a publisher run in the background.
type running struct {
	p      *publish.Publisher
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func (e *env) startPublisher(t *testing.T, ds, dir string, met *publish.Metrics) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cfg, err := e.log.Config(ctx, ds)
	if err != nil {
		t.Fatal(err)
	}
	loc, err := publish.OpenLocation(ctx, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { loc.Close() })
	p := publish.NewPublisher(e.log, ds, cfg, loc, publish.PublisherOptions{
		Logger: testLogger(), Metrics: met, Backoff: retry.Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond},
	})
	r := &running{p: p, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *running) stop() {
	r.once.Do(func() {
		r.cancel()
		<-r.done
	})
}

func (e *env) createPublished(t *testing.T, ds, dir string) {
	t.Helper()
	e.commit(t, withConfig(t, producer.Create(ds, plainFields, frag(3)), &cellguardpb.DatasetConfig{Location: dir}))
}

func (e *env) appendOne(t *testing.T, ds string) uint64 {
	t.Helper()
	return e.commit(t, e.latest(t, ds).NewTxn().Append(frag(2)))
}

func manifestBytes(t *testing.T, dir string, v uint64) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "_versions", table.ManifestFileName(v, true)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPublishResumesIdempotently: a restarted publisher resumes at the
// newest version in storage that is ours without rewriting anything, and
// a version whose manifest never landed (a crash after the transaction
// file) is published again.
func TestPublishResumesIdempotently(t *testing.T) {
	e := newEnv(t, committer.Config{})
	dir := filepath.Join(t.TempDir(), "t.lance")
	e.createPublished(t, "t", dir)
	e.appendOne(t, "t")
	head := e.appendOne(t, "t")
	r := e.startPublisher(t, "t", dir, nil)
	waitFor(t, "publish", func() bool { return r.p.Published() == head })
	r.stop()
	v2 := manifestBytes(t, dir, 2)
	if err := os.Remove(filepath.Join(dir, "_versions", table.ManifestFileName(head, true))); err != nil {
		t.Fatal(err)
	}

	r = e.startPublisher(t, "t", dir, nil)
	waitFor(t, "republish", func() bool { return r.p.Published() == head })
	if got := manifestBytes(t, dir, 2); string(got) != string(v2) {
		t.Error("version 2 was rewritten on restart")
	}
	f, err := table.ReadManifestFile(manifestBytes(t, dir, head))
	if err != nil {
		t.Fatal(err)
	}
	if f.Manifest.GetVersion() != head || f.Transaction == nil || f.Manifest.GetTransactionFile() == "" {
		t.Errorf("republished manifest: version %d, transaction %v, file %q", f.Manifest.GetVersion(), f.Transaction, f.Manifest.GetTransactionFile())
	}
	if _, err := os.Stat(filepath.Join(dir, "_transactions", f.Manifest.GetTransactionFile())); err != nil {
		t.Error(err)
	}
	next := e.appendOne(t, "t")
	waitFor(t, "follow", func() bool { return r.p.Published() == next })
}

// TestPublishSurvivesStoreOutage: while the store refuses writes,
// decisions keep committing; once it is back, every version is published,
// in order, and the failures were counted.
func TestPublishSurvivesStoreOutage(t *testing.T) {
	e := newEnv(t, committer.Config{})
	dir := filepath.Join(t.TempDir(), "t.lance")
	e.createPublished(t, "t", dir)
	// A file where the _versions directory belongs: every manifest write
	// fails, even for root.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	blocker := filepath.Join(dir, "_versions")
	if err := os.WriteFile(blocker, []byte("down"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	met, err := publish.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := e.startPublisher(t, "t", dir, met)
	var head uint64
	for range 3 {
		head = e.appendOne(t, "t") // the committer does not wait for the store
	}
	waitFor(t, "failures counted", func() bool {
		return testutil.ToFloat64(met.Failures("t")) >= 2 && testutil.ToFloat64(met.Lag("t")) == float64(head)
	})
	if r.p.Published() != 0 {
		t.Fatalf("published %d with the store down", r.p.Published())
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "catch up", func() bool { return r.p.Published() == head })
	for v := uint64(1); v <= head; v++ {
		f, err := table.ReadManifestFile(manifestBytes(t, dir, v))
		if err != nil || f.Manifest.GetVersion() != v {
			t.Fatalf("version %d: %v", v, err)
		}
	}
	waitFor(t, "lag 0", func() bool { return testutil.ToFloat64(met.Lag("t")) == 0 })
}

// TestPublishStopsAtForeignVersion: a version in storage that the log did
// not commit (a LanceDB writer committing straight to storage) is never
// overwritten; publishing stops with ErrForeignVersion and says so in the
// metrics, while the committer keeps deciding.
func TestPublishStopsAtForeignVersion(t *testing.T) {
	e := newEnv(t, committer.Config{})
	dir := filepath.Join(t.TempDir(), "t.lance")
	e.createPublished(t, "t", dir)
	reg := prometheus.NewRegistry()
	met, err := publish.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r := e.startPublisher(t, "t", dir, met)
	waitFor(t, "publish", func() bool { return r.p.Published() == 1 })

	// A foreign writer commits version 2 first.
	f, err := table.ReadManifestFile(manifestBytes(t, dir, 1))
	if err != nil {
		t.Fatal(err)
	}
	f.Manifest.Version = 2
	f.Transaction = &lancepb.Transaction{ReadVersion: 1, Uuid: "0b9e3c1e-1111-4222-8333-444455556666",
		Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{}}}
	foreign, err := table.WriteManifestFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "_versions", table.ManifestFileName(2, true)), foreign, 0o644); err != nil {
		t.Fatal(err)
	}
	e.appendOne(t, "t")
	select {
	case err := <-r.done:
		r.done <- err // for cleanup
		if !errors.Is(err, publish.ErrForeignVersion) {
			t.Fatalf("publisher ended with %v, want ErrForeignVersion", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("publisher did not stop at the foreign version")
	}
	if got := manifestBytes(t, dir, 2); string(got) != string(foreign) {
		t.Error("the foreign version was overwritten")
	}
	if testutil.ToFloat64(met.Stopped("t")) != 1 {
		t.Error("stopped metric not set")
	}
	e.appendOne(t, "t") // decisions keep flowing

	// A restarted publisher refuses too: its newest version is foreign.
	r2 := e.startPublisher(t, "t", dir, nil)
	if err := <-r2.done; !errors.Is(err, publish.ErrForeignVersion) {
		t.Fatalf("restarted publisher: %v, want ErrForeignVersion", err)
	}
	r2.done <- nil
}

// TestLocationErrors: bad locations give ErrLocation; a manifest that does
// not decode gives table.ErrMalformed.
func TestLocationErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := publish.OpenLocation(ctx, filepath.Join(t.TempDir(), "missing"), false); !errors.Is(err, publish.ErrLocation) {
		t.Errorf("missing directory: %v, want ErrLocation", err)
	}
	if _, err := publish.OpenLocation(ctx, "nosuchscheme://x/y", false); !errors.Is(err, publish.ErrLocation) {
		t.Errorf("unknown scheme: %v, want ErrLocation", err)
	}
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := publish.OpenLocation(ctx, file, true); !errors.Is(err, publish.ErrLocation) {
		t.Errorf("a file as location: %v, want ErrLocation", err)
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "_versions"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "_versions", table.ManifestFileName(1, true)), []byte("not a manifest at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	loc, err := publish.OpenLocation(ctx, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	if _, err := publish.ReadVersion(ctx, loc, 1); !errors.Is(err, table.ErrMalformed) {
		t.Errorf("undecodable manifest: %v, want table.ErrMalformed", err)
	}
}
