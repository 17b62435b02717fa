package events_test

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats.go"

	"cellguard/committer"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/producer"
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

// env is an embedded server with a committer, a producer client and a
// store for dataset "ds".
type env struct {
	srv   *natstest.Server
	c     *producer.Client
	store *data.Store
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{srv: natstest.RunServer(t)}
	nc, _ := natstest.Connect(t, e.srv.URL())
	cm, err := committer.New(nc, committer.Config{Logger: testLogger(), DiscoverEvery: 20 * time.Millisecond, TakeoverOnStart: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cm.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	for !cm.Ready() {
		time.Sleep(5 * time.Millisecond)
	}
	pnc, _ := natstest.Connect(t, e.srv.URL())
	if e.c, err = producer.New(pnc, producer.Config{Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.c.Close)
	if e.store, err = data.Open(context.Background(), "mem://"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.store.Close() })
	return e
}

func (e *env) conn(t *testing.T) *nats.Conn {
	t.Helper()
	nc, _ := natstest.Connect(t, e.srv.URL())
	return nc
}

var fields = []*lancepb.Field{
	{Name: "x", Id: 0, ParentId: -1, LogicalType: "int64"},
	{Name: "y", Id: 1, ParentId: -1, LogicalType: "int64", Nullable: true},
}

func int64s(v ...int64) arrow.Array {
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	b.AppendValues(v, nil)
	return b.NewArray()
}

// create makes dataset ds with one fragment per slice of x values.
func (e *env) create(t *testing.T, ds string, frags ...[]int64) {
	t.Helper()
	schema, err := table.NewSchema(fields)
	if err != nil {
		t.Fatal(err)
	}
	var fs []*lancepb.DataFragment
	for _, xs := range frags {
		f, err := e.store.WriteFragment(t.Context(), schema, map[int32]arrow.Array{0: int64s(xs...)})
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	if _, err := e.c.Commit(t.Context(), producer.Create(ds, fields, fs...)); err != nil {
		t.Fatal(err)
	}
}

// overlay commits x = v at offset off of fragment id.
func (e *env) overlay(t *testing.T, ds string, id uint64, off uint32, v int64) uint64 {
	t.Helper()
	snap, err := e.c.Latest(t.Context(), ds)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := snap.Manifest().Fragment(id)
	ov, err := e.store.WriteOverlay(t.Context(), snap.Manifest().Schema(), f, map[int32]data.Cells{0: {Offsets: []uint32{off}, Values: int64s(v)}})
	if err != nil {
		t.Fatal(err)
	}
	ver, err := e.c.Commit(t.Context(), snap.NewTxn().Overlay(id, ov))
	if err != nil {
		t.Fatal(err)
	}
	return ver
}

// staleY stages a y column for fragment id read at version read, after x
// changed: it is rejected.
func (e *env) staleY(t *testing.T, ds string, read uint64, id uint64) *producer.RejectedError {
	t.Helper()
	snap, err := e.c.At(t.Context(), ds, read)
	if err != nil {
		t.Fatal(err)
	}
	txn := snap.NewTxn()
	if _, err := txn.Read(t.Context(), e.store, id, 0); err != nil {
		t.Fatal(err)
	}
	f, _ := snap.Manifest().Fragment(id)
	ys := make([]int64, f.PhysicalRows())
	file, err := e.store.WriteColumns(t.Context(), snap.Manifest().Schema(), f, map[int32]arrow.Array{1: int64s(ys...)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.c.Commit(t.Context(), txn.ReplaceColumns(id, file))
	rej, ok := err.(*producer.RejectedError)
	if !ok {
		t.Fatalf("stale y: %v, want a rejection", err)
	}
	return rej
}

// waitConsumer waits until the decision stream has the durable consumer
// name (a rejection queue set up by its first worker).
func (e *env) waitConsumer(t *testing.T, name string) {
	t.Helper()
	_, js := natstest.Connect(t, e.srv.URL())
	var sc subject.Scheme
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := js.Consumer(ctx, sc.DecStream(), name)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer %s not created: %v", name, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
