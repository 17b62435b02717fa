package committer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/retry"
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
	i, found := slices.BinarySearch(vs, v) // vs[:i] are the versions below v
	if found {
		i++
	}
	if i == 0 {
		return 0, false
	}
	return vs[i-1], true
}

// forgetCheckpoint drops checkpoint v of ds from the ones known.
func (c *Committer) forgetCheckpoint(ds string, v uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i, found := slices.BinarySearch(c.cps[ds], v); found {
		c.cps[ds] = slices.Delete(c.cps[ds], i, i+1)
	}
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
func (c *Committer) writeCheckpoint(ctx context.Context, ds string, m *table.Manifest, decSeq, txnSeq uint64, log *declog.LogState) error {
	if err := c.dl.WriteCheckpoint(ctx, declog.Checkpoint{Dataset: ds, Manifest: m, DecSeq: decSeq, TxnSeq: txnSeq, Log: log}); err != nil {
		return err
	}
	c.addCheckpoint(ds, m.Version())
	c.pruneCheckpoints(ctx, ds)
	return nil
}

// pruneCheckpoints deletes the checkpoints of ds beyond the newest
// KeepCheckpoints. It runs after a new checkpoint was written, so the
// newest trusted one is never among those deleted; a failed delete is
// logged and retried after the next checkpoint.
func (c *Committer) pruneCheckpoints(ctx context.Context, ds string) {
	keep := c.cfg.KeepCheckpoints
	c.mu.Lock()
	vs := c.cps[ds]
	var old []uint64
	if keep > 0 && len(vs) > keep {
		old = slices.Clone(vs[:len(vs)-keep])
	}
	c.mu.Unlock()
	for _, v := range old {
		if err := c.dl.DeleteCheckpoint(ctx, ds, v); err != nil {
			c.log.Warn("prune checkpoint", "dataset", ds, "version", v, "err", err)
			return
		}
		c.forgetCheckpoint(ds, v)
	}
}

// errReplayDone ends loadState's body replay at the indexed top.
var errReplayDone = errors.New("committer: replay reached the indexed top")

// loadWholeLog fills st from the log: a headers-only pass indexes every
// decision (ids for exactly-once, version → record sequence), then the
// manifest is rebuilt from the newest trusted checkpoint plus the
// committed records after it.
func (c *Committer) loadWholeLog(ctx context.Context, st *state) error {
	from := uint64(1)
	adopted := false // the log starts with an adoption record (adopt.go)
	err := c.scanLog(ctx, c.sc.DecOf(st.Dataset), &from, true, func(r declog.Record) error {
		if r.Committed() {
			top := st.VersionSeq.Top()
			if top == 0 && r.Version > 1 {
				adopted = c.adoption(ctx, r)
			}
			if top == 0 && r.Version > 1 && (adopted || c.decRetain() > 0) {
				st.VersionSeq.Start(r.Version) // retention dropped the versions before, or an adopted table's are not in the log
			} else if want := top + 1; r.Version != want {
				return fmt.Errorf("%w: log of %s: record %d has version %d, want %d", errUntrustedLog, st.Dataset, r.Seq, r.Version, want)
			}
			st.VersionSeq.Push(r.Seq)
		}
		st.NoteLogged(r)
		return nil
	})
	if err != nil {
		return untrusted(err)
	}
	if err := c.checkStagedSeq(ctx, st); err != nil {
		return err
	}
	return c.replayFromIndex(ctx, st, adopted)
}

// loadState fills st from the newest checkpoint that carries the log
// state (decided ids, version index) and the records after it: a load
// costs the tail of the log, not its whole history. Without such a
// checkpoint, or when it fails the trust rule or does not agree with
// itself, the whole log is read (loadWholeLog).
func (c *Committer) loadState(ctx context.Context, st *state) error {
	begin := time.Now()
	v, ok := c.latestCheckpoint(st.Dataset, math.MaxUint64)
	if !ok {
		return c.loadWholeLogTimed(ctx, st, begin, "no checkpoint")
	}
	cp, err := c.dl.ReadCheckpoint(ctx, st.Dataset, v)
	switch {
	case errors.Is(err, declog.ErrUntrustedCheckpoint):
		c.log.Warn("unusable checkpoint; reading the whole log", "dataset", st.Dataset, "version", v, "err", err)
		return c.loadWholeLogTimed(ctx, st, begin, "untrusted checkpoint")
	case err != nil:
		return err
	case !usableLogState(cp):
		return c.loadWholeLogTimed(ctx, st, begin, "checkpoint without a usable log state")
	case c.outgrown(cp):
		return c.loadWholeLogTimed(ctx, st, begin, "checkpoint's decided ids outgrew the log's retention")
	}
	st.SetBase(cp.Manifest)
	st.SetLogState(cp)
	from, tail := cp.DecSeq+1, 0
	if err := c.scanLog(ctx, c.sc.DecOf(st.Dataset), &from, false, func(r declog.Record) error { tail++; return st.Replay(ctx, r) }); err != nil {
		return untrusted(err)
	}
	c.log.Debug("dataset state loaded from a checkpoint", "dataset", st.Dataset, "checkpoint", v, "tail", tail, "took", time.Since(begin))
	return c.checkStagedSeq(ctx, st)
}

// loadWholeLogTimed is loadWholeLog with a debug line saying why and how
// long it took.
func (c *Committer) loadWholeLogTimed(ctx context.Context, st *state, begin time.Time, why string) error {
	err := c.loadWholeLog(ctx, st)
	c.log.Debug("dataset state loaded from the whole log", "dataset", st.Dataset, "why", why, "took", time.Since(begin))
	return err
}

// outgrown reports whether cp's decided ids outnumber what the decision
// log retains (twice DecisionsPerSubject: committed and rejected records
// are retained per subject). A state loaded from the log knows only the
// retained decisions; one loaded from a checkpoint would keep every id
// ever decided, and its checkpoints would keep growing. Past the bound,
// a load reads the whole retained log instead, which trims the set.
func (c *Committer) outgrown(cp declog.Checkpoint) bool {
	limit := c.decRetain()
	return limit > 0 && cp.Log != nil && uint64(len(cp.Log.UUIDs)+len(cp.Log.IDs)) > 2*limit
}

// usableLogState reports whether cp carries a log state that agrees with
// its own version: the index ends at cp.Version, at cp.DecSeq.
func usableLogState(cp declog.Checkpoint) bool {
	ls := cp.Log
	if ls == nil || len(ls.IndexSeqs) == 0 || ls.IndexFirst == 0 {
		return false
	}
	top := ls.IndexFirst + uint64(len(ls.IndexSeqs)) - 1
	return top == cp.Version && ls.IndexSeqs[len(ls.IndexSeqs)-1] == cp.DecSeq
}

// replayFromIndex rebuilds the manifest of a state whose index pass read
// the whole log: from the newest trusted checkpoint plus the committed
// records after it.
func (c *Committer) replayFromIndex(ctx context.Context, st *state, adopted bool) error {
	top := st.VersionSeq.Top()
	if top == 0 {
		return nil
	}
	from := uint64(1) // first log sequence to replay bodies from
	if v, ok := c.latestCheckpoint(st.Dataset, top); ok {
		cp, err := c.dl.ReadCheckpoint(ctx, st.Dataset, v)
		if err != nil {
			c.log.Warn("unusable checkpoint; replaying from the start", "dataset", st.Dataset, "version", v, "err", err)
		} else {
			st.SetBase(cp.Manifest)
			from = cp.DecSeq + 1
		}
	}
	if first := st.VersionSeq.First; first > 1 && st.HeadVersion() < first && !adopted {
		return fmt.Errorf("%w: log of %s begins at version %d (retention), and no trusted checkpoint at or after it: the state cannot be rebuilt",
			errUntrustedLog, st.Dataset, first)
	}
	if st.HeadVersion() == top {
		return nil
	}
	// Another committer may append while this one loads (a standby
	// loading beside the leader): records past the index pass's top are
	// left for the catch-up that follows the index, not replayed here.
	committed := c.sc.Dec(st.Dataset, subject.Committed)
	advance := func(r declog.Record) error {
		if r.Version > top {
			return errReplayDone
		}
		return st.Advance(ctx, r)
	}
	err := c.scanLog(ctx, committed, &from, false, advance)
	if err == nil && st.HeadVersion() != top {
		// The records read ended before the index's top: the replica
		// that served them may have lost the last ones. The stream
		// leader's records decide.
		c.log.Warn("the decision log's replay ended before the index's top; reading again at the stream leader",
			"dataset", st.Dataset, "version", st.HeadVersion(), "top", top)
		c.metrics.leaderRereads.Inc()
		err = c.scanLogFrom(ctx, committed, &from, declog.ScanOptions{AtLeader: true}, advance)
	}
	if errors.Is(err, errReplayDone) {
		err = nil
	}
	if err != nil {
		return untrusted(err)
	}
	if st.HeadVersion() != top {
		return fmt.Errorf("%w: log of %s: replay reached version %d, index has %d", errUntrustedLog, st.Dataset, st.HeadVersion(), top)
	}
	return nil
}

// untrusted marks errors that come from the log's content, not from
// reading it: a malformed record, or one that does not replay.
func untrusted(err error) error {
	if errors.Is(err, declog.ErrMalformedRecord) || errors.Is(err, errReplay) {
		return fmt.Errorf("%w: %w", errUntrustedLog, err)
	}
	return err
}

// checkStagedSeq compares the staging sequences the log claims with
// CG_TXN's last sequence, read now (after the log). Only a stream leader's
// answer counts: while a replicated stream has no leader, each replica
// answers with its own state, and one that is catching up (restarted, or
// back from a partition) reports a last sequence far behind the log
// (measured in the nemesis: 651 against a claim of 1411). A claim beyond
// the leader's last sequence is read again, up to stagedSeqConfirm times
// a second apart, before the log is called untrusted: a leader that has
// just lost its quorum may answer once more with its older state, a
// corrupt claim stays.
func (c *Committer) checkStagedSeq(ctx context.Context, st *state) error {
	if st.LastTxnSeq == 0 {
		return nil
	}
	var err error
	for attempt := range stagedSeqConfirm {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
		var last uint64
		if err := retry.Do(ctx, logAttempts, logRetry, func(ctx context.Context) error {
			rctx, cancel := context.WithTimeout(ctx, logRequestTimeout)
			defer cancel()
			info, err := c.txn.Info(rctx)
			if err != nil {
				return fmt.Errorf("committer: staging stream info: %w", err)
			}
			if info.Cluster != nil && info.Config.Replicas > 1 && info.Cluster.Leader == "" {
				return errors.New("committer: staging stream info: answered without a leader")
			}
			last = info.State.LastSeq
			return nil
		}, func(error) bool { return ctx.Err() == nil }); err != nil {
			return err
		}
		if err = st.CheckStagedSeq(last); err == nil {
			return nil
		}
	}
	return err
}

// stagedSeqConfirm is how many leader answers must all put CG_TXN's last
// sequence below the log's claim before the log is untrusted.
const stagedSeqConfirm = 5

// logHistory reads versions older than the state's window from the
// checkpoint store and the log. It keeps the last manifest it built, so
// pinning many transactions to one old version costs one replay, and a
// later version replays forward from it.
//
// Its work is bounded while deciding: a manifest is rebuilt from the
// nearest checkpoint (or the cached manifest, or the log's start: the
// creation, or an adopted dataset's adoption) by replaying at most
// maxReplay versions; a version further from any is reported not found
// (READ_VERSION_TOO_OLD) rather than replayed for minutes. A checkpoint
// that fails to read is reported as such, never as a version not found. Replaying the
// log (loading, catching up) is not bounded: a committed record must
// replay, whatever it costs. Transactions read from the log are
// cached up to maxCachedTxnBytes.
type logHistory struct {
	c         *Committer
	st        *state
	cached    *table.Manifest
	txns      map[uint64]*lancepb.Transaction // committed transactions read from the log
	txnBytes  int                             // encoded size of txns
	maxReplay uint64                          // 0: unbounded
}

// maxReplay is how many versions deciding may replay to pin an old read
// version: two checkpoint intervals (0, unbounded, without checkpoints).
func (c *Committer) maxReplay() uint64 {
	if c.cfg.CheckpointEvery <= 0 {
		return 0
	}
	return 2 * uint64(c.cfg.CheckpointEvery)
}

// maxCachedTxnBytes bounds logHistory's transaction cache per dataset.
const maxCachedTxnBytes = 256 << 10

// CacheCost approximates the memory of what h caches: its transactions by
// their encoded size (as txnCost does) and its manifest, which shares
// little with head, at the cost of a recent manifest per fragment.
func (h *logHistory) CacheCost() int {
	n := 4 * h.txnBytes
	if h.cached != nil {
		n += manifestCost(0) + cachedFragmentCost*h.cached.NumFragments()
	}
	return n
}

// cachedFragmentCost approximates what one fragment of a manifest rebuilt
// from the log costs (the fragment and its place in the manifest's maps).
const cachedFragmentCost = 512

// DropCache forgets the cached manifest and transactions.
func (h *logHistory) DropCache() {
	h.cached, h.txns, h.txnBytes = nil, nil, 0
}

func (h *logHistory) Committed(ctx context.Context, v uint64) (*lancepb.Transaction, error) {
	st := h.st
	seq, ok := st.VersionSeq.At(v)
	if !ok {
		return nil, fmt.Errorf("transaction %s@%d: %w", st.Dataset, v, table.ErrVersionNotFound)
	}
	if txn, ok := h.txns[v]; ok {
		return txn, nil
	}
	h.c.metrics.historyReads.WithLabelValues(h.c.dsLabel(st.Dataset)).Inc()
	r, err := h.c.record(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("transaction %s@%d: record purged: %w", st.Dataset, v, table.ErrVersionNotFound)
	}
	if err != nil {
		return nil, err
	}
	txn, err := r.Txn()
	if err != nil {
		return nil, fmt.Errorf("transaction %s@%d: %w", st.Dataset, v, err)
	}
	n := len(r.Decision.GetTransaction())
	if h.txns == nil || h.txnBytes+n > maxCachedTxnBytes {
		h.txns, h.txnBytes = map[uint64]*lancepb.Transaction{}, 0
	}
	h.txns[v] = txn
	h.txnBytes += n
	return txn, nil
}

func (h *logHistory) Manifest(ctx context.Context, v uint64) (*table.Manifest, error) {
	st := h.st
	if h.cached != nil && h.cached.Version() == v {
		return h.cached, nil
	}
	if v == 0 || v > st.VersionSeq.Top() {
		return nil, fmt.Errorf("manifest %s@%d: %w", st.Dataset, v, table.ErrVersionNotFound)
	}
	m, cpErr := h.base(ctx, v)
	if m == nil {
		var err error
		if m, err = h.start(ctx, v); err != nil {
			return nil, unreadCheckpoint(err, cpErr)
		}
	}
	var from uint64 = 1
	if m != nil {
		from = m.Version() + 1
	}
	if h.maxReplay > 0 && h.st.Deciding && v+1-from > h.maxReplay {
		return nil, unreadCheckpoint(fmt.Errorf("manifest %s@%d: %d versions to replay, more than the %d a decision replays: %w",
			st.Dataset, v, v+1-from, h.maxReplay, table.ErrVersionNotFound), cpErr)
	}
	h.c.metrics.historyLoads.WithLabelValues(h.c.dsLabel(st.Dataset)).Inc()
	for u := from; u <= v; u++ {
		txn, err := st.Committed(ctx, u) // the window's, else the log's
		if err != nil {
			return nil, unreadCheckpoint(err, cpErr)
		}
		var next *table.Manifest
		if m != nil {
			next, err = applyTxn(ctx, m, txn, h)
		} else if adopted, _, _, adopting, aerr := declog.AdoptionOf(txn); adopting {
			next, err = adopted, aerr // a table adopted at version 1
		} else {
			next, err = declog.CreateAs(txn, st.Config.GetStorageVersion()) // as create decided it
		}
		if err != nil {
			return nil, fmt.Errorf("manifest %s@%d: replay: %w", st.Dataset, u, err)
		}
		m = next
	}
	h.cached = m
	return m, nil
}

// base returns the manifest to replay version v from: the cached one or
// the newest checkpoint at or before v, whichever is closer; nil when
// there is neither (start). A checkpoint that is gone (pruned since it
// was listed) is forgotten and the next older one tried; one that is
// untrusted is passed over, as it will never read. When a checkpoint
// fails to read otherwise, base returns what it would have without it,
// and the read error.
func (h *logHistory) base(ctx context.Context, v uint64) (*table.Manifest, error) {
	var m *table.Manifest
	if h.cached != nil && h.cached.Version() < v {
		m = h.cached
	}
	for below := v; ; {
		cv, ok := h.c.latestCheckpoint(h.st.Dataset, below)
		if !ok || m != nil && m.Version() >= cv {
			return m, nil
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cp, err := h.c.dl.ReadCheckpoint(cctx, h.st.Dataset, cv)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrObjectNotFound):
			h.c.forgetCheckpoint(h.st.Dataset, cv)
		case errors.Is(err, declog.ErrUntrustedCheckpoint):
		case err != nil:
			return m, err
		default:
			return cp.Manifest, nil
		}
		if cv <= 1 {
			return m, nil
		}
		below = cv - 1
	}
}

// unreadCheckpoint returns err, the failure of a replay that did without
// a checkpoint, or the checkpoint's read error cpErr when that is why:
// a version not found says the read version is no longer kept, and a
// checkpoint that failed to read may read the next time.
func unreadCheckpoint(err, cpErr error) error {
	if cpErr != nil && errors.Is(err, table.ErrVersionNotFound) {
		return fmt.Errorf("%w (replayed without the checkpoint, which did not read: %v)", cpErr, err)
	}
	return err
}

// start returns the manifest the dataset's log starts from, for a replay
// to version v without a checkpoint: nil when the log starts at the
// creation of version 1; the adopted manifest when its first record is an
// adoption (the versions before it are Lance's, not in the log). A log
// whose versions before v are gone otherwise (retention) has no start,
// and v is not found.
func (h *logHistory) start(ctx context.Context, v uint64) (*table.Manifest, error) {
	st := h.st
	first := st.VersionSeq.First
	if first <= 1 {
		return nil, nil
	}
	seq, ok := st.VersionSeq.At(first)
	if !ok || v < first {
		return nil, fmt.Errorf("manifest %s@%d: the log begins at version %d: %w", st.Dataset, v, first, table.ErrVersionNotFound)
	}
	r, err := h.c.record(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("manifest %s@%d: record of version %d purged: %w", st.Dataset, v, first, table.ErrVersionNotFound)
	}
	if err != nil {
		return nil, err
	}
	if r.Decision.GetAdoptedManifest() == nil {
		return nil, fmt.Errorf("manifest %s@%d: the log begins at version %d, and no checkpoint covers it: %w", st.Dataset, v, first, table.ErrVersionNotFound)
	}
	m, _, err := declog.Replay(ctx, nil, r, h)
	if err != nil {
		return nil, fmt.Errorf("manifest %s@%d: replay adoption: %w", st.Dataset, first, err)
	}
	return m, nil
}

// errCheckpointBehind reports a batch held back because appending it
// would let the decision log's retention drop records newer than the
// dataset's newest checkpoint: the state could no longer be rebuilt. A
// checkpoint of the head is requested; the batch is retried after it.
var errCheckpointBehind = errors.New("committer: checkpoint too far behind the log's retention")

// checkRetention holds back a batch that would commit versions up to
// top when the log keeps only the newest decRetain committed records of
// the dataset: the newest checkpoint's record, from which the state is
// rebuilt, must stay among them (version 1 while there is none). It
// requests a checkpoint of the head before the batch (m.head).
func (w *worker) checkRetention(m mark, top uint64) error {
	limit := w.c.decRetain()
	if limit == 0 || top == m.Versions {
		return nil
	}
	cpv, _ := w.c.latestCheckpoint(w.ds, top)
	if top < cpv+limit {
		return nil
	}
	if prev := m.Head; prev != nil {
		if seq, ok := w.st.VersionSeq.At(prev.Version()); ok {
			w.c.cpw.offer(cpReq{ds: w.ds, m: prev, decSeq: seq, txnSeq: m.LastTxnSeq})
		}
	}
	return fmt.Errorf("%w: %s: version %d would leave checkpoint %d out of the %d records kept; waiting for a checkpoint",
		errCheckpointBehind, w.ds, top, cpv, limit)
}

// checkpointWriter writes checkpoints in the background for every
// dataset, on checkpointWorkers goroutines: per dataset only the newest
// request waits, and one dataset's checkpoint is never written twice at
// once.
type checkpointWriter struct {
	c       *Committer
	mu      sync.Mutex
	waiting map[string]cpReq // newest request per dataset, not yet taken
	busy    map[string]bool  // datasets being written
	order   []string         // datasets with a waiting request, oldest first
	wake    chan struct{}    // a request arrived
	ctx     context.Context  // the writes' context; cancelled by close, which ends the writers
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

type cpReq struct {
	ds             string
	m              *table.Manifest
	decSeq, txnSeq uint64
	log            *declog.LogState // nil: the checkpoint holds the manifest only
}

// checkpointWorkers is how many checkpoints are written at once.
const checkpointWorkers = 2

func newCheckpointWriter(c *Committer) *checkpointWriter {
	cw := &checkpointWriter{c: c, waiting: map[string]cpReq{}, busy: map[string]bool{},
		wake: make(chan struct{}, checkpointWorkers)}
	cw.ctx, cw.cancel = context.WithCancel(context.Background())
	for range checkpointWorkers {
		cw.wg.Add(1)
		go cw.loop()
	}
	return cw
}

func (cw *checkpointWriter) loop() {
	defer cw.wg.Done()
	for {
		select {
		case <-cw.ctx.Done():
			return
		default:
		}
		r, ok := cw.take()
		if !ok {
			select {
			case <-cw.ctx.Done():
				return
			case <-cw.wake:
				continue
			}
		}
		cw.write(r)
		cw.mu.Lock()
		delete(cw.busy, r.ds)
		again := len(cw.waiting) > 0
		cw.mu.Unlock()
		if again {
			cw.signal()
		}
	}
}

// take returns the oldest waiting request of a dataset not being written.
func (cw *checkpointWriter) take() (cpReq, bool) {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	for i, ds := range cw.order {
		if cw.busy[ds] {
			continue
		}
		r := cw.waiting[ds]
		delete(cw.waiting, ds)
		cw.order = append(cw.order[:i], cw.order[i+1:]...)
		cw.busy[ds] = true
		return r, true
	}
	return cpReq{}, false
}

func (cw *checkpointWriter) write(r cpReq) {
	c := cw.c
	if err := c.step(StepCheckpoint, r.ds); err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(cw.ctx, 30*time.Second)
	err := c.writeCheckpoint(ctx, r.ds, r.m, r.decSeq, r.txnSeq, r.log)
	cancel()
	result := "ok"
	if err != nil {
		result = "error"
		c.log.Warn("checkpoint failed", "dataset", r.ds, "version", r.m.Version(), "err", err)
	}
	c.metrics.checkpoints.WithLabelValues(c.dsLabel(r.ds), result).Inc()
}

func (cw *checkpointWriter) signal() {
	select {
	case cw.wake <- struct{}{}:
	default:
	}
}

// offer queues a checkpoint, replacing one of the same dataset still
// waiting.
func (cw *checkpointWriter) offer(r cpReq) {
	cw.mu.Lock()
	if _, ok := cw.waiting[r.ds]; !ok {
		cw.order = append(cw.order, r.ds)
	}
	cw.waiting[r.ds] = r
	cw.mu.Unlock()
	cw.signal()
}

// close stops the writers. A checkpoint being written is abandoned and
// those waiting are dropped: a stop must not wait on a store that lost
// its leader (each write would wait out its timeout). A checkpoint cut
// short is never seen — its metadata, written last, is what lists it —
// and the next start writes checkpoints again when due.
func (cw *checkpointWriter) close() {
	cw.cancel()
	cw.wg.Wait()
}

// maybeCheckpoint queues a checkpoint when the batch crossed a multiple of
// CheckpointEvery (prev is the head before the batch).
func (w *worker) maybeCheckpoint(prev *table.Manifest) {
	k := w.c.cfg.CheckpointEvery
	if k <= 0 || w.st.Head == nil {
		return
	}
	var before uint64
	if prev != nil {
		before = prev.Version()
	}
	now := w.st.HeadVersion()
	if now/uint64(k) == before/uint64(k) {
		return
	}
	seq, _ := w.st.VersionSeq.At(now)
	// Taken after the batch's commit: the decided ids are exactly those
	// the log holds (none provisional), all at or before lastDecSeq.
	w.c.cpw.offer(cpReq{ds: w.ds, m: w.st.Head, decSeq: seq, txnSeq: w.st.LastTxnSeq, log: w.st.LogState()})
}
