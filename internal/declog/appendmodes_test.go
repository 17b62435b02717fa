package declog_test

// BenchmarkAppendModes measures what one group of decisions costs to
// reach a single-replica file log, by the ways JetStream offers to write
// a group: the committer's two (an atomic batch; a chain of single fenced
// appends, each waiting for the one before) and one it does not use, a
// fast batch ("gap: fail"), kept here as the evidence for not using it.
//
// A fast batch is several times cheaper than an atomic batch on such a
// log: the server writes its messages as they come, where an atomic batch
// is staged in a file store of its own that is synced to disk before the
// commit (nats-server 2.15, newBatchStore). But only its first message
// can carry the fence: the sequences of the others are unknown when they
// are sent. A committer paused after its first message (a GC pause, a
// stopped process) and resumed after another committer took the dataset
// over would land the rest of its group unfenced, after the new owner's
// records: two records of one version. An atomic batch is checked whole
// at its commit, and a chain fences every message. See docs/design.md
// §5.6 and TestFastBatchMembersAreNotFenced below.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"cellguard/internal/declog"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// batchLog is a decision log on a single-replica file stream that takes
// both kinds of batch.
func batchLog(t testing.TB) (*nats.Conn, *declog.Log, jetstream.Stream) {
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv.URL())
	var sc subject.Scheme
	stream, err := js.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: sc.DecStream(), Subjects: []string{sc.DecAll()}, Storage: jetstream.FileStorage,
		AllowAtomicPublish: true, AllowBatchPublish: true, AllowDirect: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	return nc, declog.New(js, sc, stream, nil, declog.Options{RequestTimeout: 5 * time.Second}), stream
}

// TestFastBatchMembersAreNotFenced shows the hazard that rules fast
// batches out (see the file comment): a batch's first message passes its
// fence, another writer appends fenced on it, and the batch's next
// message still lands, after the other writer's record. If a server
// version ever fences the members too, this fails and the choice is
// worth revisiting.
func TestFastBatchMembersAreNotFenced(t *testing.T) {
	nc, l, stream := batchLog(t)
	var sc subject.Scheme
	ds := "zombie"
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox + ".>")
	if err != nil {
		t.Fatal(err)
	}
	send := func(d *cellguardpb.Decision, seq, op int, fence bool) {
		t.Helper()
		m, err := declog.Message(sc, d)
		if err != nil {
			t.Fatal(err)
		}
		m.Reply = fmt.Sprintf("%s.batch.%d.fail.%d.%d.$FI", inbox, 10, seq, op)
		if fence {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
			m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, sc.DecOf(ds))
		}
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		if _, err := sub.NextMsg(5 * time.Second); err != nil { // flow control, then the final answer
			t.Fatal(err)
		}
	}
	send(committedOf(ds, 1), 1, 0, true) // the stale writer's first message: fenced, lands at 1
	if _, err := l.Append(t.Context(), ds, 1, []*cellguardpb.Decision{committedOf(ds, 2)}); err != nil {
		t.Fatalf("the new owner's append, fenced on 1: %v", err)
	}
	stale := committedOf(ds, 2)
	send(stale, 2, 2, false) // its second message: version 2 again
	m, err := stream.GetLastMsgForSubject(t.Context(), sc.DecOf(ds))
	if err != nil {
		t.Fatal(err)
	}
	if m.Sequence != 3 || m.Header.Get(subject.HdrTxnID) != stale.TxnUuid {
		t.Fatalf("last record %d (%s): the member was refused; fast batches fence their members now", m.Sequence, m.Header.Get(subject.HdrTxnID))
	}
}

func BenchmarkAppendModes(b *testing.B) {
	nc, l, _ := batchLog(b)
	var sc subject.Scheme
	ctx := context.Background()
	for _, n := range []int{1, 8, 48, 128} {
		for _, mode := range []string{"atomic", "chain", "fast"} {
			if n == 1 && mode != "chain" {
				continue // one decision is one fenced append, whatever the mode
			}
			b.Run(fmt.Sprintf("n=%d/%s", n, mode), func(b *testing.B) {
				ds := fmt.Sprintf("%s%d-%s", mode, n, nuid.Next()) // a fresh log each time b.Run runs this
				var expect, version uint64
				group := func() []*cellguardpb.Decision {
					decs := make([]*cellguardpb.Decision, n)
					for i := range decs {
						version++
						decs[i] = committedOf(ds, version)
					}
					return decs
				}
				for b.Loop() {
					decs := group()
					var seqs []uint64
					var err error
					switch mode {
					case "atomic":
						seqs, err = l.Append(ctx, ds, expect, decs)
					case "chain":
						for _, d := range decs {
							var s []uint64
							if s, err = l.Append(ctx, ds, expect, []*cellguardpb.Decision{d}); err != nil {
								break
							}
							expect, seqs = s[0], s
						}
					case "fast":
						var last uint64
						last, err = fastBatch(nc, sc, ds, expect, decs)
						seqs = []uint64{last}
					}
					if err != nil {
						b.Fatal(err)
					}
					expect = seqs[len(seqs)-1]
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n)/1e3, "µs/decision")
			})
		}
	}
}

// committedOf is a committed decision of version v of ds with a body of a
// typical size.
func committedOf(ds string, v uint64) *cellguardpb.Decision {
	return &cellguardpb.Decision{Dataset: ds, TxnUuid: nuid.Next(), TxnSeq: v, Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED, Version: v, Transaction: make([]byte, 600)}
}

// fastBatch writes decs as one fast batch in "gap: fail" mode, the first
// message fenced on expect, and returns the sequence of the last. The
// protocol is in the reply subject of each message:
// <inbox>.<batch id>.<ack every>.<gap mode>.<batch seq>.<op>.$FI, op 0 to
// start, 1 to add, 2 to add and commit.
func fastBatch(nc *nats.Conn, sc subject.Scheme, ds string, expect uint64, decs []*cellguardpb.Decision) (uint64, error) {
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox + ".>")
	if err != nil {
		return 0, err
	}
	defer sub.Unsubscribe()
	id := nuid.Next()
	for i, d := range decs {
		m, err := declog.Message(sc, d)
		if err != nil {
			return 0, err
		}
		op := 1
		switch {
		case i == len(decs)-1:
			op = 2
		case i == 0:
			op = 0
		}
		m.Reply = fmt.Sprintf("%s.%s.%d.fail.%d.%d.$FI", inbox, id, len(decs), i+1, op)
		if i == 0 {
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
			m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, sc.DecOf(ds))
		}
		if err := nc.PublishMsg(m); err != nil {
			return 0, err
		}
	}
	for {
		r, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			return 0, err
		}
		var resp struct {
			Type  string          `json:"type"` // flow control ("ack", "gap", "err"); none on the final answer
			Seq   uint64          `json:"seq"`
			Count int             `json:"count"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(r.Data, &resp); err != nil {
			return 0, err
		}
		switch {
		case resp.Type != "":
			continue
		case resp.Error != nil:
			return 0, fmt.Errorf("fast batch: %s", resp.Error)
		case resp.Count != len(decs):
			return 0, fmt.Errorf("fast batch: %d of %d stored", resp.Count, len(decs))
		}
		return resp.Seq, nil
	}
}
