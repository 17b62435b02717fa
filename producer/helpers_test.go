package producer_test

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
	"cellguard/producer"
	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

// env is an embedded server with a committer and a dataset root.
type env struct {
	srv  *natstest.Server
	root string
	stop func()
}

func testLogger() *slog.Logger {
	if os.Getenv("CG_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func committerConfig(root string) committer.Config {
	return committer.Config{
		Logger:          testLogger(),
		AckWait:         2 * time.Second,
		PinnedTTL:       3 * time.Second,
		PullExpiry:      time.Second,
		DiscoverEvery:   20 * time.Millisecond,
		TakeoverOnStart: true,
		CheckpointEvery: 5,
		DatasetRoot:     root,
	}
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{srv: natstest.RunServer(t), root: t.TempDir()}
	e.stop = e.startCommitter(t)
	t.Cleanup(func() { e.stop() })
	return e
}

// startCommitter runs a committer until the returned func is called.
func (e *env) startCommitter(t *testing.T) func() {
	t.Helper()
	nc, err := nats.Connect(e.srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	c, err := committer.New(nc, committerConfig(e.root))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	for !c.Ready() {
		select {
		case err := <-done:
			t.Fatalf("committer: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	stopped := false
	return func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("committer: %v", err)
		}
		nc.Close()
	}
}

func (e *env) client(t *testing.T) (*producer.Client, *nats.Conn) {
	t.Helper()
	nc, _ := natstest.Connect(t, e.srv.URL())
	c, err := producer.New(nc, producer.Config{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, nc
}

func (e *env) store(t *testing.T, ds string) *data.Store {
	t.Helper()
	s, err := data.Open(context.Background(), e.root+"/"+ds)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
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

// create makes dataset ds with fragments of x values.
func create(t *testing.T, c *producer.Client, s *data.Store, ds string, frags ...[]int64) uint64 {
	t.Helper()
	ctx := t.Context()
	schema, err := table.NewSchema(fields)
	if err != nil {
		t.Fatal(err)
	}
	var fs []*lancepb.DataFragment
	for _, xs := range frags {
		f, err := s.WriteFragment(ctx, schema, map[int32]arrow.Array{0: int64s(xs...)})
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	v, err := c.Commit(ctx, producer.Create(ds, fields, fs...))
	if err != nil {
		t.Fatalf("create %s: %v", ds, err)
	}
	return v
}
