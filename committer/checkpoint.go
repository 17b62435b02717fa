package committer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/subject"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// loadCheckpointIndex lists the checkpoint object store once.
func (c *Committer) loadCheckpointIndex(ctx context.Context) error {
	all, err := c.dl.CheckpointVersions(ctx)
	if err != nil {
		return fmt.Errorf("committer: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for ds, vs := range all {
		c.cps[ds] = vs
	}
	return nil
}

// latestCheckpoint returns the newest known checkpoint version ≤ v.
func (c *Committer) latestCheckpoint(ds string, v uint64) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	vs := c.cps[ds]
	i, _ := slices.BinarySearch(vs, v+1)
	if i == 0 {
		return 0, false
	}
	return vs[i-1], true
}

func (c *Committer) addCheckpoint(ds string, v uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	vs := c.cps[ds]
	if i, found := slices.BinarySearch(vs, v); !found {
		c.cps[ds] = slices.Insert(vs, i, v)
	}
}

// writeCheckpoint stores the checkpoint of a manifest; the committer calls
// it every K versions.
func (c *Committer) writeCheckpoint(ctx context.Context, ds string, m *table.Manifest, decSeq, txnSeq uint64) error {
	if err := c.dl.WriteCheckpoint(ctx, declog.Checkpoint{Dataset: ds, Manifest: m, DecSeq: decSeq, TxnSeq: txnSeq}); err != nil {
		return err
	}
	c.addCheckpoint(ds, m.Version())
	return nil
}

// loadState fills st from the log: a headers-only pass indexes every
// decision (ids for exactly-once, version → record sequence), then the
// manifest is rebuilt from the newest trusted checkpoint plus the
// committed records after it.
func (c *Committer) loadState(ctx context.Context, st *state) error {
	from := uint64(1)
	err := c.scanLog(ctx, c.sc.DecOf(st.ds), &from, true, func(r declog.Record) error {
		if r.Committed() {
			if want := uint64(len(st.versionSeq)) + 1; r.Version != want {
				return fmt.Errorf("committer: log of %s: record %d has version %d, want %d", st.ds, r.Seq, r.Version, want)
			}
			st.versionSeq = append(st.versionSeq, r.Seq)
		}
		st.decided.add(r.TxnID)
		st.lastDecSeq = r.Seq
		st.lastTxnSeq = max(st.lastTxnSeq, r.TxnSeq)
		return nil
	})
	if err != nil {
		return err
	}
	top := uint64(len(st.versionSeq))
	if top == 0 {
		return nil
	}
	from = 1 // first log sequence to replay bodies from
	if v, ok := c.latestCheckpoint(st.ds, top); ok {
		cp, err := c.dl.ReadCheckpoint(ctx, st.ds, v)
		if err != nil {
			c.log.Warn("unusable checkpoint; replaying from the start", "dataset", st.ds, "version", v, "err", err)
		} else {
			st.head = cp.Manifest
			from = cp.DecSeq + 1
		}
	}
	if st.headVersion() == top {
		return nil
	}
	err = c.scanLog(ctx, c.sc.Dec(st.ds, subject.Committed), &from, false, func(r declog.Record) error { return st.advance(ctx, r) })
	if err != nil {
		return err
	}
	if st.headVersion() != top {
		return fmt.Errorf("committer: log of %s: replay reached version %d, index has %d", st.ds, st.headVersion(), top)
	}
	return nil
}

// logHistory reads versions older than the state's window from the
// checkpoint store and the log. It keeps the last manifest it built, so
// pinning many transactions to one old version costs one replay.
type logHistory struct {
	c      *Committer
	st     *state
	cached *table.Manifest
	txns   map[uint64]*lancepb.Transaction // committed transactions read from the log, bounded
}

// maxCachedTxns bounds logHistory's transaction cache.
const maxCachedTxns = 4096

func (h *logHistory) Committed(ctx context.Context, v uint64) (*lancepb.Transaction, error) {
	st := h.st
	if v == 0 || v > uint64(len(st.versionSeq)) || st.versionSeq[v-1] == 0 {
		return nil, fmt.Errorf("transaction %s@%d: %w", st.ds, v, table.ErrVersionNotFound)
	}
	if txn, ok := h.txns[v]; ok {
		return txn, nil
	}
	r, err := h.c.record(ctx, st.versionSeq[v-1])
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("transaction %s@%d: record purged: %w", st.ds, v, table.ErrVersionNotFound)
	}
	if err != nil {
		return nil, err
	}
	txn, err := r.Txn()
	if err != nil {
		return nil, fmt.Errorf("transaction %s@%d: %w", st.ds, v, err)
	}
	if h.txns == nil || len(h.txns) >= maxCachedTxns {
		h.txns = map[uint64]*lancepb.Transaction{}
	}
	h.txns[v] = txn
	return txn, nil
}

func (h *logHistory) Manifest(ctx context.Context, v uint64) (*table.Manifest, error) {
	st := h.st
	if h.cached != nil && h.cached.Version() == v {
		return h.cached, nil
	}
	if v == 0 || v > uint64(len(st.versionSeq)) {
		return nil, fmt.Errorf("manifest %s@%d: %w", st.ds, v, table.ErrVersionNotFound)
	}
	var m *table.Manifest
	from := uint64(1)
	if cv, ok := h.c.latestCheckpoint(st.ds, v); ok {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cp, err := h.c.dl.ReadCheckpoint(cctx, st.ds, cv)
		cancel()
		if err == nil {
			m, from = cp.Manifest, cv+1
		}
	}
	for u := from; u <= v; u++ {
		txn, err := h.Committed(ctx, u)
		if err != nil {
			return nil, err
		}
		next, err := applyTxn(ctx, m, txn, h)
		if err != nil {
			return nil, fmt.Errorf("manifest %s@%d: replay: %w", st.ds, u, err)
		}
		m = next
	}
	h.cached = m
	return m, nil
}

// checkpointer writes checkpoints in the background, newest first: while
// one is being written, only the latest request waits.
type checkpointer struct {
	c    *Committer
	ds   string
	req  chan cpReq
	done chan struct{}
}

type cpReq struct {
	m              *table.Manifest
	decSeq, txnSeq uint64
}

func newCheckpointer(c *Committer, ds string) *checkpointer {
	cp := &checkpointer{c: c, ds: ds, req: make(chan cpReq, 1), done: make(chan struct{})}
	go cp.loop()
	return cp
}

func (cp *checkpointer) loop() {
	defer close(cp.done)
	for r := range cp.req {
		if err := cp.c.step(StepCheckpoint, cp.ds); err != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := cp.c.writeCheckpoint(ctx, cp.ds, r.m, r.decSeq, r.txnSeq)
		cancel()
		result := "ok"
		if err != nil {
			result = "error"
			cp.c.log.Warn("checkpoint failed", "dataset", cp.ds, "version", r.m.Version(), "err", err)
		}
		cp.c.metrics.checkpoints.WithLabelValues(cp.ds, result).Inc()
	}
}

// offer queues a checkpoint, replacing one still waiting.
func (cp *checkpointer) offer(r cpReq) {
	for {
		select {
		case cp.req <- r:
			return
		default:
			select {
			case <-cp.req:
			default:
			}
		}
	}
}

// close stops the writer after the write in progress.
func (cp *checkpointer) close() {
	close(cp.req)
	<-cp.done
}

// maybeCheckpoint queues a checkpoint when the batch crossed a multiple of
// CheckpointEvery (prev is the head before the batch).
func (w *worker) maybeCheckpoint(prev *table.Manifest) {
	k := w.c.cfg.CheckpointEvery
	if k <= 0 || w.st.head == nil {
		return
	}
	var before uint64
	if prev != nil {
		before = prev.Version()
	}
	now := w.st.headVersion()
	if now/uint64(k) == before/uint64(k) {
		return
	}
	w.cp.offer(cpReq{m: w.st.head, decSeq: w.st.versionSeq[now-1], txnSeq: w.st.lastTxnSeq})
}
