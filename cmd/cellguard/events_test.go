package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"

	"cellguard/committer"
	"cellguard/internal/demo"
	"cellguard/internal/natstest"
	"cellguard/producer"
	"cellguard/table"
	"cellguard/table/data"
)

// tailBuffer is a bytes.Buffer safe for one writer and one reader.
type tailBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *tailBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *tailBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// `cellguard events tail` prints committed versions with what they
// changed and rejections with their violations.
func TestEventsTail(t *testing.T) {
	srv := natstest.RunServer(t)
	cnc, _ := natstest.Connect(t, srv.URL())
	cm, err := committer.New(cnc, committer.Config{DiscoverEvery: 20 * time.Millisecond, Logger: tailLogger()})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cm.Run(cctx) }()
	t.Cleanup(func() { stop(); <-done })
	for !cm.Ready() {
		time.Sleep(5 * time.Millisecond)
	}

	// Version 1, then a y computed at 1 goes stale when x changes (v2).
	nc, _ := natstest.Connect(t, srv.URL())
	pc, err := producer.New(nc, producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx := t.Context()
	store, err := data.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	schema := demoSchemaT(t)
	frag, err := store.WriteFragment(ctx, schema, map[int32]arrow.Array{demo.FieldX: demo.Int64Array([]int64{1, 2, 3}, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Commit(ctx, producer.Create("tailme", demo.Fields, frag)); err != nil {
		t.Fatal(err)
	}
	snap, _ := pc.Latest(ctx, "tailme")
	work := snap.NewTxn()
	if _, err := work.Read(ctx, store, 0, demo.FieldX); err != nil {
		t.Fatal(err)
	}
	f0, _ := snap.Manifest().Fragment(0)
	y, _ := store.WriteColumns(ctx, schema, f0, map[int32]arrow.Array{demo.FieldY: demo.Int64Array([]int64{10, 13, 16}, nil)})
	ov, _ := store.WriteOverlay(ctx, schema, f0, map[int32]data.Cells{demo.FieldX: {Offsets: []uint32{1}, Values: demo.Int64Array([]int64{20}, nil)}})
	if _, err := pc.Commit(ctx, snap.NewTxn().Overlay(0, ov)); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Commit(ctx, work.ReplaceColumns(0, y)); err == nil {
		t.Fatal("stale y committed")
	}

	var out, errOut tailBuffer
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan error, 1)
	go func() {
		ran <- run(tctx, []string{"events", "tail", "--nats-url", srv.URL(), "--from", "1", "tailme"}, &out, &errOut)
	}()
	want := []string{"v1 ", "Overwrite", "+3 rows", "v2 ", "DataOverlay", "fields [0]", "REJECTED PRECONDITION_FAILED", "field 0 fragment 0 rows [1]", "at version 2 by"}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if containsAllOf(out.String(), want) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("events tail: %v (stderr %s)", err, errOut.String())
	}
	if !containsAllOf(out.String(), want) {
		t.Errorf("events tail printed:\n%s\nwant all of %q", out.String(), want)
	}
	t.Logf("\n%s", out.String())
}

func containsAllOf(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func tailLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func demoSchemaT(t *testing.T) *table.Schema {
	t.Helper()
	s, err := table.NewSchema(demo.Fields)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
