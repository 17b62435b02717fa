package committer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"cellguard/internal/declog"
	"cellguard/proto/cellguardpb"
	"cellguard/table"
)

// The batch pipeline.
//
// A batch goes through four stages: decide (in memory, against the
// provisional state), prepare (the retention check and the deletion
// files), append (one fenced round trip to the decision log, with an
// fsync on single-replica file streams), finish (the state commits, the
// staged messages are acked). The append is most of a batch's time, and
// the decider would sit idle through it while the dataset's next
// messages queue up. So while a batch appends, the messages that arrive
// are decided as they come, on top of its provisional state, into the
// next batch, which is sent as soon as the first one's outcome is in: the
// fence of the next batch is the log sequence the first one got, so two
// appends of a dataset are never in flight at once, and the log holds a
// prefix of the decisions whatever fails. A batch's cycle becomes its
// append alone.
//
// State stays exact: a batch that fails to append is rolled back together
// with the one decided on top of it (whose messages go back to the
// dataset's queue, decided again after the failure is handled); one that
// lands is committed under the next (state.commitUnder), which stays
// provisional. The next batch takes only messages that need no gap check
// (same partition epoch, not redelivered), and none when a checkpoint is
// due: checkpoints are taken with nothing provisional.

// maxPipelined bounds the batches one pipeline run decides, so that a busy
// dataset gives its decider back now and then.
const maxPipelined = 32

// pending is a batch on its way through the pipeline.
type pending struct {
	items []item
	m     mark // where the batch's decisions start
	recs  []*cellguardpb.Decision
	encs  []declog.Encoded // recs as encoded once by decide
	// verdicts are recs' verdicts until prepare has written their
	// deletion files; nil after, so that what a verdict holds (the new
	// head, as decided) is not kept alive by the batch while it appends.
	verdicts []verdict
	lags     []uint64 // recs[j]'s read lag, for metrics
	idx      []int    // recs[j] decides items[idx[j]]
	done     chan appended
}

// appended is the outcome of an append.
type appended struct {
	seqs []uint64
	err  error
}

// pipeline decides and appends items and, while each batch appends,
// decides the dataset's messages that arrive into the next batch. It
// returns nil when every batch it took is decided and acked, or the error
// of the batch that failed with that batch's messages, rolled back (its
// successor's messages are queued again).
func (w *worker) pipeline(ctx, runCtx context.Context, items []item) ([]item, error) {
	start := w.st.Head
	cur, err := w.decideBatch(ctx, items)
	if err == nil {
		err = w.prepare(ctx, cur)
	}
	if err != nil {
		return items, err
	}
	w.send(ctx, cur)
	w.packCreated(start)
	for n := 1; ; n++ {
		res, next, err := w.decideWhileAppending(ctx, runCtx, cur, n < maxPipelined, start)
		if err != nil {
			return nil, err // an injected crash
		}
		if res.err != nil {
			w.st.Rollback(cur.m) // and next's decisions with it
			if next != nil {
				w.requeueFront(next.items)
			}
			w.maybeCheckpoint(start)
			return cur.items, res.err
		}
		if err := w.commitBatch(cur, res.seqs, next); err != nil {
			return nil, err
		}
		// The next batch goes out before this one's acks: they need no
		// answer, and the log is what waits.
		var perr error
		if next != nil {
			if perr = w.prepare(ctx, next); perr == nil {
				w.send(ctx, next)
			}
		}
		if err := w.ack(ctx, cur); err != nil {
			if next != nil && perr == nil {
				<-next.done // not left running past a crash
			}
			return nil, err
		}
		if next == nil || perr != nil {
			w.maybeCheckpoint(start)
			if perr != nil {
				return next.items, perr
			}
			w.quietCreated(start)
			return nil, nil
		}
		cur = next
	}
}

// decideWhileAppending waits for cur's append and meanwhile, when more
// is allowed, decides the messages queued for the dataset into a next
// batch of up to BatchSize, on top of cur. Messages that fail to decide
// go back to the queue, to be decided (and their failure handled) on
// their own. Only an injected crash is returned as an error, once cur's
// append is over.
func (w *worker) decideWhileAppending(ctx, runCtx context.Context, cur *pending, more bool, start *table.Manifest) (appended, *pending, error) {
	var next *pending
	arrived, unwatch := w.watchArrivals()
	defer unwatch()
	for {
		if more && runCtx.Err() == nil && !w.checkpointDue(start) {
			room := w.c.cfg.BatchSize
			if next != nil {
				room -= len(next.items)
			}
			if items := w.takeReady(room); len(items) > 0 {
				p, err := w.decideInto(ctx, next, items)
				if errors.Is(err, errCrash) {
					return <-cur.done, nil, err
				}
				if err != nil {
					w.requeueFront(items)
					more = false
				} else {
					next = p
				}
				continue
			}
		}
		select {
		case res := <-cur.done:
			return res, next, nil
		case <-arrived:
		}
	}
}

// checkpointDue reports whether the head passed a checkpoint interval
// since start (nil before the dataset existed).
func (w *worker) checkpointDue(start *table.Manifest) bool {
	k := w.c.cfg.CheckpointEvery
	if k <= 0 || w.st.Head == nil {
		return false
	}
	var before uint64
	if start != nil {
		before = start.Version()
	}
	return w.st.HeadVersion()/uint64(k) != before/uint64(k)
}

// decideBatch decides items against the provisional state, as a batch of
// their own.
func (w *worker) decideBatch(ctx context.Context, items []item) (*pending, error) {
	return w.decideInto(ctx, nil, items)
}

// decideInto decides items against the provisional state and adds them to
// p (a new batch when p is nil), which it returns. On error the state is
// rolled back to where these items started, p keeps what it had (an
// injected crash leaves the state as it is: the process is dead).
func (w *worker) decideInto(ctx context.Context, p *pending, items []item) (*pending, error) {
	st := w.st
	from := st.Mark()
	if p == nil {
		p = &pending{m: from}
	}
	q := *p // p as it was, returned only on success
	q.items = append(q.items, items...)
	// Room for a decision per item at once, instead of each slice
	// growing one decision at a time.
	q.recs, q.verdicts = slices.Grow(q.recs, len(items)), slices.Grow(q.verdicts, len(items))
	q.idx, q.encs, q.lags = slices.Grow(q.idx, len(items)), slices.Grow(q.encs, len(items)), slices.Grow(q.lags, len(items))
	for k, in := range items {
		if in.Seq <= st.LastTxnSeq || in.Seq <= w.cursor {
			// Decided already (a redelivery): ack only, once the log
			// agrees that this very message has a decision.
			if err := st.CheckDecided(in.staged); err != nil {
				st.Rollback(from)
				return p, fmt.Errorf("%s: %w", w.ds, err)
			}
			continue
		}
		v := st.Decide(ctx, in.staged)
		if v.Broken != nil {
			st.Rollback(from)
			return p, fmt.Errorf("%s: staged message %d: %w", w.ds, in.Seq, v.Broken)
		}
		if v.Skip {
			continue // the uuid has a decision (a republish): ack only
		}
		q.recs, q.verdicts, q.idx = append(q.recs, v.Rec), append(q.verdicts, v), append(q.idx, len(p.items)+k)
		q.encs, q.lags = append(q.encs, v.Encoded()), append(q.lags, v.Lag)
	}
	if err := w.c.step(StepDecided, w.ds); err != nil {
		return p, err
	}
	*p = q
	return p, nil
}

// prepare readies a decided batch for its append, with nothing else
// provisional beneath it: the log's retention must keep the newest
// checkpoint, and the deletion files its rebases produced are written
// first. On error the batch is rolled back.
func (w *worker) prepare(ctx context.Context, p *pending) error {
	st := w.st
	if err := w.checkRetention(p.m, st.HeadVersion()); err != nil {
		st.Rollback(p.m)
		return err
	}
	if len(p.recs) == 0 {
		return nil
	}
	if err := w.writeDeletions(ctx, p.verdicts); err != nil {
		st.Rollback(p.m)
		return fmt.Errorf("%w: write deletion files: %v", errAppend, err)
	}
	p.verdicts = nil
	return nil
}

// send starts p's append, fenced on the log sequence its batch starts
// from; its outcome arrives on p.done. A batch with nothing to append
// is done at once.
func (w *worker) send(ctx context.Context, p *pending) {
	p.done = make(chan appended, 1)
	if len(p.recs) == 0 {
		p.done <- appended{}
		return
	}
	expect, encs := p.m.LastDecSeq, p.encs
	go func() {
		seqs, err := w.append(ctx, expect, encs)
		p.done <- appended{seqs, err}
	}()
}

// finish makes an appended batch final and acks its messages.
func (w *worker) finish(ctx context.Context, p *pending, seqs []uint64) error {
	if err := w.commitBatch(p, seqs, nil); err != nil {
		return err
	}
	return w.ack(ctx, p)
}

// commitBatch makes an appended batch final, under next when a next batch
// is decided on top of it.
func (w *worker) commitBatch(p *pending, seqs []uint64, next *pending) error {
	if len(p.recs) == 0 {
		return nil
	}
	if next != nil {
		w.st.CommitUnder(p.m, p.recs, seqs, &next.m)
	} else {
		w.st.Commit(p.m, p.recs, seqs)
	}
	if err := w.c.step(StepAppended, w.ds); err != nil {
		return err
	}
	w.observe(p)
	return nil
}

// ack settles a final batch's messages.
func (w *worker) ack(ctx context.Context, p *pending) error {
	c := w.c
	for i, it := range p.items {
		c.settle(ctx, it)
		if i == len(p.items)/2 && len(p.items) > 1 {
			if err := c.step(StepPartialAck, w.ds); err != nil {
				return err
			}
		}
	}
	for _, in := range p.items {
		w.cursor = max(w.cursor, in.Seq)
	}
	return c.step(StepAcked, w.ds)
}

// observe records an appended batch's metrics.
func (w *worker) observe(p *pending) {
	c := w.c
	now := time.Now()
	for j, r := range p.recs {
		c.metrics.decisions.WithLabelValues(c.dsLabel(w.ds), outcomeLabel(r), reasonLabel(r)).Inc()
		c.metrics.latency.Observe(now.Sub(p.items[p.idx[j]].stamp).Seconds())
		if r.ReadVersion > 0 {
			c.metrics.readLag.Observe(float64(p.lags[j]))
		}
	}
	c.metrics.batch.Observe(float64(len(p.recs)))
	c.setGauge(c.metrics.head, w.ds, float64(w.st.HeadVersion()))
}

// takeReady takes up to max queued messages, sorted by stream sequence,
// when none of them needs a gap check before it is decided (see
// worker.process); otherwise it takes nothing.
func (w *worker) takeReady(max int) []item {
	if w.needGap || w.c.multiSource() {
		return nil
	}
	w.qmu.Lock()
	defer w.qmu.Unlock()
	n := min(len(w.queue), max)
	for _, it := range w.queue[:n] {
		if it.redelivered || it.epoch != w.epoch {
			return nil
		}
	}
	items := make([]item, n)
	copy(items, w.queue)
	w.dequeue(n)
	sortItems(items)
	return items
}

// requeueFront puts items back at the head of the dataset's queue.
func (w *worker) requeueFront(items []item) {
	w.qmu.Lock()
	w.queue = append(items[:len(items):len(items)], w.queue...)
	w.qmu.Unlock()
}

// quietCreated makes a dataset that these batches created quiet at once
// when nothing more of it is queued, instead of at the sweep a second
// later (idle.go). A creation leaves its whole head decoded, and the
// decoder's block it was decoded into: for a table created with many
// fragments tens of KiB, which a set-up creating thousands of tables a
// second would otherwise hold for each of them at once. Packing now costs
// what the sweep's packing would, and what usually follows a creation,
// nothing or appends, builds on the packed head without decoding it
// (docs/design.md §5.5).
func (w *worker) quietCreated(start *table.Manifest) {
	if w.createdAlone(start) {
		w.st.Quiet()
	}
}

// packCreated is quietCreated's packing done already as the batch that
// creates the dataset is sent, while its record appends, when that
// creation is all the batch decided (state.PackCreated): the batch holds
// no verdict by then (prepare), so the decoded creation is not held for
// the length of the append.
func (w *worker) packCreated(start *table.Manifest) {
	if w.createdAlone(start) {
		w.st.PackCreated()
	}
}

// createdAlone reports whether the batches since start (the head before
// them) created the dataset, with nothing more of it queued.
func (w *worker) createdAlone(start *table.Manifest) bool {
	if start != nil || w.st.Head == nil {
		return false
	}
	w.qmu.Lock()
	defer w.qmu.Unlock()
	return len(w.queue) == 0
}
