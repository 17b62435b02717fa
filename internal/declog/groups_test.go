package declog_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
)

// TestGroupsFencedInsideOneBatch shows that the server checks the fence of
// every dataset's group inside one atomic batch, not only the batch's
// first message: a stale fence on any group (first, middle, last) refuses
// the whole batch and stores nothing, and right fences land every group,
// contiguously, with each group's own sequences. On a single-replica file
// log, a memory log and a three-node replicated log (the server's
// standalone and clustered paths).
func TestGroupsFencedInsideOneBatch(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		srv := natstest.RunServer(t)
		_, js := natstest.Connect(t, srv.URL())
		checkGroupFences(t, js, jetstream.FileStorage, 1)
	})
	t.Run("memory", func(t *testing.T) {
		srv := natstest.RunServer(t)
		_, js := natstest.Connect(t, srv.URL())
		checkGroupFences(t, js, jetstream.MemoryStorage, 1)
	})
	t.Run("R3", func(t *testing.T) {
		if testing.Short() {
			t.Skip("three-node cluster")
		}
		cl := natstest.RunCluster(t, 3)
		_, js := natstest.Connect(t, cl.URLs())
		checkGroupFences(t, js, jetstream.FileStorage, 3)
	})
}

func checkGroupFences(t *testing.T, js jetstream.JetStream, storage jetstream.StorageType, replicas int) {
	ctx := t.Context()
	var sc subject.Scheme
	dec, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: sc.DecStream(), Subjects: []string{sc.DecAll()}, Storage: storage, Replicas: replicas, AllowAtomicPublish: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	l := declog.New(js, sc, dec, nil, declog.Options{RequestTimeout: 10 * time.Second})
	names := []string{"a", "b", "c"}
	last := map[string]uint64{} // each dataset's last record
	n := 0
	group := func(ds string, recs int, expect uint64) declog.Group {
		g := declog.Group{Dataset: ds, Expect: expect}
		for range recs {
			n++
			g.Encs = append(g.Encs, declog.Encoded{Decision: rejected(ds, fmt.Sprintf("00000000-0000-4000-8000-%012d", n), uint64(n))})
		}
		return g
	}
	var tail uint64 // the stream's last sequence
	lastOf := func() uint64 {
		t.Helper()
		info, err := dec.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	// Every dataset starts with one record, appended alone.
	for _, ds := range names {
		seqs, err := l.AppendEncoded(ctx, ds, 0, group(ds, 1, 0).Encs)
		if err != nil {
			t.Fatal(err)
		}
		last[ds] = seqs[0]
	}
	tail = lastOf()
	land := func(sizes []int) {
		t.Helper()
		var gs []declog.Group
		for i, ds := range names {
			gs = append(gs, group(ds, sizes[i], last[ds]))
		}
		seqs, err := l.AppendGroups(ctx, gs)
		if err != nil {
			t.Fatalf("right fences: %v", err)
		}
		next := tail + 1
		for i, ds := range names {
			if len(seqs[i]) != sizes[i] {
				t.Fatalf("%s: %d sequences for %d records", ds, len(seqs[i]), sizes[i])
			}
			for j, s := range seqs[i] {
				if s != next {
					t.Fatalf("%s record %d: sequence %d; want %d", ds, j, s, next)
				}
				r, err := l.At(ctx, s)
				if err != nil {
					t.Fatal(err)
				}
				if r.Decision.GetDataset() != ds || r.Decision.GetTxnUuid() != gs[i].Encs[j].Decision.GetTxnUuid() {
					t.Fatalf("sequence %d holds %s/%s; want %s/%s", s, r.Decision.GetDataset(), r.Decision.GetTxnUuid(), ds, gs[i].Encs[j].Decision.GetTxnUuid())
				}
				next++
			}
			last[ds] = seqs[i][len(seqs[i])-1]
		}
		tail = lastOf()
		if tail != next-1 {
			t.Fatalf("stream ends at %d; want %d", tail, next-1)
		}
	}
	land([]int{2, 1, 3})
	for stale := range names {
		var gs []declog.Group
		for i, ds := range names {
			expect := last[ds]
			if i == stale {
				expect-- // another writer's view: one record behind
			}
			gs = append(gs, group(ds, 2, expect))
		}
		_, err := l.AppendGroups(ctx, gs)
		if !errors.Is(err, declog.ErrFenced) || !errors.Is(err, declog.ErrRefused) {
			t.Fatalf("stale fence on %s: %v; want ErrFenced and ErrRefused", names[stale], err)
		}
		if got := lastOf(); got != tail {
			t.Fatalf("stale fence on %s: the stream moved from %d to %d", names[stale], tail, got)
		}
	}
	// The fence of a dataset that has no record yet is 0.
	gs := []declog.Group{group("a", 1, last["a"]), group("fresh", 1, 1)}
	if _, err := l.AppendGroups(ctx, gs); !errors.Is(err, declog.ErrFenced) {
		t.Fatalf("fence 1 on a dataset with no record: %v; want ErrFenced", err)
	}
	names = append(names, "fresh")
	last["fresh"] = 0
	land([]int{1, 1, 1, 2})
	// One dataset twice in a batch is refused before anything is sent.
	if _, err := l.AppendGroups(ctx, []declog.Group{group("a", 1, last["a"]), group("a", 1, last["a"])}); err == nil || errors.Is(err, declog.ErrAppend) {
		t.Fatalf("two groups of one dataset: %v; want a plain error", err)
	}
}
