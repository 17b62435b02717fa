package declog_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// TestAppendToFullLog appends to a decision stream at its MaxBytes
// (Discard: new), as one message and as an atomic batch: the append fails
// with ErrLogFull (nothing stored), not ErrAppend (outcome unknown), and
// the log holds only what was appended before.
func TestAppendToFullLog(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	sc, _ := subject.NewScheme("")
	dec, err := js.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: sc.DecStream(), Subjects: []string{sc.DecAll()}, AllowAtomicPublish: true,
		MaxBytes: 4 << 10, Discard: jetstream.DiscardNew,
	})
	if err != nil {
		t.Fatal(err)
	}
	obj, err := js.CreateObjectStore(t.Context(), jetstream.ObjectStoreConfig{Bucket: sc.CheckpointBucket()})
	if err != nil {
		t.Fatal(err)
	}
	l := declog.New(js, sc, dec, obj, declog.Options{})
	ds := "full"
	var expect uint64
	var full error
	v := uint64(1)
	for ; v < 1000; v++ {
		seqs, err := l.Append(t.Context(), ds, expect, []*cellguardpb.Decision{committed(t, ds, v)})
		if err != nil {
			full = err
			break
		}
		expect = seqs[0]
	}
	if !errors.Is(full, declog.ErrLogFull) || errors.Is(full, declog.ErrAppend) {
		t.Fatalf("Append to a full log: %v; want ErrLogFull, not ErrAppend", full)
	}
	_, err = l.Append(t.Context(), ds, expect, []*cellguardpb.Decision{committed(t, ds, v), committed(t, ds, v+1)})
	if !errors.Is(err, declog.ErrLogFull) || errors.Is(err, declog.ErrAppend) {
		t.Fatalf("atomic batch to a full log: %v; want ErrLogFull, not ErrAppend", err)
	}
	info, err := dec.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != expect {
		t.Fatalf("the log ends at %d; want %d, the last append that succeeded", info.State.LastSeq, expect)
	}
}
