package producer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"cellguard/committer"
	"cellguard/internal/natstest"
	"cellguard/proto/lancepb"
)

// TestLatestNeverOlderThanTold: once a client has been told of a decision
// (a Commit's result), Latest does not return a version older than it,
// even when the log it reads does not hold that decision yet — it waits,
// bounded by ctx, and says so. Here the client is told of a decision
// further on than the log; a leader cut off from its quorum reads so.
func TestLatestNeverOlderThanTold(t *testing.T) {
	srv := natstest.RunServer(t)
	nc, _ := natstest.Connect(t, srv.URL())
	cm, err := committer.New(nc, committer.Config{TakeoverOnStart: true, DiscoverEvery: 20 * time.Millisecond, DatasetRoot: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cm.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for !cm.Ready() {
		time.Sleep(5 * time.Millisecond)
	}

	cnc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer cnc.Close()
	c, err := New(cnc, Config{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	schema := []*lancepb.Field{{Id: 0, Name: "x", ParentId: -1, LogicalType: "int64"}}
	if v, err := c.Commit(ctx, Create("told", schema)); err != nil || v != 1 {
		t.Fatalf("create: %d, %v", v, err)
	}
	snap, err := c.Latest(ctx, "told")
	if err != nil || snap.Version() != 1 {
		t.Fatalf("latest: %v, %v", snap, err)
	}
	if c.knownSeq("told") == 0 {
		t.Fatal("Commit's decision was not recorded")
	}

	c.learned("told", c.knownSeq("told")+1000)
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	if snap, err := c.Latest(short, "told"); err == nil {
		t.Fatalf("Latest returned version %d, older than a decision the client was told of", snap.Version())
	} else if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Latest: %v; want it to wait until ctx ends", err)
	}
}
