package committer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/dataplane"
	"cellguard/internal/declog"
	"cellguard/internal/retry"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// worker owns one dataset: its state, its cursor, its failures. It has
// no goroutine and no consumer of its own: the partition loops hand it
// its messages (handle), one call at a time (mu), so a dataset costs
// memory only for its state, and nothing at all once evicted.
type worker struct {
	c  *Committer
	ds string
	mu sync.Mutex // held by handle and by the sweeps
	st *state     // nil until loaded, and after an eviction or a failure
	// cursor is the highest CG_TXN sequence handled (decided or skipped).
	cursor uint64
	// epoch is the newest partition epoch of the messages handled: a
	// message from another epoch makes its batch check first that no
	// undecided message precedes it. needGap asks for that check whatever
	// the epochs (after a load, or a fence).
	epoch   uint64
	needGap bool
	// active is when a message last arrived, for idle eviction.
	active time.Time
	// act is the worker's place in activity order while it has a state
	// (activity.go); guarded by the committer's activity.mu.
	act actNode
	// failures counts consecutive failed batches; until retryAt, the
	// dataset's messages are handed back to wait.
	failures int
	retryAt  time.Time
	stopped  bool // the decision log cannot be trusted: see errUntrustedLog
	// leaderReads: the log was found untrusted once; every read of it
	// goes to the stream leader from then on (status.go, failed).
	leaderReads bool
	// untrustedRetries counts the loads after the leader's records were
	// refused; refusedAt names the leaders they were refused at.
	untrustedRetries int
	refusedAt        map[string]bool
	// status is what DatasetStatuses reports.
	status atomic.Pointer[DatasetStatus]

	// The messages partitions handed over, waiting for a decider
	// (dispatch.go); queued is set while the dataset is in the deciders'
	// queue or being decided.
	qmu    sync.Mutex
	queue  []item
	queued bool
	// arrived, while a pipeline waits on an append (pipeline.go), gets a
	// token when messages are queued; nil otherwise. Guarded by qmu.
	arrived chan struct{}
}

func newWorker(c *Committer, ds string) *worker {
	return &worker{c: c, ds: ds}
}

// arrivals is the pool of the channels a waiting pipeline lends its
// worker as arrived: only the datasets appending hold one.
var arrivals = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

// watchArrivals lends the worker a channel that gets a token whenever
// messages are queued, until unwatch is called.
func (w *worker) watchArrivals() (arrived <-chan struct{}, unwatch func()) {
	ch := arrivals.Get().(chan struct{})
	w.qmu.Lock()
	w.arrived = ch
	w.qmu.Unlock()
	return ch, func() {
		w.qmu.Lock()
		w.arrived = nil
		w.qmu.Unlock()
		select { // no one sends any more: empty it for the next borrower
		case <-ch:
		default:
		}
		arrivals.Put(ch)
	}
}

// item is one staged message to decide: delivered by a partition
// consumer (msg set), or read from the stream to close a gap (msg nil:
// it is deleted from CG_TXN once decided, since no consumer of ours
// holds it).
type item struct {
	staged
	ds          string
	stamp       time.Time // when it was staged (server time)
	msg         jetstream.Msg
	redelivered bool
	epoch       uint64 // the delivering partition's epoch
}

// sortItems orders items by CG_TXN sequence.
func sortItems(items []item) {
	slices.SortStableFunc(items, func(a, b item) int { return cmp.Compare(a.Seq, b.Seq) })
}

// stoppedRedelivery is how long the messages of a stopped dataset wait
// before they are delivered (and handed back) again.
const stoppedRedelivery = 30 * time.Second

// handle decides a dataset's messages from one partition batch, sorted
// by stream sequence. A dataset that cannot decide (its state does not
// load, the log is unreachable, it is stopped) hands its messages back
// with a delay and never holds up the partition's other datasets. Only
// an injected crash is returned.
func (w *worker) handle(ctx context.Context, items []item) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	w.markActive(now)
	w.c.owned.delivered(w.ds, now)
	switch {
	case w.stopped:
		nakItems(items, stoppedRedelivery)
		return nil
	case now.Before(w.retryAt):
		nakItems(items, w.retryAt.Sub(now))
		return nil
	}
	w.honorCacheRequest()
	if w.leaderReads {
		ctx = declog.AtLeader(ctx)
	}
	err := w.ensureLoaded(ctx)
	if err == nil {
		err = w.process(ctx, items)
	}
	if err != nil {
		return w.failed(ctx, err, items)
	}
	w.failures = 0
	w.setLoadedStatus()
	return nil
}

// markActive records that a message arrived at now; a loaded dataset
// moves to the front of the activity order (activity.go).
func (w *worker) markActive(now time.Time) {
	w.active = now
	if w.st != nil {
		w.c.act.touch(w, now)
	}
}

// adopt makes st the dataset's state, the most recently active.
func (w *worker) adopt(st *state) {
	w.st = st
	w.c.act.touch(w, w.active)
}

// setLoadedStatus reports a loaded dataset: deciding, or deleted.
func (w *worker) setLoadedStatus() {
	if w.st != nil && w.st.Deleted != nil {
		w.setStatus(DatasetDeleted, "", "")
		return
	}
	w.setStatus(DatasetDeciding, "", "")
}

// ensureLoaded loads the state when there is none (first message, after
// an eviction or a failure).
func (w *worker) ensureLoaded(ctx context.Context) error {
	if w.st != nil {
		return nil
	}
	w.setStatus(DatasetLoading, "", "")
	w.active = time.Now() // a preloaded dataset is not idle yet
	return w.load(ctx)
}

// nakItems hands delivered messages back, to be delivered again after
// delay.
func nakItems(items []item, delay time.Duration) {
	for _, it := range items {
		if it.msg != nil {
			_ = it.msg.NakWithDelay(delay)
		}
	}
}

// load builds the state from the latest checkpoint and the log.
func (w *worker) load(ctx context.Context) error {
	c := w.c
	st := newStateOf(w.ds, c.stateLimits(), nil)
	st.Deletions = datasetDeletions{c: c, st: st}
	st.Older = &logHistory{c: c, st: st, maxReplay: c.maxReplay()}
	if err := c.loadState(ctx, st); err != nil {
		return err
	}
	if err := c.loadConfig(ctx, st); err != nil {
		return err
	}
	st.FitBudget()
	w.adopt(st)
	w.cursor = st.LastTxnSeq
	w.needGap = true
	c.setGauge(c.metrics.head, w.ds, float64(st.HeadVersion()))
	return nil
}

// maxFill bounds the messages one gap check reads from the stream; the
// rest of a longer gap is read by the next batch.
const maxFill = 256

// fillGaps returns items together with every undecided message of the
// dataset staged before the last of them that is not among them,
// sorted: messages delivered to another committer before a pin change,
// lost on the way, waiting for a redelivery, staged under another
// partition count or before CG_TXN was partitioned. Deciding them here,
// in order, is what keeps a dataset's decisions in staging order
// whatever the consumers deliver. With no items it reads every
// undecided message (a drain). When a gap is longer than maxFill, the
// items after the part read are handed back for later.
func (w *worker) fillGaps(ctx context.Context, items []item) ([]item, error) {
	top := uint64(math.MaxUint64)
	if len(items) > 0 {
		top = items[len(items)-1].Seq
	}
	have := make(map[uint64]bool, len(items))
	for _, it := range items {
		have[it.Seq] = true
	}
	from := max(w.cursor, w.st.LastTxnSeq) + 1
	var extra []item
	capped := uint64(math.MaxUint64) // the last sequence read where a filter hit maxFill
	for _, filter := range w.c.stagedFilters(w.ds) {
		read := 0
		for next := from; ; read++ {
			if read == maxFill {
				capped = min(capped, next-1)
				break
			}
			m, err := w.c.getStaged(ctx, next, filter)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("committer: gap check for %s: %w", w.ds, err)
			}
			if m.Sequence > top {
				break
			}
			if !have[m.Sequence] {
				have[m.Sequence] = true
				extra = append(extra, item{
					staged: staged{Seq: m.Sequence, Data: m.Data, MsgID: m.Header.Get(subject.HdrMsgID), Header: m.Header},
					ds:     w.ds, stamp: m.Time,
				})
			}
			if m.Sequence == top {
				break // the batch's last message: nothing after it is asked for
			}
			next = m.Sequence + 1
		}
	}
	if len(extra) == 0 {
		return items, nil
	}
	w.c.log.Info("undecided messages before the batch; deciding them first, in order", "dataset", w.ds, "read", len(extra))
	all := append(extra, items...)
	sortItems(all)
	// Past a capped filter's last read sequence, messages of that filter
	// may be missing: hand back everything after it for later.
	cut := len(all)
	for i, it := range all {
		if it.Seq > capped {
			cut = i
			break
		}
	}
	nakItems(all[cut:], 100*time.Millisecond)
	return all[:cut], nil
}

// process decides one dataset's messages: skip what is decided, decide
// the rest in order, append the decisions as one fenced batch, then ack.
//
// The batch in hand is finished even if ctx ends meanwhile (its I/O runs
// on a context without cancellation); only retries stop when ctx is done,
// handing the rest back.
func (w *worker) process(runCtx context.Context, items []item) error {
	c := w.c
	ctx := context.WithoutCancel(runCtx)
	check := w.needGap || len(items) == 0 || c.multiSource()
	epoch := w.epoch
	for _, it := range items {
		check = check || it.redelivered || it.epoch != w.epoch
		epoch = max(epoch, it.epoch)
	}
	if check {
		var err error
		if items, err = w.fillGaps(ctx, items); err != nil {
			return err
		}
		w.needGap = false
	}
	w.epoch = epoch
	if len(items) == 0 {
		return nil
	}
	items, err := w.pipeline(ctx, runCtx, items)
	for attempt := 0; err != nil; attempt++ {
		if errors.Is(err, errCrash) || errors.Is(err, errBrokenState) || errors.Is(err, errUntrustedLog) {
			return err
		}
		if errors.Is(err, declog.ErrLogFull) {
			// Nothing was appended, and retrying at once cannot help:
			// the dataset waits (failed: its status says so) and its
			// messages stay staged.
			return err
		}
		switch {
		case errors.Is(err, errCheckpointBehind):
			c.log.Warn("batch held back until a checkpoint is written", "dataset", w.ds, "attempt", attempt, "err", err)
		case errors.Is(err, ErrFenced):
			c.metrics.fencing.WithLabelValues(c.dsLabel(w.ds)).Inc()
			c.log.Warn("fenced: another committer appended first; reloading", "dataset", w.ds, "err", err)
		default:
			c.metrics.appendErr.WithLabelValues(c.dsLabel(w.ds)).Inc()
			c.log.Warn("append failed; reloading and retrying", "dataset", w.ds, "attempt", attempt, "err", err)
		}
		if runCtx.Err() != nil {
			// Stopping: whether the append landed is for the next load
			// to read from the log. Catching up here could wait out the
			// retries of a log that lost its leader, and hold the stop
			// for that long. The state is dropped; the messages stay
			// unacked, redelivered to whoever serves the dataset next.
			w.dropState()
			w.needGap = true
			return nil
		}
		if err := w.catchUp(ctx); err != nil {
			return err
		}
		if errors.Is(err, ErrFenced) || attempt >= 20 {
			// Someone else is deciding: hand back what is still undecided.
			w.ackDecided(items)
			w.needGap = true
			return nil
		}
		// Pause on ctx: a stop is seen above, at the next attempt.
		_ = retry.Sleep(ctx, logRetry.Delay(attempt))
		err = w.decideAndAppend(ctx, items)
	}
	return nil
}

// decideAndAppend is one attempt at a batch, on its own (pipeline.go has
// the stages). On error the state is rolled back to what it was before
// the attempt.
func (w *worker) decideAndAppend(ctx context.Context, items []item) error {
	start := w.st.Head
	p, err := w.decideBatch(ctx, items)
	if err == nil {
		err = w.prepare(ctx, p)
	}
	if err != nil {
		return err
	}
	w.send(ctx, p)
	w.packCreated(start)
	res := <-p.done
	if res.err != nil {
		w.st.Rollback(p.m)
		return res.err
	}
	if err := w.finish(ctx, p, res.seqs); err != nil {
		return err
	}
	if len(p.recs) > 0 {
		w.maybeCheckpoint(start)
	}
	return nil
}

// appendTimeout bounds one append. An append answered late is no harm
// (its outcome is read back from the log and the batch retried, fenced),
// but a request lost with a killed stream leader is never answered: the
// dataset would stall for this long. A healthy R3 append takes
// milliseconds.
const appendTimeout = 1500 * time.Millisecond

// append appends recs fenced on expect, in the committer's next round
// of appends, shared with other datasets' groups (coalesce.go).
func (w *worker) append(_ context.Context, expect uint64, recs []declog.Encoded) ([]uint64, error) {
	return w.c.groups.append(w.ds, expect, recs)
}

// appendOwn appends the group recs of ds alone, fenced on expect. Groups
// of at least Committer.atomicMin decisions go as one atomic batch;
// smaller ones as a chain of single fenced appends, each guarded by the
// sequence the previous one got. A chain that fails part way is rolled
// back as a whole; the caller's catch-up reads back what did land.
func (c *Committer) appendOwn(ds string, expect uint64, recs []declog.Encoded) ([]uint64, error) {
	c.metrics.appendDatasets.Observe(1)
	ctx := context.Background()
	if len(recs) >= c.atomicMin {
		defer c.metrics.appended("atomic", time.Now())
		actx, cancel := context.WithTimeout(ctx, appendTimeout)
		defer cancel()
		return c.dl.AppendEncoded(actx, ds, expect, recs)
	}
	defer c.metrics.appended("chain", time.Now())
	seqs := make([]uint64, 0, len(recs))
	for i := range recs {
		actx, cancel := context.WithTimeout(ctx, appendTimeout)
		s, err := c.dl.AppendEncoded(actx, ds, expect, recs[i:i+1])
		cancel()
		if err != nil {
			return nil, err
		}
		expect = s[0]
		seqs = append(seqs, expect)
		if i == (len(recs)-1)/2 && len(recs) > 1 {
			if err := c.step(StepMidBatch, ds); err != nil {
				return nil, err
			}
		}
	}
	return seqs, nil
}

// ackDecided settles the messages that now have a decision and hands
// the others back (to whoever is pinned).
func (w *worker) ackDecided(items []item) {
	for _, it := range items {
		switch {
		case it.Seq <= w.st.LastTxnSeq:
			w.c.settle(context.Background(), it)
		case it.msg != nil:
			_ = it.msg.Nak()
		}
	}
}

// catchUp folds the log records appended since the state's last one.
func (w *worker) catchUp(ctx context.Context) error {
	w.c.metrics.resyncs.WithLabelValues(w.c.dsLabel(w.ds)).Inc()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st := w.st
	from := st.LastDecSeq + 1
	err := w.c.scanLog(ctx, w.c.sc.DecOf(w.ds), &from, false, func(r declog.Record) error { return st.Replay(ctx, r) })
	if err != nil {
		return untrusted(err)
	}
	if err := w.c.checkStagedSeq(ctx, st); err != nil {
		return err
	}
	w.cursor = max(w.cursor, st.LastTxnSeq)
	w.c.setGauge(w.c.metrics.head, w.ds, float64(st.HeadVersion()))
	return nil
}

func outcomeLabel(r *cellguardpb.Decision) string {
	if r.Outcome == cellguardpb.Outcome_OUTCOME_COMMITTED {
		return "committed"
	}
	return "rejected"
}

func reasonLabel(r *cellguardpb.Decision) string {
	if r.Outcome == cellguardpb.Outcome_OUTCOME_COMMITTED {
		return ""
	}
	return r.Reason.String()
}

// stateLimits returns the limits every dataset's state shares.
func (c *Committer) stateLimits() *limits {
	if c.limits == nil { // a Committer built by hand (tests)
		return c.newLimits()
	}
	return c.limits()
}

// newLimits builds the decision core's settings from the configuration.
func (c *Committer) newLimits() *limits {
	return &limits{
		MaxTxnBytes: c.cfg.MaxTxnBytes, Window: c.cfg.Window, Retain: c.cfg.RetainVersions,
		MaxLag: c.cfg.MaxReadLag, Rules: ruleOptions{Policy: c.policy},
		MaxRebaseLag: c.cfg.MaxRebaseLag, IndexBytes: c.cfg.IndexBytes, WindowBytes: c.cfg.WindowBytes,
		LanceRoot: c.cfg.LanceRoot, DatasetLocation: dataplane.DatasetLocation, Budget: c.budget,
	}
}
