package declog_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/declog"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// own is committed(t, ds, v) with a transaction uuid of ds's own: the
// stream's duplicate window spans datasets.
func own(t *testing.T, ds string, v uint64) *cellguardpb.Decision {
	t.Helper()
	d := committed(t, ds, v)
	var txn lancepb.Transaction
	if err := proto.Unmarshal(d.Transaction, &txn); err != nil {
		t.Fatal(err)
	}
	txn.Uuid = fmt.Sprintf("%s-%d", ds, v)
	b, err := proto.Marshal(&txn)
	if err != nil {
		t.Fatal(err)
	}
	d.TxnUuid, d.Transaction = txn.Uuid, b
	return d
}

// encodeAll encodes decs for AppendEncoded and AppendShared.
func encodeAll(t *testing.T, decs ...*cellguardpb.Decision) []declog.Encoded {
	t.Helper()
	encs := make([]declog.Encoded, len(decs))
	for i, d := range decs {
		e, err := declog.Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		encs[i] = e
	}
	return encs
}

// TestAppendShared appends the groups of three datasets as one batch, on
// one server and on a 3-node cluster (R3, where shared batches are used):
// every record lands at the sequence returned for it, each group's fence
// is its own dataset's, and a batch with one stale fence or one decision
// already in the log lands nothing at all.
func TestAppendShared(t *testing.T) {
	t.Run("R1", func(t *testing.T) {
		l, js, sc := openLog(t)
		testAppendShared(t, l, js, sc)
	})
	t.Run("R3", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a 3-node cluster")
		}
		c := natstest.RunCluster(t, 3)
		_, js := natstest.Connect(t, c.URLs())
		sc, _ := subject.NewScheme("")
		dec, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: sc.DecStream(), Subjects: []string{sc.DecAll()}, AllowAtomicPublish: true, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		obj, err := js.CreateObjectStore(t.Context(), jetstream.ObjectStoreConfig{Bucket: sc.CheckpointBucket(), Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		testAppendShared(t, declog.New(js, sc, dec, obj, declog.Options{}), js, sc)
	})
}

func testAppendShared(t *testing.T, l *declog.Log, js jetstream.JetStream, sc subject.Scheme) {
	ctx := t.Context()
	// b already has a record, so the groups' fences differ.
	bSeqs, err := l.AppendEncoded(ctx, "b", 0, encodeAll(t, own(t, "b", 1)))
	if err != nil {
		t.Fatal(err)
	}
	groups := []declog.Group{
		{Dataset: "a", Expect: 0, Encs: encodeAll(t, own(t, "a", 1))},
		{Dataset: "b", Expect: bSeqs[0], Encs: encodeAll(t, own(t, "b", 2), rejected("b", "b-r", 3), own(t, "b", 3))},
		{Dataset: "c", Expect: 0, Encs: encodeAll(t, own(t, "c", 1), own(t, "c", 2))},
	}
	seqs, err := l.AppendShared(ctx, groups)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(seqs), "[[2] [3 4 5] [6 7]]"; got != want {
		t.Fatalf("AppendShared sequences = %s; want %s", got, want)
	}
	stream, err := js.Stream(ctx, sc.DecStream())
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range groups {
		for j, e := range g.Encs {
			msg, err := stream.GetMsg(ctx, seqs[i][j])
			if err != nil {
				t.Fatal(err)
			}
			r, err := declog.Parse(sc, seqs[i][j], msg.Subject, msg.Header, msg.Data)
			if err != nil || !proto.Equal(r.Decision, e.Decision) {
				t.Errorf("record %d = %v, %v; want %v", seqs[i][j], r.Decision, err, e.Decision)
			}
		}
	}
	last := func() uint64 {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	before := last()

	// One stale fence (c's: its last record is at 7) refuses the batch.
	stale := []declog.Group{
		{Dataset: "a", Expect: 2, Encs: encodeAll(t, own(t, "a", 2))},
		{Dataset: "c", Expect: 6, Encs: encodeAll(t, own(t, "c", 3))},
	}
	if _, err := l.AppendShared(ctx, stale); !errors.Is(err, declog.ErrFenced) {
		t.Fatalf("AppendShared(one stale fence) = %v; want ErrFenced", err)
	}
	// A decision already in the log (b's rejection) refuses it too.
	dup := []declog.Group{
		{Dataset: "a", Expect: 2, Encs: encodeAll(t, own(t, "a", 2))},
		{Dataset: "b", Expect: 5, Encs: encodeAll(t, rejected("b", "b-r", 3))},
	}
	if _, err := l.AppendShared(ctx, dup); !errors.Is(err, declog.ErrFenced) {
		t.Fatalf("AppendShared(a decision already in the log) = %v; want ErrFenced", err)
	}
	if got := last(); got != before {
		t.Fatalf("refused shared batches stored records: last sequence %d, was %d", got, before)
	}
	// Alone, the fresh groups still land (what a caller does to find out
	// whose fence failed).
	if _, err := l.AppendEncoded(ctx, "a", 2, stale[0].Encs); err != nil {
		t.Errorf("a alone after the refused batch: %v", err)
	}
	if _, err := l.AppendEncoded(ctx, "c", 6, stale[1].Encs); !errors.Is(err, declog.ErrFenced) {
		t.Errorf("c alone with its stale fence = %v; want ErrFenced", err)
	}
	// A single group is a plain (fenced) append.
	if s, err := l.AppendShared(ctx, []declog.Group{{Dataset: "c", Expect: 7, Encs: encodeAll(t, own(t, "c", 3))}}); err != nil || len(s) != 1 || len(s[0]) != 1 {
		t.Errorf("AppendShared(one group of one) = %v, %v", s, err)
	}
	if _, err := l.AppendShared(ctx, nil); err == nil {
		t.Error("AppendShared(no groups) succeeded")
	}
	if _, err := l.AppendShared(ctx, []declog.Group{{Dataset: "a", Expect: 0, Encs: encodeAll(t, own(t, "z", 1))}}); err == nil {
		t.Error("AppendShared(a decision of another dataset in a group) succeeded")
	}
}
