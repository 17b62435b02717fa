package committer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/retry"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// worker owns one dataset: its state, its consumer, its checkpoints. All
// of its methods run on its one goroutine (run), apart from the consume
// callback, which only hands messages over a channel, and the checkpoint
// writer, which only reads immutable manifests.
type worker struct {
	c     *Committer
	ds    string
	st    *state
	in    chan jetstream.Msg
	cons  jetstream.Consumer
	cc    jetstream.ConsumeContext
	quit  chan struct{} // closed to release a blocked consume callback
	pinID string
	// needGap asks for a check that no undecided message precedes the next
	// batch (after start, a reset, a fence or a pin change).
	needGap bool
	// cursor is the highest CG_TXN sequence handled (decided or skipped).
	cursor uint64
	// lastCseq is the consumer (delivery) sequence of the last message
	// received, 0 when unknown: a jump means a delivery never reached us.
	lastCseq uint64
	cp       *checkpointer
	// status is what DatasetStatuses reports; set by run.
	status atomic.Pointer[DatasetStatus]
	pin    atomic.Value // string: pinID, for the beacons
}

func newWorker(c *Committer, ds string) *worker {
	return &worker{c: c, ds: ds}
}

// run loads the dataset's state, consumes its staged messages and decides
// them until ctx is done (nil) or something fails (an error; the caller
// restarts the worker from scratch).
func (w *worker) run(ctx context.Context) error {
	c := w.c
	w.setStatus(DatasetLoading, "", "")
	if err := w.load(ctx); err != nil {
		return w.failed(ctx, err)
	}
	w.cp = newCheckpointer(c, w.ds)
	defer w.cp.close()
	if err := w.ensureConsumer(ctx); err != nil {
		return w.failed(ctx, err)
	}
	if c.cfg.TakeoverOnStart {
		w.takeover(ctx)
	}
	w.in = make(chan jetstream.Msg, 2*c.cfg.MaxAckPending)
	if err := w.consume(); err != nil {
		return w.failed(ctx, err)
	}
	defer func() { w.stopConsume() }()
	w.setStatus(DatasetDeciding, "", "")
	c.setGauge(c.metrics.head, w.ds, float64(w.st.headVersion()))
	batch := make([]jetstream.Msg, 0, c.cfg.BatchSize)
	idle := newIdleTimer(c.cfg.IdleEvict)
	defer idle.stop()
	for {
		select {
		case <-ctx.Done():
			w.stopConsume()
			w.nakBuffered()
			return nil
		case <-idle.c():
			w.evictState()
			continue
		case <-w.cacheRequests():
			w.st.dropCaches()
			continue
		case m := <-w.in:
			batch = append(batch[:0], m)
		}
		if err := w.reloadIfEvicted(ctx); err != nil {
			return w.failed(ctx, err)
		}
	drain:
		for len(batch) < c.cfg.BatchSize {
			select {
			case m := <-w.in:
				batch = append(batch, m)
			default:
				break drain
			}
		}
		if err := w.process(ctx, batch); err != nil {
			return w.failed(ctx, err)
		}
		idle.reset()
	}
}

// load builds the state from the latest checkpoint and the log.
func (w *worker) load(ctx context.Context) error {
	c := w.c
	lim := limits{
		maxTxnBytes: c.cfg.MaxTxnBytes, window: c.cfg.Window, retain: c.cfg.RetainVersions,
		maxLag: c.cfg.MaxReadLag, rules: ruleOptions{policy: c.policy},
		maxRebaseLag: c.cfg.MaxRebaseLag, indexBytes: c.cfg.IndexBytes, windowBytes: c.cfg.WindowBytes,
		lanceRoot: c.cfg.LanceRoot, budget: c.budget,
	}
	st := newState(w.ds, lim, nil)
	st.lim.rules.deletions = datasetDeletions{c: c, st: st}
	st.older = &logHistory{c: c, st: st, maxReplay: c.maxReplay()}
	if err := c.loadState(ctx, st); err != nil {
		return err
	}
	if err := c.loadConfig(ctx, st); err != nil {
		return err
	}
	st.fitBudget()
	w.st = st
	w.cursor = st.lastTxnSeq
	w.needGap = true
	w.lastCseq = 0
	return nil
}

func (w *worker) ensureConsumer(ctx context.Context) error {
	c := w.c
	cfg := jetstream.ConsumerConfig{
		Durable:        c.sc.Consumer(w.ds),
		Description:    "cellguard committer for dataset " + w.ds,
		FilterSubject:  c.sc.Txn(w.ds),
		AckPolicy:      jetstream.AckExplicitPolicy,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		MaxAckPending:  c.cfg.MaxAckPending,
		AckWait:        c.cfg.AckWait,
		MaxDeliver:     -1,
		PriorityGroups: []string{subject.PriorityGroup},
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PinnedTTL:      c.cfg.PinnedTTL,
	}
	cons, err := c.txn.CreateOrUpdateConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("committer: consumer for %s: %w", w.ds, err)
	}
	w.cons = cons
	return nil
}

// takeover moves the pin to this committer and redelivers what a dead
// predecessor held.
func (w *worker) takeover(ctx context.Context) {
	name := w.c.sc.Consumer(w.ds)
	_ = w.c.txn.UnpinConsumer(ctx, name, subject.PriorityGroup) // not pinned is fine
	if _, err := w.c.txn.ResetConsumer(ctx, name); err != nil {
		w.c.log.Warn("takeover: reset consumer", "dataset", w.ds, "err", err)
	}
}

func (w *worker) consume() error {
	in, quit := w.in, make(chan struct{})
	// The callback never blocks a stop: stopConsume closes quit before it
	// waits for the consume context to close.
	cc, err := w.cons.Consume(func(m jetstream.Msg) {
		select {
		case in <- m:
		case <-quit:
		}
	},
		jetstream.PullPriorityGroup(subject.PriorityGroup),
		jetstream.PullExpiry(w.c.cfg.PullExpiry),
		jetstream.PullMaxMessages(w.c.cfg.BatchSize),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				w.c.log.Debug("consume", "dataset", w.ds, "err", err)
			}
		}))
	if err != nil {
		return fmt.Errorf("committer: consume %s: %w", w.ds, err)
	}
	w.cc, w.quit = cc, quit
	return nil
}

func (w *worker) stopConsume() {
	if w.cc != nil {
		close(w.quit)
		w.cc.Stop()
		<-w.cc.Closed()
		w.cc = nil
	}
}

// nakBuffered hands back the messages received but not decided.
func (w *worker) nakBuffered() {
	for {
		select {
		case m := <-w.in:
			_ = m.Nak()
		default:
			return
		}
	}
}

// restart drops everything buffered, resets the consumer so delivery
// starts again at the oldest unacked message, in order, and consumes anew.
func (w *worker) restart(ctx context.Context) error {
	w.stopConsume()
	for len(w.in) > 0 {
		<-w.in
	}
	if _, err := w.c.txn.ResetConsumer(ctx, w.c.sc.Consumer(w.ds)); err != nil {
		return fmt.Errorf("committer: reset consumer of %s: %w", w.ds, err)
	}
	w.needGap = true
	w.lastCseq = 0
	return w.consume()
}

// process decides one batch: skip what is decided, decide the rest in
// order, append the decisions as one fenced atomic batch, then ack.
//
// The batch in hand is finished even if ctx ends meanwhile (its I/O runs
// on a context without cancellation); only retries stop when ctx is done,
// handing the batch back.
func (w *worker) process(runCtx context.Context, batch []jetstream.Msg) error {
	c := w.c
	ctx := context.WithoutCancel(runCtx)
	ins := make([]staged, len(batch))
	stamps := make([]time.Time, len(batch))
	redelivered, pinChanged, lostDelivery := false, false, false
	var pending uint64
	for i, m := range batch {
		md, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("committer: metadata: %w", err)
		}
		ins[i] = staged{seq: md.Sequence.Stream, data: m.Data(), msgID: m.Headers().Get(subject.HdrMsgID), hdr: m.Headers()}
		stamps[i] = md.Timestamp
		redelivered = redelivered || md.NumDelivered > 1
		if pin := m.Headers().Get("Nats-Pin-Id"); pin != "" && pin != w.pinID {
			pinChanged, w.pinID = w.pinID != "", pin
			w.pin.Store(pin)
			select {
			case c.pinKick <- struct{}{}:
			default:
			}
		}
		if w.lastCseq != 0 && md.Sequence.Consumer != w.lastCseq+1 {
			lostDelivery = true
		}
		w.lastCseq = md.Sequence.Consumer
		pending = md.NumPending
	}
	c.setGauge(c.metrics.pending, w.ds, float64(pending))
	c.owned.delivered(w.ds, time.Now())
	// Deciding skips (acks without a decision) every message at or below
	// the highest staging sequence decided so far, so a batch must be
	// decided in stream order and must not skip over an undecided message
	// that will arrive later. Deliveries are not in stream order after a
	// redelivery (the server redelivers pending messages in its own
	// order, e.g. 4..18 before 1..3 after a consumer leader change) and a
	// delivery can be lost on the way (a pull to a killed server): sort
	// the batch, and check it for gaps whenever that may have happened.
	sortByStreamSeq(batch, ins, stamps)
	if w.needGap || redelivered || pinChanged || lostDelivery {
		gap, err := w.gapBefore(ctx, ins)
		if err != nil {
			return err
		}
		if gap {
			return w.restart(ctx)
		}
		w.needGap = false
	}
	for attempt := 0; ; attempt++ {
		err := w.decideAndAppend(ctx, batch, ins, stamps)
		if err == nil || errors.Is(err, errCrash) || errors.Is(err, errBrokenState) {
			return err
		}
		if errors.Is(err, errUntrustedLog) {
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
		if err := w.catchUp(ctx); err != nil {
			return err
		}
		if errors.Is(err, ErrFenced) || attempt >= 20 || runCtx.Err() != nil {
			// Someone else is deciding: hand back what is still undecided.
			w.ackDecided(batch, ins, true)
			w.needGap = true
			return nil
		}
		// The batch in hand is finished even when runCtx ends: pause on
		// ctx, which does not.
		_ = retry.Sleep(ctx, logRetry.Delay(attempt))
	}
}

// sortByStreamSeq orders a batch (and its parallel slices) by CG_TXN
// sequence.
func sortByStreamSeq(batch []jetstream.Msg, ins []staged, stamps []time.Time) {
	if slices.IsSortedFunc(ins, func(a, b staged) int { return cmp.Compare(a.seq, b.seq) }) {
		return
	}
	order := make([]int, len(ins))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ins[a].seq, ins[b].seq) })
	b2, i2, s2 := slices.Clone(batch), slices.Clone(ins), slices.Clone(stamps)
	for k, j := range order {
		batch[k], ins[k], stamps[k] = b2[j], i2[j], s2[j]
	}
}

// gapBefore reports whether an undecided staged message of the dataset
// precedes a batch member: the next message on the dataset's subject after
// the cursor is not the batch's first one, or after a member not the next
// member. ins is sorted by sequence.
func (w *worker) gapBefore(ctx context.Context, ins []staged) (bool, error) {
	prev := w.cursor
	for _, in := range ins {
		if in.seq <= prev {
			continue // handled already, or a duplicate delivery
		}
		gap, err := w.gapBetween(ctx, prev, in.seq)
		if gap || err != nil {
			return gap, err
		}
		prev = in.seq
	}
	return false, nil
}

// gapBetween reports whether a message on the dataset's subject lies
// strictly between sequences after and next.
func (w *worker) gapBetween(ctx context.Context, after, next uint64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := w.c.txn.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(w.c.sc.Txn(w.ds)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("committer: gap check for %s: %w", w.ds, err)
	}
	if m.Sequence < next {
		w.c.log.Info("undecided message before batch member; redelivering in order", "dataset", w.ds, "next", m.Sequence, "member", next)
		return true, nil
	}
	return false, nil
}

// decideAndAppend is one attempt at a batch. On error the state is rolled
// back to what it was before the attempt.
func (w *worker) decideAndAppend(ctx context.Context, batch []jetstream.Msg, ins []staged, stamps []time.Time) error {
	c, st := w.c, w.st
	m := st.mark()
	var recs []*cellguardpb.Decision
	var verdicts []verdict
	var idx []int
	for i, in := range ins {
		if in.seq <= st.lastTxnSeq || in.seq <= w.cursor {
			// Decided already (a redelivery): ack only, once the log
			// agrees that this very message has a decision.
			if err := st.checkDecided(in); err != nil {
				st.rollback(m)
				return fmt.Errorf("%s: %w", w.ds, err)
			}
			continue
		}
		v := st.decide(ctx, in)
		if v.broken != nil {
			st.rollback(m)
			return fmt.Errorf("%s: staged message %d: %w", w.ds, in.seq, v.broken)
		}
		if v.skip {
			continue // the uuid has a decision (a republish): ack only
		}
		recs, verdicts, idx = append(recs, v.rec), append(verdicts, v), append(idx, i)
	}
	if err := c.step(StepDecided, w.ds); err != nil {
		return err
	}
	if err := w.checkRetention(m, st.headVersion()); err != nil {
		st.rollback(m)
		return err
	}
	if len(recs) > 0 {
		if err := w.writeDeletions(ctx, verdicts); err != nil {
			st.rollback(m)
			return fmt.Errorf("%w: write deletion files: %v", errAppend, err)
		}
		seqs, err := w.append(ctx, m.lastDecSeq, recs)
		if err != nil {
			st.rollback(m)
			return err
		}
		st.commit(m, recs, seqs)
		if err := c.step(StepAppended, w.ds); err != nil {
			return err
		}
		now := time.Now()
		for j, r := range recs {
			c.metrics.decisions.WithLabelValues(c.dsLabel(w.ds), outcomeLabel(r), reasonLabel(r)).Inc()
			c.metrics.latency.Observe(now.Sub(stamps[idx[j]]).Seconds())
			if r.ReadVersion > 0 {
				c.metrics.readLag.Observe(float64(verdicts[j].lag))
			}
		}
		c.metrics.batch.Observe(float64(len(recs)))
		c.setGauge(c.metrics.head, w.ds, float64(st.headVersion()))
	}
	for i, msg := range batch {
		_ = msg.Ack()
		if i == len(batch)/2 && len(batch) > 1 {
			if err := c.step(StepPartialAck, w.ds); err != nil {
				return err
			}
		}
	}
	for _, in := range ins {
		w.cursor = max(w.cursor, in.seq)
	}
	if err := c.step(StepAcked, w.ds); err != nil {
		return err
	}
	if len(recs) > 0 {
		w.maybeCheckpoint(m.head)
	}
	return nil
}

// appendTimeout bounds one append. An append answered late is no harm
// (its outcome is read back from the log and the batch retried, fenced),
// but a request lost with a killed stream leader is never answered: the
// dataset would stall for this long. A healthy R3 append takes
// milliseconds.
const appendTimeout = 1500 * time.Millisecond

// append appends recs fenced on expect. Batches of at least
// AtomicBatchMin decisions go as one atomic batch; smaller ones as a chain
// of single fenced appends, each guarded by the sequence the previous one
// got (an atomic batch has a fixed cost, an fsync on single-replica file
// streams, that only pays off for larger groups). A chain that fails part
// way is rolled back as a whole; the caller's catch-up reads back what did
// land.
func (w *worker) append(ctx context.Context, expect uint64, recs []*cellguardpb.Decision) ([]uint64, error) {
	c := w.c
	if len(recs) >= c.cfg.AtomicBatchMin {
		actx, cancel := context.WithTimeout(ctx, appendTimeout)
		defer cancel()
		return c.dl.Append(actx, w.ds, expect, recs)
	}
	seqs := make([]uint64, 0, len(recs))
	for i := range recs {
		actx, cancel := context.WithTimeout(ctx, appendTimeout)
		s, err := c.dl.Append(actx, w.ds, expect, recs[i:i+1])
		cancel()
		if err != nil {
			return nil, err
		}
		expect = s[0]
		seqs = append(seqs, expect)
		if i == len(recs)/2 && len(recs) > 1 {
			if err := c.step(StepMidBatch, w.ds); err != nil {
				return nil, err
			}
		}
	}
	return seqs, nil
}

// ackDecided acks the batch messages that now have a decision; the others
// are nak'ed (handed to whoever is pinned) when nak is set.
func (w *worker) ackDecided(batch []jetstream.Msg, ins []staged, nak bool) {
	for i, m := range batch {
		switch {
		case ins[i].seq <= w.st.lastTxnSeq:
			_ = m.Ack()
		case nak:
			_ = m.Nak()
		}
	}
}

// catchUp folds the log records appended since the state's last one.
func (w *worker) catchUp(ctx context.Context) error {
	w.c.metrics.resyncs.WithLabelValues(w.c.dsLabel(w.ds)).Inc()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st := w.st
	from := st.lastDecSeq + 1
	err := w.c.scanLog(ctx, w.c.sc.DecOf(w.ds), &from, false, func(r declog.Record) error { return st.replay(ctx, r) })
	if err != nil {
		return untrusted(err)
	}
	if err := w.c.checkStagedSeq(ctx, st); err != nil {
		return err
	}
	w.cursor = max(w.cursor, st.lastTxnSeq)
	w.c.setGauge(w.c.metrics.head, w.ds, float64(st.headVersion()))
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
