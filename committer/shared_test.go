package committer

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// TestSharedLogGathersAndFences appends from many datasets at once through
// one sharedLog: every group lands at the sequences returned for it, in
// its dataset's order, some batches carry several datasets, a stale fence
// fails its own dataset alone, and no lane is left taken.
func TestSharedLogGathersAndFences(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	sc, _ := subject.NewScheme("sh")
	ctx := t.Context()
	dec, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: sc.DecStream(), Subjects: []string{sc.DecAll()},
		AllowAtomicPublish: true, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	dl := declog.New(js, sc, dec, nil, declog.Options{})
	s := newSharedLog(dl)

	const datasets, rounds = 24, 6
	enc := func(ds string, n int) declog.Encoded {
		e, err := declog.Encode(&cellguardpb.Decision{Dataset: ds, TxnUuid: fmt.Sprintf("%s-%d", ds, n), TxnSeq: uint64(n + 1),
			Outcome: cellguardpb.Outcome_OUTCOME_REJECTED, Reason: cellguardpb.Reason_PRECONDITION_FAILED})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	var wg sync.WaitGroup
	errs := make(chan error, datasets)
	for d := range datasets {
		wg.Go(func() {
			ds := fmt.Sprintf("ds%02d", d)
			var expect uint64
			n := 0
			for r := range rounds {
				group := make([]declog.Encoded, 1+(d+r)%3)
				for i := range group {
					group[i] = enc(ds, n)
					n++
				}
				seqs, err := s.append(ds, expect, group)
				if err != nil || len(seqs) != len(group) {
					errs <- fmt.Errorf("%s round %d: %v, %v", ds, r, seqs, err)
					return
				}
				for i := 1; i < len(seqs); i++ {
					if seqs[i] != seqs[i-1]+1 {
						errs <- fmt.Errorf("%s round %d: group not contiguous: %v", ds, r, seqs)
						return
					}
				}
				expect = seqs[len(seqs)-1]
			}
			// A stale fence fails this dataset alone.
			if _, err := s.append(ds, expect-1, []declog.Encoded{enc(ds, n)}); !errors.Is(err, ErrFenced) {
				errs <- fmt.Errorf("%s: stale fence = %v; want ErrFenced", ds, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// Read the log back: each dataset's records in order, and batches
	// that carried several datasets.
	per := map[string]int{}
	shared := 0
	var prevBatch, prevDS string
	info, err := dec.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		msg, err := dec.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		r, err := declog.Parse(sc, seq, msg.Subject, msg.Header, msg.Data)
		if err != nil {
			t.Fatal(err)
		}
		ds := r.Decision.GetDataset()
		if want := fmt.Sprintf("%s-%d", ds, per[ds]); r.Decision.GetTxnUuid() != want {
			t.Fatalf("record %d of %s is %s; want %s", seq, ds, r.Decision.GetTxnUuid(), want)
		}
		per[ds]++
		batch := msg.Header.Get("Nats-Batch-Id")
		if batch != "" && batch == prevBatch && ds != prevDS {
			shared++
		}
		prevBatch, prevDS = batch, ds
	}
	for d := range datasets {
		ds := fmt.Sprintf("ds%02d", d)
		want := 0
		for r := range rounds {
			want += 1 + (d+r)%3
		}
		if per[ds] != want {
			t.Errorf("%s has %d records; want %d", ds, per[ds], want)
		}
	}
	if shared == 0 {
		t.Error("no batch carried more than one dataset")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lanes != 0 || len(s.waiting) != 0 {
		t.Errorf("after every append: %d lanes taken, %d groups waiting", s.lanes, len(s.waiting))
	}
}
