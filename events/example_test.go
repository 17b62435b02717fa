package events_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"cellguard/committer"
	"cellguard/events"
	"cellguard/internal/natstest"
	"cellguard/producer"
	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

// A subscriber replays a dataset's versions from the first one, then
// follows new ones; each says what it changed.
func ExampleSubscriber_Run() {
	ctx := context.Background()
	nc, stop := embeddedCommitter()
	defer stop()
	c, store := exampleDataset(ctx, nc) // version 1: 2 fragments of x

	// Version 2: x changes in fragment 1.
	snap, _ := c.Latest(ctx, "orders")
	f1, _ := snap.Manifest().Fragment(1)
	ov, _ := store.WriteOverlay(ctx, snap.Manifest().Schema(), f1, map[int32]data.Cells{0: {Offsets: []uint32{0}, Values: int64s(40)}})
	if _, err := c.Commit(ctx, snap.NewTxn().Overlay(1, ov)); err != nil {
		log.Fatal(err)
	}

	sub, err := events.NewSubscriber(nc, events.Config{Dataset: "orders", From: 1})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = sub.Run(ctx, func(ctx context.Context, v *events.Committed) error {
		fmt.Printf("v%d %s: %s; x written in fragments %v\n", v.Version, v.Op, v.Summary, v.Summary.FragmentsWriting(0))
		if v.Version == 2 { // history replayed: delete a row, live
			snap, _ := c.Latest(ctx, "orders")
			txn := snap.NewTxn()
			if err := txn.DeleteRows(ctx, store, 0, 1); err != nil {
				return err
			}
			if _, err := c.Commit(ctx, txn); err != nil {
				return err
			}
		}
		if v.Version == 3 {
			cancel()
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// v1 Overwrite: +2 fragment(s), fields [0], +5 rows, schema changed; x written in fragments [0 1]
	// v2 DataOverlay: ~1 fragment(s) [1], fields [0]; x written in fragments [1]
	// v3 Delete: ~1 fragment(s) [0], -1 rows; x written in fragments []
}

// A pool of recompute workers shares one rejection queue: each rejected
// transaction goes to one of them, with the cells that changed.
func ExampleRejections_Run() {
	ctx := context.Background()
	nc, stop := embeddedCommitter()
	defer stop()
	c, store := exampleDataset(ctx, nc)

	// A worker computes y for fragment 0 at version 1, but x changes first.
	snap, _ := c.Latest(ctx, "orders")
	work := snap.NewTxn()
	if _, err := work.Read(ctx, store, 0, 0); err != nil {
		log.Fatal(err)
	}
	f0, _ := snap.Manifest().Fragment(0)
	y, _ := store.WriteColumns(ctx, snap.Manifest().Schema(), f0, map[int32]arrow.Array{1: int64s(2, 4, 6)})
	ov, _ := store.WriteOverlay(ctx, snap.Manifest().Schema(), f0, map[int32]data.Cells{0: {Offsets: []uint32{2}, Values: int64s(30)}})
	if _, err := c.Commit(ctx, snap.NewTxn().Overlay(0, ov)); err != nil {
		log.Fatal(err)
	}
	if err := c.Stage(ctx, work.ReplaceColumns(0, y)); err != nil {
		log.Fatal(err)
	}

	q, err := events.NewRejections(nc, events.RejectionsConfig{Dataset: "orders", Queue: "recompute", FromStart: true})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = q.Run(ctx, func(ctx context.Context, r *events.Rejected) error {
		fmt.Println(r.Err.Reason, "read at", r.Err.ReadVersion, "recompute fragments", r.Err.Fragments())
		for _, v := range r.Err.Violations {
			fmt.Printf("field %d fragment %d rows %v changed at version %d\n", v.FieldID, v.FragmentID, v.Rows, v.CulpritVersion)
		}
		cancel()
		return nil // acknowledged: no other worker gets it
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// PRECONDITION_FAILED read at 1 recompute fragments [0]
	// field 0 fragment 0 rows [2] changed at version 2
}

// exampleDataset creates "orders" (x, y) with fragments [1 2 3] and [4 5].
func exampleDataset(ctx context.Context, nc *nats.Conn) (*producer.Client, *data.Store) {
	c, err := producer.New(nc, producer.Config{})
	if err != nil {
		log.Fatal(err)
	}
	store, err := data.Open(ctx, "mem://")
	if err != nil {
		log.Fatal(err)
	}
	schema, _ := table.NewSchema(fields)
	var frags []*lancepb.DataFragment
	for _, xs := range [][]int64{{1, 2, 3}, {4, 5}} {
		f, err := store.WriteFragment(ctx, schema, map[int32]arrow.Array{0: int64s(xs...)})
		if err != nil {
			log.Fatal(err)
		}
		frags = append(frags, f)
	}
	if _, err := c.Commit(ctx, producer.Create("orders", fields, frags...)); err != nil {
		log.Fatal(err)
	}
	return c, store
}

// embeddedCommitter starts an in-process JetStream server and a
// committer, and returns a connection to the server.
func embeddedCommitter() (*nats.Conn, func()) {
	dir, err := os.MkdirTemp("", "cellguard-example-")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := server.NewServer(natstest.Options(dir))
	if err != nil {
		log.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		log.Fatal("server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	cm, err := committer.New(nc, committer.Config{Logger: testLogger(), DiscoverEvery: 20 * time.Millisecond})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cm.Run(ctx) }()
	for !cm.Ready() {
		time.Sleep(5 * time.Millisecond)
	}
	return nc, func() {
		cancel()
		<-done
		nc.Close()
		srv.Shutdown()
		srv.WaitForShutdown()
		os.RemoveAll(dir)
	}
}
