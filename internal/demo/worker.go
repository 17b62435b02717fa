package demo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/nats-io/nats.go"

	"cellguard/events"
	"cellguard/internal/subject"
	"cellguard/producer"
	"cellguard/table/data"
)

// demoQueue is the durable consumer the workers share for rejections.
const demoQueue = "demo-recompute"

// demoPool runs the workers. Each worker is what would be its own process:
// its own connection, producer client, version subscriber and member of the
// rejection queue. Worker i recomputes, when a version changes x, the
// fragments with id % workers == i; any worker takes any rejection.
type demoPool struct {
	d  *demoRun
	mu sync.Mutex
	ws []*demoWorker
	wg sync.WaitGroup
}

func newDemoPool(d *demoRun) *demoPool {
	return &demoPool{d: d, ws: make([]*demoWorker, d.cfg.Workers)}
}

func (p *demoPool) start(ctx context.Context) error {
	for i := range p.ws {
		if err := p.launch(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// launch starts worker i (again).
func (p *demoPool) launch(ctx context.Context, i int) error {
	w, err := newDemoWorker(p.d, i)
	if err != nil {
		return err
	}
	p.mu.Lock()
	if p.ws[i] != nil {
		w.name += " (restarted)"
	}
	p.ws[i] = w
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		w.run(ctx)
	}()
	return nil
}

func (p *demoPool) wait() { p.wg.Wait() }

func (p *demoPool) workers() []*demoWorker {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.ws)
}

// crashLater makes worker 1 die after delay, the next time it holds a
// rejection from the queue (or 2 s later at the latest), and starts a new
// worker 1 a second after that.
func (p *demoPool) crashLater(ctx context.Context, delay time.Duration) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(delay):
	}
	w := p.workers()[1]
	w.armed.Store(true)
	select {
	case <-ctx.Done():
		return
	case <-w.dead:
	case <-time.After(2 * time.Second):
		w.die("")
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(time.Second):
	}
	if err := p.launch(ctx, 1); err != nil {
		p.d.note("restart worker 1: %v", err)
		return
	}
	p.d.highlight("worker 1 restarted: a new process replays the versions from 1 and rejoins the queue")
}

// caughtUp reports whether every worker has seen the head, has nothing to
// do and sees no stale fragment, and the rejection queue is drained.
func (p *demoPool) caughtUp(ctx context.Context, pc *producer.Client) (uint64, bool, error) {
	snap, err := pc.Latest(ctx, demoDataset)
	if err != nil {
		return 0, false, err
	}
	head := snap.Version()
	for _, w := range p.workers() {
		if !w.idle(head) {
			return head, false, nil
		}
	}
	sc, err := subject.NewScheme(pc.Prefix())
	if err != nil {
		return head, false, err
	}
	cons, err := pc.JetStream().Consumer(ctx, sc.DecStream(), demoQueue)
	if err != nil {
		return head, false, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return head, false, err
	}
	if info.NumPending > 0 || info.NumAckPending > 0 {
		return head, false, nil
	}
	// Nothing changed meanwhile?
	again, err := pc.Latest(ctx, demoDataset)
	if err != nil {
		return head, false, err
	}
	return head, again.Version() == head, nil
}

// demoWorker is one worker process.
type demoWorker struct {
	id   int
	name string // "worker 1", or "worker 1 (restarted)"
	d    *demoRun
	nc   *nats.Conn
	pc   *producer.Client
	tr   *demoTracker
	n    int // workers in the pool

	mu     sync.Mutex
	queued []uint64        // fragments to recompute, in order
	in     map[uint64]bool // queued or being recomputed
	again  map[uint64]bool // scheduled again while being recomputed
	busy   int
	wake   chan struct{}

	startHead uint64 // versions to replay before judging staleness
	armed     atomic.Bool
	dead      chan struct{}
	dieOnce   sync.Once
}

func newDemoWorker(d *demoRun, id int) (*demoWorker, error) {
	nc, err := d.srv.Connect("worker", fmt.Sprintf("demo-worker-%d", id))
	if err != nil {
		return nil, err
	}
	pc, err := producer.New(nc, producer.Config{})
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &demoWorker{
		id: id, name: fmt.Sprintf("worker %d", id), d: d, nc: nc, pc: pc, tr: newDemoTracker(), n: d.cfg.Workers,
		in: map[uint64]bool{}, again: map[uint64]bool{}, wake: make(chan struct{}, 1), dead: make(chan struct{}),
	}, nil
}

// run follows the versions, serves the rejection queue and recomputes
// until ctx ends or the worker dies.
func (w *demoWorker) run(ctx context.Context) {
	defer w.pc.Close()
	defer w.nc.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-w.dead:
			cancel()
		case <-ctx.Done():
		}
	}()
	if snap, err := w.pc.Latest(ctx, demoDataset); err == nil {
		w.startHead = snap.Version()
	}
	sub, err := events.NewSubscriber(w.nc, events.Config{Dataset: demoDataset, From: 1})
	if err != nil {
		w.d.note("%s: %v", w.name, err)
		return
	}
	rej, err := events.NewRejections(w.nc, events.RejectionsConfig{
		Dataset: demoDataset, Queue: demoQueue, FromStart: true, AckWait: 2 * time.Second, RetryDelay: 200 * time.Millisecond,
	})
	if err != nil {
		w.d.note("%s: %v", w.name, err)
		return
	}
	var wg sync.WaitGroup
	wg.Add(3)
	report := func(what string, err error) {
		if err != nil && ctx.Err() == nil {
			w.d.note("%s: %s: %v", w.name, what, err)
			cancel()
		}
	}
	go func() { defer wg.Done(); report("versions", sub.Run(ctx, w.onVersion)) }()
	go func() { defer wg.Done(); report("rejections", rej.Run(ctx, w.onRejected)) }()
	go func() { defer wg.Done(); report("jobs", w.jobs(ctx)) }()
	wg.Wait()
}

// die kills the worker as a crash would: the connection drops, nothing
// is acknowledged or handed back.
func (w *demoWorker) die(holding string) {
	w.dieOnce.Do(func() {
		if holding != "" {
			w.d.highlight("%s crashed while holding the rejection of txn %s (no ack, no nak)", w.name, short(holding))
		} else {
			w.d.highlight("%s crashed", w.name)
		}
		w.nc.Close()
		close(w.dead)
	})
}

// onVersion is the version subscriber's handler: fold the version into
// the staleness tracker and queue the fragments of this worker whose x
// changed.
func (w *demoWorker) onVersion(_ context.Context, c *events.Committed) error {
	w.tr.apply(c)
	for _, f := range c.Summary.FragmentsWriting(FieldX) {
		if int(f%uint64(w.n)) == w.id {
			w.schedule(f)
		}
	}
	return nil
}

// onRejected is the rejection queue's handler: whichever worker staged
// the transaction, recompute the fragments it names that are still stale.
func (w *demoWorker) onRejected(ctx context.Context, r *events.Rejected) error {
	if w.armed.Load() {
		w.die(r.TxnID)
		<-ctx.Done()
		return ctx.Err()
	}
	st := &w.d.stats
	st.queueJobs.Add(1)
	if r.Delivery > 1 {
		st.redelivered.Add(1)
		w.d.highlight("%s got the rejection of txn %s on delivery %d and recomputes it", w.name, short(r.TxnID), r.Delivery)
	}
	// Judge staleness with every version up to the decision seen.
	if err := w.tr.waitVersion(ctx, r.Decision.GetHeadVersion()); err != nil {
		return err
	}
	frags := r.Err.Fragments()
	switch {
	case len(frags) > 0:
	case r.Err.ConflictVersion > 0:
		frags = w.tr.touchedAt(r.Err.ConflictVersion)
	default:
		frags = w.tr.staleFragments()
	}
	for _, f := range frags {
		if !w.tr.stale(f) || !w.claim(f) {
			continue
		}
		err := w.recompute(ctx, f)
		w.release(f)
		if err != nil {
			return err // handed back: another delivery, maybe to another worker
		}
		st.recompQueue.Add(1)
	}
	return nil
}

func (w *demoWorker) schedule(f uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.in[f] {
		if !slices.Contains(w.queued, f) {
			w.again[f] = true
		}
		return
	}
	w.in[f] = true
	w.queued = append(w.queued, f)
	w.signal()
}

func (w *demoWorker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// claim marks f as being recomputed by this worker; false if it already
// is queued or being recomputed here. Then f is looked at again once the
// recomputation in hand ends, as schedule does: that recomputation may be
// the very one whose rejection the caller holds (its Commit has not
// returned yet), and a rejection that names no change of x (a conflict
// with a delete, a protected row deleted) schedules nothing else.
func (w *demoWorker) claim(f uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.in[f] {
		if !slices.Contains(w.queued, f) {
			w.again[f] = true
		}
		return false
	}
	w.in[f] = true
	w.busy++
	return true
}

func (w *demoWorker) release(f uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.in, f)
	w.busy--
	if w.again[f] {
		delete(w.again, f)
		w.in[f] = true
		w.queued = append(w.queued, f)
		w.signal()
	}
}

// jobs recomputes queued fragments one at a time.
func (w *demoWorker) jobs(ctx context.Context) error {
	if err := w.tr.waitVersion(ctx, w.startHead); err != nil {
		return nil
	}
	for {
		w.mu.Lock()
		var f uint64
		ok := len(w.queued) > 0
		if ok {
			f, w.queued = w.queued[0], w.queued[1:]
			w.busy++
		}
		w.mu.Unlock()
		if !ok {
			select {
			case <-ctx.Done():
				return nil
			case <-w.wake:
			}
			continue
		}
		var err error
		if w.tr.stale(f) {
			if err = w.recompute(ctx, f); err == nil {
				w.d.stats.recompStale.Add(1)
			}
		} else {
			w.d.stats.skipped.Add(1)
		}
		w.release(f)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// idle reports whether the worker has seen head and has nothing to do.
func (w *demoWorker) idle(head uint64) bool {
	select {
	case <-w.dead:
		return false
	default:
	}
	w.mu.Lock()
	busy := len(w.queued) > 0 || w.busy > 0
	w.mu.Unlock()
	return !busy && w.tr.version() >= head && len(w.tr.staleFragments()) == 0
}

// status says why w is not idle at head, for a run that did not catch up.
func (w *demoWorker) status(head uint64) string {
	select {
	case <-w.dead:
		return w.name + ": dead"
	default:
	}
	w.mu.Lock()
	queued, busy := len(w.queued), w.busy
	w.mu.Unlock()
	return fmt.Sprintf("%s: follows version %d of %d, %d fragments queued, %d being recomputed, stale fragments %v",
		w.name, w.tr.version(), head, queued, busy, w.tr.staleFragments())
}

// recompute publishes y = f(x) for fragment f, computed from the latest
// version, with a precondition on the x cells it read. A rejection is not
// an error: the rejection queue takes it from here.
func (w *demoWorker) recompute(ctx context.Context, f uint64) error {
	d := w.d
	snap, err := w.pc.Latest(ctx, demoDataset)
	if err != nil {
		return err
	}
	frag, ok := snap.Manifest().Fragment(f)
	if !ok {
		return nil // removed meanwhile
	}
	txn := snap.NewTxn()
	var b *data.Batch
	if d.cfg.Unsafe {
		b, err = d.store.ReadFragment(ctx, snap.Manifest(), f, []int32{FieldX})
	} else {
		b, err = txn.Read(ctx, d.store, f, FieldX) // protects the x cells read
	}
	if err != nil {
		return err
	}
	ys := make([]int64, frag.PhysicalRows())
	valid := make([]bool, frag.PhysicalRows()) // deleted rows stay null
	xs := b.Columns[FieldX].(*array.Int64)
	for i, off := range b.Offsets {
		ys[off], valid[off] = demoF(xs.Value(i)), true
	}
	select { // a real f takes time; x may change meanwhile
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(jitter(nil, d.cfg.WorkTime)):
	}
	file, err := d.store.WriteColumns(ctx, snap.Manifest().Schema(), frag, map[int32]arrow.Array{FieldY: Int64Array(ys, valid)})
	if err != nil {
		return err
	}
	txn.ReplaceColumns(f, file).SetProperty("worker", fmt.Sprint(w.id))
	_, err = w.pc.Commit(ctx, txn)
	if errors.Is(err, producer.ErrOutcomeUnknown) && ctx.Err() == nil {
		// The decision was lost (a timeout): look it up by uuid rather than
		// recomputing a transaction that may have committed.
		d.stats.recovered.Add(1)
		_, err = w.pc.Outcome(ctx, demoDataset, txn.ID(), txn.ReadVersion())
	}
	var rej *producer.RejectedError
	switch {
	case err == nil:
		d.stats.yCommits.Add(1)
		return nil
	case errors.As(err, &rej):
		d.stats.reject(rej.Reason.String())
		return nil
	}
	return err
}

// jitter returns a duration uniform in [d/2, 3d/2], drawn from rng, or
// from the global source (safe for concurrent use) when rng is nil.
func jitter(rng *rand.Rand, d time.Duration) time.Duration {
	if rng == nil {
		return d/2 + time.Duration(rand.Int64N(int64(d)+1))
	}
	return d/2 + time.Duration(rng.Int64N(int64(d)+1))
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// demoTracker knows, from the committed versions, which fragments' y is
// stale: y of fragment f was last computed from version yRead[f], x of f
// last written at version xWritten[f]; y is stale when x was written
// after the version y was read at. (A y commit always reads after every
// x write before it: its precondition rejects it otherwise.)
type demoTracker struct {
	mu       sync.Mutex
	v        uint64
	frags    map[uint64]bool
	xWritten map[uint64]uint64
	yRead    map[uint64]uint64
	touched  map[uint64][]uint64 // version → fragments it changed (recent ones)
	progress chan struct{}
}

func newDemoTracker() *demoTracker {
	return &demoTracker{
		frags: map[uint64]bool{}, xWritten: map[uint64]uint64{}, yRead: map[uint64]uint64{},
		touched: map[uint64][]uint64{}, progress: make(chan struct{}),
	}
}

func (t *demoTracker) apply(c *events.Committed) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := c.Summary
	for _, f := range s.FragmentsRemoved {
		delete(t.frags, f)
	}
	for _, f := range s.FragmentsAdded {
		t.frags[f] = true
	}
	for f := range s.Written {
		if s.Wrote(f, FieldX) {
			t.xWritten[f] = c.Version
		}
		if s.Wrote(f, FieldY) {
			t.yRead[f] = max(t.yRead[f], c.Decision.GetReadVersion())
		}
	}
	t.touched[c.Version] = slices.Concat(s.FragmentsAdded, s.FragmentsUpdated, s.FragmentsRemoved)
	delete(t.touched, c.Version-min(c.Version, 4096))
	t.v = c.Version
	close(t.progress)
	t.progress = make(chan struct{})
}

func (t *demoTracker) version() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.v
}

func (t *demoTracker) waitVersion(ctx context.Context, v uint64) error {
	for {
		t.mu.Lock()
		cur, ch := t.v, t.progress
		t.mu.Unlock()
		if cur >= v {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

func (t *demoTracker) stale(f uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.frags[f] && t.xWritten[f] > t.yRead[f]
}

func (t *demoTracker) staleFragments() []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []uint64
	for f := range t.frags {
		if t.xWritten[f] > t.yRead[f] {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}

func (t *demoTracker) touchedAt(v uint64) []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.touched[v])
}
