package producer_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"cellguard/committer"
	"cellguard/internal/natstest"
	"cellguard/producer"
	"cellguard/proto/lancepb"
)

// fakeFragment is a fragment of a data file that need not exist: a
// staged transaction is only bytes until a committer decides it.
func fakeFragment(i int) *lancepb.DataFragment {
	return &lancepb.DataFragment{PhysicalRows: 1000, Files: []*lancepb.DataFile{{
		Path: fmt.Sprintf("data/%04d-padding-padding-padding-padding.lance", i), Fields: []int32{0, 1},
		ColumnIndices: []int32{0, 1}, FileMajorVersion: 2, FileMinorVersion: 1,
	}}}
}

// TestStageBacklogFull fills a staging stream no committer drains: once
// it is at its MaxBytes the next Stage and Commit fail with
// ErrBacklogFull (nothing stored, the call may be repeated later) instead
// of retrying until the deadline.
func TestStageBacklogFull(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	txnCfg, decCfg := committer.StreamConfigs(committer.Config{TxnMaxBytes: 16 << 10})
	if _, err := js.CreateStream(t.Context(), txnCfg); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), decCfg); err != nil {
		t.Fatal(err)
	}
	nc, _ := natstest.Connect(t, srv.URL())
	c, err := producer.New(nc, producer.Config{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	frags := make([]*lancepb.DataFragment, 8)
	for i := range frags {
		frags[i] = fakeFragment(i)
	}
	var full error
	staged := 0
	for ; staged < 1000; staged++ {
		if full = c.Stage(t.Context(), producer.Create(fmt.Sprintf("ds%d", staged), fields, frags...)); full != nil {
			break
		}
	}
	if !errors.Is(full, producer.ErrBacklogFull) || errors.Is(full, producer.ErrOutcomeUnknown) {
		t.Fatalf("Stage on a full staging stream: %v; want ErrBacklogFull, outcome known", full)
	}
	txn := producer.Create("late", fields, frags...)
	if _, err := c.Commit(t.Context(), txn); !errors.Is(err, producer.ErrBacklogFull) || errors.Is(err, producer.ErrOutcomeUnknown) {
		t.Fatalf("Commit on a full staging stream: %v; want ErrBacklogFull, outcome known", err)
	}
	// Nothing was stored: the stream holds the staged transactions only.
	s, err := js.Stream(t.Context(), txnCfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if staged == 0 || info.State.Msgs != uint64(staged) {
		t.Fatalf("staging stream holds %d messages after %d stages; want %d, more than 0", info.State.Msgs, staged, staged)
	}
}
