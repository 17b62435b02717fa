package bench

// The raw baseline of `cellguard bench`: the same JetStream I/O as the
// committer (consume staged messages, publish one decision each as an
// atomic batch, ack) with no decoding, state, fencing or evaluation.

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"cellguard/committer"
	"cellguard/internal/subject"
)

// startRaw runs the raw JetStream loop: the committer's streams under
// their own prefix, one consumer over the whole staging stream (one
// dataset, or many); each batch of staged messages gets one decision
// message each, published as an atomic batch, then acked. No decoding,
// state, fencing or evaluation.
func (b *bencher) startRaw(ctx context.Context, wg *sync.WaitGroup, sc subject.Scheme, batch int, counts *appendCounts) error {
	nc, err := nats.Connect(b.url, nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return err
	}
	atomicMin, err := createRaw(ctx, js, sc, batch, b.replicas)
	if err != nil {
		nc.Close()
		return err
	}
	if b.atomicMin > 0 {
		atomicMin = b.atomicMin
	}
	cons, err := js.Consumer(ctx, sc.TxnStream(), "raw")
	if err != nil {
		nc.Close()
		return err
	}
	in := make(chan jetstream.Msg, 4*batch)
	cc, err := cons.Consume(func(m jetstream.Msg) { in <- m }, jetstream.PullMaxMessages(batch))
	if err != nil {
		nc.Close()
		return err
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer nc.Close()
		defer cc.Stop()
		rawLoop(ctx, nc, sc, in, batch, atomicMin, counts)
	}()
	return nil
}

// createRaw creates the streams, as the committer would, and the raw
// loop's consumer over the whole staging stream (no filter: it takes the
// staged subjects in whatever form the stream stores them, plain or
// partitioned). It returns the smallest group to append atomically on
// the decision stream, as the committer would choose it.
func createRaw(ctx context.Context, js jetstream.JetStream, sc subject.Scheme, batch, replicas int) (atomicMin int, err error) {
	txnCfg, decCfg := committer.StreamConfigs(committer.Config{Prefix: sc.Prefix(), TxnMaxBytes: 256 << 20, Replicas: replicas})
	if _, err := js.CreateOrUpdateStream(ctx, txnCfg); err != nil {
		return 0, err
	}
	dec, err := js.CreateOrUpdateStream(ctx, decCfg)
	if err != nil {
		return 0, err
	}
	_, err = js.CreateOrUpdateConsumer(ctx, txnCfg.Name, jetstream.ConsumerConfig{
		Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: 2 * batch, AckWait: 30 * time.Second,
	})
	return committer.AtomicBatchMinFor(dec.CachedInfo().Config), err
}

// rawLoop decides what arrives on in, up to batch messages at a time,
// until ctx ends or a decision cannot be published, and counts what it
// appended.
func rawLoop(ctx context.Context, nc *nats.Conn, sc subject.Scheme, in <-chan jetstream.Msg, batch, atomicMin int, counts *appendCounts) {
	msgs := make([]jetstream.Msg, 0, batch)
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-in:
			msgs = append(msgs[:0], m)
		}
		for len(msgs) < batch && len(in) > 0 {
			msgs = append(msgs, <-in)
		}
		start := time.Now()
		if err := rawAppend(ctx, nc, sc, msgs, atomicMin); err != nil {
			return
		}
		counts.nanos.Add(int64(time.Since(start)))
		counts.groups.Add(1)
		counts.decisions.Add(int64(len(msgs)))
		for _, m := range msgs {
			_ = m.Ack()
		}
	}
}

// rawAppend publishes one decision per message: as one atomic batch from
// atomicMin messages on, as single publishes below (the committer's rule).
func rawAppend(ctx context.Context, nc *nats.Conn, sc subject.Scheme, msgs []jetstream.Msg, atomicMin int) error {
	if len(msgs) > 1 && len(msgs) < atomicMin {
		for i := range msgs {
			if err := rawAppend(ctx, nc, sc, msgs[i:i+1], atomicMin); err != nil {
				return err
			}
		}
		return nil
	}
	id := nuid.Next()
	for i, m := range msgs {
		// The dataset is the last token of the staged subject, in the
		// plain form (<prefix>.txn.<ds>) and the partitioned one
		// (<prefix>.txp.<n>.<part>.<ds>) alike.
		subj := m.Subject()
		out := nats.NewMsg(sc.Dec(subj[strings.LastIndexByte(subj, '.')+1:], subject.Committed))
		out.Data = m.Data()
		out.Header.Set(subject.HdrTxnID, m.Headers().Get(subject.HdrMsgID))
		if len(msgs) > 1 {
			out.Header.Set("Nats-Batch-Id", id)
			out.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		}
		if i < len(msgs)-1 {
			if err := nc.PublishMsg(out); err != nil {
				return err
			}
			continue
		}
		if len(msgs) > 1 {
			out.Header.Set("Nats-Batch-Commit", "1")
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := nc.RequestMsgWithContext(rctx, out)
		cancel()
		return err
	}
	return nil
}
