package producer_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"cellguard/committer"
	"cellguard/internal/natstest"
	"cellguard/producer"
	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

// A worker reads x at the latest version, publishes y = 2x for fragment 0
// with a precondition on the x cells it read, and commits. An update of x
// that lands first makes the committer reject the stale y, naming the
// changed cells and the culprit; the worker recomputes.
func ExampleClient_Commit() {
	ctx := context.Background()
	nc, stop := embeddedCommitter()
	defer stop()

	c, err := producer.New(nc, producer.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	store, err := data.Open(ctx, "mem://")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	// Version 1: one fragment of x; y reads as null.
	fields := []*lancepb.Field{
		{Name: "x", Id: 0, ParentId: -1, LogicalType: "int64"},
		{Name: "y", Id: 1, ParentId: -1, LogicalType: "int64", Nullable: true},
	}
	snap0 := mustCreate(ctx, c, store, "orders", fields, 1, 2, 3, 4)

	// A worker reads x at version 1 and computes y = 2x …
	work := snap0.NewTxn()
	b, err := work.Read(ctx, store, 0, 0) // protects x of the rows read
	if err != nil {
		log.Fatal(err)
	}
	frag, _ := snap0.Manifest().Fragment(0)
	yFile, err := store.WriteColumns(ctx, snap0.Manifest().Schema(), frag, map[int32]arrow.Array{1: double(b.Columns[0])})
	if err != nil {
		log.Fatal(err)
	}
	work.ReplaceColumns(0, yFile)

	// … while an updater sets x = 30 at offset 2 (version 2).
	ov, err := store.WriteOverlay(ctx, snap0.Manifest().Schema(), frag, map[int32]data.Cells{0: {Offsets: []uint32{2}, Values: int64s(30)}})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Commit(ctx, snap0.NewTxn().Overlay(0, ov)); err != nil {
		log.Fatal(err)
	}

	// The worker's y was computed from a stale x: rejected.
	_, err = c.Commit(ctx, work)
	var rej *producer.RejectedError
	if errors.As(err, &rej) {
		fmt.Println("rejected:", rej.Reason, "retryable:", errors.Is(err, producer.ErrRetryable))
		v := rej.Violations[0]
		fmt.Printf("field %d fragment %d rows %v changed at version %d\n", v.FieldID, v.FragmentID, v.Rows, v.CulpritVersion)
	}

	// Recompute from the latest version and commit again.
	v, err := c.RetryWithRecompute(ctx, "orders", func(ctx context.Context, snap *producer.Snapshot) (*producer.Txn, error) {
		txn := snap.NewTxn()
		b, err := txn.Read(ctx, store, 0, 0)
		if err != nil {
			return nil, err
		}
		f, _ := snap.Manifest().Fragment(0)
		file, err := store.WriteColumns(ctx, snap.Manifest().Schema(), f, map[int32]arrow.Array{1: double(b.Columns[0])})
		if err != nil {
			return nil, err
		}
		return txn.ReplaceColumns(0, file), nil
	})
	if err != nil {
		log.Fatal(err)
	}
	head, _ := c.At(ctx, "orders", v)
	out, _ := store.ReadFragment(ctx, head.Manifest(), 0, []int32{0, 1})
	fmt.Printf("version %d: x %v y %v\n", v, out.Columns[0], out.Columns[1])
	// Output:
	// rejected: PRECONDITION_FAILED retryable: true
	// field 0 fragment 0 rows [2] changed at version 2
	// version 3: x [1 2 30 4] y [2 4 60 8]
}

// After a crash the decision of a staged transaction is found by its
// uuid and read version; a transaction never staged can be recomputed.
func ExampleClient_Outcome() {
	ctx := context.Background()
	nc, stop := embeddedCommitter()
	defer stop()
	c, err := producer.New(nc, producer.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	store, err := data.Open(ctx, "mem://")
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	fields := []*lancepb.Field{{Name: "x", Id: 0, ParentId: -1, LogicalType: "int64"}}
	snap := mustCreate(ctx, c, store, "orders", fields, 1, 2, 3)

	// Stage, and "crash" before waiting for the decision: keep only the
	// uuid and the read version.
	del, err := store.DeleteRows(ctx, snap.Manifest(), 0, []uint32{1})
	if err != nil {
		log.Fatal(err)
	}
	txn := snap.NewTxn().Delete(0, del)
	if err := c.Stage(ctx, txn); err != nil {
		log.Fatal(err)
	}
	id, read := txn.ID(), txn.ReadVersion()

	v, err := c.Outcome(ctx, "orders", id, read)
	fmt.Println("staged txn:", v, err)
	_, err = c.Outcome(ctx, "orders", "00000000-0000-4000-8000-000000000000", read)
	fmt.Println("unknown txn:", errors.Is(err, producer.ErrNotStaged))
	// Output:
	// staged txn: 2 <nil>
	// unknown txn: true
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

func mustCreate(ctx context.Context, c *producer.Client, store *data.Store, ds string, fields []*lancepb.Field, xs ...int64) *producer.Snapshot {
	schema, err := table.NewSchema(fields)
	if err != nil {
		log.Fatal(err)
	}
	frag, err := store.WriteFragment(ctx, schema, map[int32]arrow.Array{0: int64s(xs...)})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Commit(ctx, producer.Create(ds, fields, frag)); err != nil {
		log.Fatal(err)
	}
	snap, err := c.Latest(ctx, ds)
	if err != nil {
		log.Fatal(err)
	}
	return snap
}

func double(a arrow.Array) arrow.Array {
	xs := a.(*array.Int64)
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	for i := range xs.Len() {
		b.Append(2 * xs.Value(i))
	}
	return b.NewArray()
}
