package drop_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/drop"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

func openLog(t *testing.T) (jetstream.JetStream, *declog.Log) {
	t.Helper()
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	sc, _ := subject.NewScheme("")
	ctx := t.Context()
	// Unpartitioned at first: stageBoth adds the partitioning transform.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: sc.TxnStream(), Subjects: []string{sc.TxnAll()}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	dec, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: sc.DecStream(), Subjects: []string{sc.DecAll()}, AllowAtomicPublish: true, AllowDirect: true})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: sc.CheckpointBucket()})
	if err != nil {
		t.Fatal(err)
	}
	return js, declog.New(js, sc, dec, obj, declog.Options{})
}

// stageBoth stages one message on ds before the staging stream is
// partitioned (stored under cg.txn.ds) and one after (stored in its
// partition, cg.txp.…).
func stageBoth(t *testing.T, js jetstream.JetStream, ds string) {
	t.Helper()
	ctx := t.Context()
	var sc subject.Scheme
	if _, err := js.Publish(ctx, sc.Txn(ds), []byte("x")); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, sc.TxnStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	src, dest := sc.TxnPartitionMapping(8)
	cfg.SubjectTransform = &jetstream.SubjectTransformConfig{Source: src, Destination: dest}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	a, err := js.Publish(ctx, sc.Txn(ds), []byte("y"))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := s.GetMsg(ctx, a.Sequence); err != nil || m.Subject != sc.TxnPartitioned(8, subject.Partition(ds, 8), ds) {
		t.Fatalf("second message stored as %v (%v), want its partition", m, err)
	}
}

// TestDatasetChecks walks drop.Dataset through what it checks: no such
// dataset (no record, or rejections only), a recent decision (by an
// injected clock), staged messages on either form of the staging
// subject, force, and a second deletion.
func TestDatasetChecks(t *testing.T) {
	js, l := openLog(t)
	ctx := t.Context()
	if _, err := drop.Dataset(ctx, js, l, "nosuch", drop.Options{Force: true}); !errors.Is(err, drop.ErrNoDataset) {
		t.Fatalf("Dataset(nosuch) = %v; want ErrNoDataset", err)
	}
	if _, err := drop.Dataset(ctx, js, l, "a.b", drop.Options{Force: true}); !errors.Is(err, subject.ErrInvalidDataset) {
		t.Fatalf("Dataset(a.b) = %v; want ErrInvalidDataset", err)
	}
	rec := &cellguardpb.Decision{Dataset: "ds", TxnUuid: "u-1", TxnSeq: 1, Outcome: cellguardpb.Outcome_OUTCOME_REJECTED, Reason: cellguardpb.Reason_UNKNOWN_DATASET}
	seqs, err := l.Append(ctx, "ds", 0, []*cellguardpb.Decision{rec})
	if err != nil {
		t.Fatal(err)
	}
	// A name with rejections only was never created: deleting it would
	// keep it from ever being created.
	if _, err := drop.Dataset(ctx, js, l, "ds", drop.Options{Force: true}); !errors.Is(err, drop.ErrNoDataset) {
		t.Fatalf("Dataset of a name with rejections only = %v; want ErrNoDataset", err)
	}
	created := &cellguardpb.Decision{Dataset: "ds", TxnUuid: "u-2", TxnSeq: 2, Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED, Version: 1}
	if seqs, err = l.Append(ctx, "ds", seqs[0], []*cellguardpb.Decision{created}); err != nil {
		t.Fatal(err)
	}
	last, err := l.Stream().GetMsg(ctx, seqs[0])
	if err != nil {
		t.Fatal(err)
	}
	at := func(d time.Duration) func() time.Time { return func() time.Time { return last.Time.Add(d) } }

	var busy *drop.BusyError
	_, err = drop.Dataset(ctx, js, l, "ds", drop.Options{Now: at(30 * time.Second)})
	if !errors.As(err, &busy) || !errors.Is(err, drop.ErrBusy) || busy.Staged != 0 || busy.LastDecision != 30*time.Second {
		t.Fatalf("Dataset 30s after the last decision = %v; want busy (quiet period)", err)
	}
	stageBoth(t, js, "ds")
	_, err = drop.Dataset(ctx, js, l, "ds", drop.Options{Now: at(time.Hour)})
	if !errors.As(err, &busy) || busy.Staged != 2 {
		t.Fatalf("Dataset with 2 staged messages = %v; want busy with 2 staged", err)
	}
	res, err := drop.Dataset(ctx, js, l, "ds", drop.Options{Force: true, Note: "test"})
	if err != nil || res.Already || res.Staged != 2 || res.Seq != seqs[0]+1 || res.Head != 1 {
		t.Fatalf("Dataset(force) = %+v, %v; want the tombstone after record %d, 2 staged", res, err, seqs[0])
	}
	again, err := drop.Dataset(ctx, js, l, "ds", drop.Options{})
	if err != nil || !again.Already || again.Seq != res.Seq {
		t.Fatalf("second Dataset = %+v, %v; want Already at %d", again, err, res.Seq)
	}
	if _, err := l.Append(ctx, "ds", seqs[0], []*cellguardpb.Decision{rec}); !errors.Is(err, declog.ErrFenced) {
		t.Fatalf("a decision fenced before the tombstone = %v; want ErrFenced", err)
	}
}
