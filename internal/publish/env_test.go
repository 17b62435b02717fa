package publish_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"cellguard/committer"
	"cellguard/internal/declog"
	"cellguard/internal/natstest"
	"cellguard/internal/publish"
	"cellguard/internal/subject"
	"cellguard/lancefile"
	"cellguard/producer"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

func testLogger() *slog.Logger {
	if os.Getenv("CG_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// env is an embedded NATS server with a running committer, a producer
// client and the decision log.
type env struct {
	srv *natstest.Server
	pc  *producer.Client
	log *declog.Log

	stopCommitter func()
}

func newEnv(t *testing.T, cfg committer.Config) *env {
	t.Helper()
	e := &env{srv: natstest.RunServer(t)}
	e.startCommitter(t, cfg)
	pnc, _ := natstest.Connect(t, e.srv.URL())
	var err error
	if e.pc, err = producer.New(pnc, producer.Config{Timeout: 60 * time.Second}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pc.Close)
	_, js := natstest.Connect(t, e.srv.URL())
	sc, _ := subject.NewScheme("")
	if e.log, err = declog.Open(context.Background(), js, sc, declog.Options{RequestTimeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	return e
}

// startCommitter runs a committer until the test ends or
// restartCommitter stops it.
func (e *env) startCommitter(t *testing.T, cfg committer.Config) {
	t.Helper()
	nc, _ := natstest.Connect(t, e.srv.URL())
	cfg.Logger, cfg.DiscoverEvery, cfg.TakeoverOnStart = testLogger(), 20*time.Millisecond, true
	cm, err := committer.New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cm.Run(ctx) }()
	var once sync.Once
	e.stopCommitter = func() {
		once.Do(func() {
			cancel()
			<-done
			nc.Close()
		})
	}
	t.Cleanup(e.stopCommitter)
	waitFor(t, "committer ready", cm.Ready)
}

// restartCommitter stops the committer and starts a new one, which loads
// every dataset from the log.
func (e *env) restartCommitter(t *testing.T, cfg committer.Config) {
	t.Helper()
	e.stopCommitter()
	e.startCommitter(t, cfg)
}

// runManager runs a publish.Manager until the test ends.
func (e *env) runManager(t *testing.T) *publish.Manager {
	t.Helper()
	met, err := publish.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	m := publish.NewManager(e.log, publish.ManagerOptions{Logger: testLogger(), Metrics: met, DiscoverEvery: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return m
}

// waitPublished waits until ds's publisher has published version v.
func waitPublished(t *testing.T, m *publish.Manager, ds string, v uint64) {
	t.Helper()
	waitFor(t, "publish", func() bool {
		p, ok := m.Publisher(ds)
		return ok && p != nil && p.Published() >= v
	})
}

// waitFor polls cond with a generous deadline (the machine is shared).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *env) commit(t *testing.T, txn *producer.Txn) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v, err := e.pc.Commit(ctx, txn)
	if err != nil {
		t.Fatalf("commit %s: %v", txn, err)
	}
	return v
}

func (e *env) latest(t *testing.T, ds string) *producer.Snapshot {
	t.Helper()
	s, err := e.pc.Latest(context.Background(), ds)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// configProperty encodes cfg for a creating transaction.
func withConfig(t *testing.T, txn *producer.Txn, cfg *cellguardpb.DatasetConfig) *producer.Txn {
	t.Helper()
	pb := &lancepb.Transaction{}
	if err := declog.SetConfig(pb, cfg); err != nil {
		t.Fatal(err)
	}
	return txn.SetProperty(declog.ConfigProperty, pb.TransactionProperties[declog.ConfigProperty])
}

// writeLance writes rec as a Lance data file under root/data and returns
// its DataFile; fieldIDs are the schema field ids of rec's columns. The
// file has the data storage version of the table's latest version at root
// (2.2 for a table LanceDB 0.39 created), 2.1 when root holds none yet.
func writeLance(t *testing.T, root string, rec arrow.Record, fieldIDs []int32) *lancepb.DataFile {
	t.Helper()
	var buf bytes.Buffer
	w, err := lancefile.NewWriter(&buf, rec.Schema(), fieldIDs, lancefile.WriterOptions{Version: tableFileVersion(t, root)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	fi, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	name := newName() + ".lance"
	if err := os.MkdirAll(filepath.Join(root, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "data", name), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return fi.DataFile(name)
}

// tableFileVersion is the file version of new data files for the latest
// version of the table at root (data.FileVersion), 2.1 if it has none.
func tableFileVersion(t *testing.T, root string) lancefile.Version {
	t.Helper()
	ctx := t.Context()
	loc, err := publish.OpenLocation(ctx, root, true)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	v, err := publish.LatestVersion(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	if v == 0 {
		return lancefile.V2_1
	}
	b, err := os.ReadFile(filepath.Join(root, "_versions", table.ManifestFileName(v, true)))
	if err != nil {
		t.Fatal(err)
	}
	f, err := table.ReadManifestFile(b)
	if err != nil {
		t.Fatal(err)
	}
	m, err := table.FromProto(f.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	fv, err := data.FileVersion(m)
	if err != nil {
		t.Fatalf("write a data file for version %d of %s: %v", v, root, err)
	}
	return fv
}

func newName() string { return strings.ReplaceAll(uuid.NewString(), "-", "") }

// Arrow builders.

func int64Col(vals []int64) arrow.Array {
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	b.AppendValues(vals, nil)
	return b.NewArray()
}

func float64Col(vals []float64) arrow.Array {
	b := array.NewFloat64Builder(memory.DefaultAllocator)
	defer b.Release()
	b.AppendValues(vals, nil)
	return b.NewArray()
}

func vecCol(vals [][]float32, dim int32) arrow.Array {
	b := array.NewFixedSizeListBuilder(memory.DefaultAllocator, dim, arrow.PrimitiveTypes.Float32)
	defer b.Release()
	vb := b.ValueBuilder().(*array.Float32Builder)
	for _, v := range vals {
		b.Append(true)
		vb.AppendValues(v, nil)
	}
	return b.NewArray()
}

func record(fields []arrow.Field, cols ...arrow.Array) arrow.Record {
	return array.NewRecord(arrow.NewSchema(fields, nil), cols, int64(cols[0].Len()))
}
