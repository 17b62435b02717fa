package committer

import (
	"context"
	"errors"
	"sync"
	"time"

	"cellguard/internal/declog"
)

// Group commit across datasets.
//
// Each dataset's pipeline has at most one append in flight; a committer
// serving many datasets has many. The coalescer sends them to the log
// together: what the pipelines hand it while earlier appends are in
// flight goes out in the next round, as one atomic batch in which each
// dataset's group keeps its own fence (the server checks every group's
// fence inside the batch: declog.AppendGroups). One round trip, and on a
// single-replica file log one sync, serves every dataset of the round.
// Nothing waits on a timer: a round takes what is queued when it starts,
// up to the server's batch limit.
//
// A batch is stored whole or not at all. Refused (one dataset's fence, a
// duplicate, no room: the server does not say whose), its groups are
// appended again each alone, so that each dataset gets its own outcome
// and only the one at fault rolls back. An unknown outcome (a timeout, a
// lost connection) is every group's: each pipeline catches up from the
// log, as after an append of its own, and finds its records there or
// not, all of one batch alike.

// groupRounds bounds the rounds in flight at once: one is sent while the
// answer of the other is awaited.
const groupRounds = 2

// appendReq is one dataset's group waiting for a round.
type appendReq struct {
	ds     string
	expect uint64
	encs   []declog.Encoded
	done   chan appendOut
}

type appendOut struct {
	seqs []uint64
	err  error
}

// coalescer queues the groups of the committer's datasets for rounds.
type coalescer struct {
	c      *Committer
	mu     sync.Mutex
	queue  []*appendReq
	rounds int            // rounds running
	wg     sync.WaitGroup // the rounds' goroutines
}

// append appends one dataset's group, fenced on expect, in the next
// round, and returns the records' sequences.
func (q *coalescer) append(ds string, expect uint64, encs []declog.Encoded) ([]uint64, error) {
	r := &appendReq{ds: ds, expect: expect, encs: encs, done: make(chan appendOut, 1)}
	q.mu.Lock()
	q.queue = append(q.queue, r)
	start := q.rounds < groupRounds
	if start {
		q.rounds++
		q.wg.Add(1)
	}
	q.mu.Unlock()
	if start {
		go q.run()
	}
	out := <-r.done
	return out.seqs, out.err
}

// wait waits for the rounds' goroutines to end (once no dataset appends).
func (q *coalescer) wait() { q.wg.Wait() }

// run sends rounds while groups are queued.
func (q *coalescer) run() {
	defer q.wg.Done()
	for {
		q.mu.Lock()
		batch := q.take()
		if len(batch) == 0 {
			q.rounds--
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		q.round(batch)
	}
}

// take takes the queued groups, in order, up to declog.MaxBatch records
// (a group is never split; a larger one goes alone).
func (q *coalescer) take() []*appendReq {
	n, recs := 0, 0
	for n < len(q.queue) {
		k := len(q.queue[n].encs)
		if n > 0 && recs+k > declog.MaxBatch {
			break
		}
		recs += k
		n++
	}
	batch := make([]*appendReq, n)
	copy(batch, q.queue)
	rest := copy(q.queue, q.queue[n:])
	clear(q.queue[rest:])
	q.queue = q.queue[:rest]
	return batch
}

// round appends batch: one shared atomic batch when it holds several
// groups of at least Committer.atomicMin records in all, otherwise each
// group as its dataset's own append, side by side. A round of several
// forms only while both rounds are in flight, that is while the log is
// busy. On a replicated or memory log (atomicMin 2) one atomic batch
// replicates the round at once; on a single-replica file log the server
// stages every atomic batch in a file store of its own, created and
// synced, which costs more than a few fenced appends (docs/design.md
// §5.6).
func (q *coalescer) round(batch []*appendReq) {
	c := q.c
	recs := 0
	for _, r := range batch {
		recs += len(r.encs)
	}
	shared := len(batch) > 1 && recs >= c.atomicMin
	if h := c.cfg.roundHook; h != nil {
		dss := make([]string, len(batch))
		for i, r := range batch {
			dss[i] = r.ds
		}
		h(dss, shared)
	}
	if !shared {
		q.alone(batch)
		return
	}
	groups := make([]declog.Group, len(batch))
	for i, r := range batch {
		groups[i] = declog.Group{Dataset: r.ds, Expect: r.expect, Encs: r.encs}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), appendTimeout)
	seqs, err := c.dl.AppendGroups(ctx, groups)
	cancel()
	c.metrics.appended("shared", start)
	c.metrics.appendDatasets.Observe(float64(len(batch)))
	switch {
	case err == nil:
		for i, r := range batch {
			r.done <- appendOut{seqs: seqs[i]}
		}
	case errors.Is(err, declog.ErrRefused):
		// Nothing stored: each group again, alone, for its own outcome.
		c.metrics.sharedRefused.Inc()
		q.alone(batch)
	default:
		// A crash, or an outcome unknown for all the batch alike.
		for _, r := range batch {
			r.done <- appendOut{err: err}
		}
	}
}

// alone appends each group of batch on its own, at once.
func (q *coalescer) alone(batch []*appendReq) {
	one := func(r *appendReq) {
		seqs, err := q.c.appendOwn(r.ds, r.expect, r.encs)
		r.done <- appendOut{seqs, err}
	}
	if len(batch) == 1 {
		one(batch[0])
		return
	}
	var wg sync.WaitGroup
	for _, r := range batch {
		wg.Go(func() { one(r) })
	}
	wg.Wait()
}
