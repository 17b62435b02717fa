package committer

import (
	"sync"
	"sync/atomic"
)

// Deciders.
//
// A partition loop does not decide: it hands each dataset its messages
// (worker.enqueue) and pulls the next batch. A fixed pool of deciders
// (Config.Deciders) takes the datasets that have messages waiting, in the
// order they got them, and decides a batch of each (worker.handle). So a
// dataset that is slow to decide (a long log to load, an old read version
// to pin) holds up one decider, not its partition's other datasets, and
// the appends of many datasets are in flight at once. A dataset is never
// decided by two deciders at once: it is queued once until its decider
// is done with it.

// deciders is the pool and its queue of datasets with work.
type deciders struct {
	c     *Committer
	mu    sync.Mutex
	ready []*worker     // FIFO of datasets with queued messages
	wake  chan struct{} // one token per queued dataset, at most
	quit  chan struct{}
	wg    sync.WaitGroup
	// crashed stops every decider after an injected crash (tests): the
	// process is dead from there on.
	crashed atomic.Bool
}

func newDeciders(c *Committer, n int) *deciders {
	d := &deciders{c: c, wake: make(chan struct{}, 1), quit: make(chan struct{})}
	for range n {
		d.wg.Add(1)
		go d.loop()
	}
	return d
}

// push queues a dataset that got work.
func (d *deciders) push(w *worker) {
	d.mu.Lock()
	d.ready = append(d.ready, w)
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// pop takes the next dataset with work; false once the pool closes.
func (d *deciders) pop() (*worker, bool) {
	for {
		d.mu.Lock()
		if len(d.ready) > 0 {
			w := d.ready[0]
			d.ready[0] = nil
			d.ready = d.ready[1:]
			more := len(d.ready) > 0
			d.mu.Unlock()
			if more { // pass the wake-up on: more datasets wait
				select {
				case d.wake <- struct{}{}:
				default:
				}
			}
			return w, true
		}
		d.mu.Unlock()
		select {
		case <-d.quit:
			return nil, false
		case <-d.wake:
		}
	}
}

func (d *deciders) loop() {
	defer d.wg.Done()
	ctx := d.c.runCtx
	for {
		w, ok := d.pop()
		if !ok {
			return
		}
		if ctx.Err() != nil || d.crashed.Load() {
			w.settleQueue() // handed back below, at close
			continue
		}
		items := w.takeQueued(d.c.cfg.BatchSize)
		if err := w.handle(ctx, items); err != nil {
			d.crashed.Store(true) // an injected crash: decide nothing more
		}
		if w.requeue() {
			d.push(w)
		}
	}
}

// close stops the deciders after the batches in hand and hands back every
// message still queued. No partition may enqueue any more.
func (d *deciders) close() {
	close(d.quit)
	d.wg.Wait()
	for _, w := range d.c.workerList() {
		w.qmu.Lock()
		q := w.queue
		w.queue, w.queued = nil, false
		w.qmu.Unlock()
		if !d.crashed.Load() {
			nakItems(q, 0)
		}
	}
}

// enqueue adds a dataset's messages from a partition batch, and queues
// the dataset for a decider unless it is queued or being decided.
//
// A message already queued (the server redelivered it: it waited past
// AckWait, HoldLimit, or a pin change) replaces its earlier delivery
// instead of queueing a second copy of its body; the earlier delivery
// leaves the hold set.
func (w *worker) enqueue(items []item) {
	w.qmu.Lock()
next:
	for _, it := range items {
		for i := range w.queue {
			if w.queue[i].Seq == it.Seq && w.queue[i].msg != nil && it.msg != nil {
				unhold(w.queue[i].msg) // the later delivery is the one held
				w.queue[i] = it
				continue next
			}
		}
		w.queue = append(w.queue, it)
	}
	start := !w.queued
	w.queued = true
	if w.arrived != nil { // a pipeline deciding while it appends
		select {
		case w.arrived <- struct{}{}:
		default:
		}
	}
	w.qmu.Unlock()
	if start {
		w.c.deciders.push(w)
	}
}

// takeQueued takes up to max queued messages, sorted by stream sequence.
func (w *worker) takeQueued(max int) []item {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	n := min(len(w.queue), max)
	items := make([]item, n)
	copy(items, w.queue)
	w.dequeue(n)
	sortItems(items)
	return items
}

// dequeue drops the first n queued messages. An emptied queue lets go
// of its array, and a shortened one clears the slots it no longer uses:
// a dataset's queue must not keep its decided messages (their bodies)
// alive while it waits for its next.
func (w *worker) dequeue(n int) {
	if n == len(w.queue) {
		w.queue = nil
		return
	}
	rest := copy(w.queue, w.queue[n:])
	clear(w.queue[rest:])
	w.queue = w.queue[:rest]
}

// requeue reports whether more messages arrived while the dataset was
// being decided (it stays queued), or clears its queued mark.
func (w *worker) requeue() bool {
	w.qmu.Lock()
	defer w.qmu.Unlock()
	if len(w.queue) > 0 {
		return true
	}
	w.queued = false
	return false
}

// settleQueue leaves the queue for close to hand back, and clears the
// queued mark (the pool is stopping).
func (w *worker) settleQueue() {
	w.qmu.Lock()
	w.queued = false
	w.qmu.Unlock()
}
