package committer

import (
	"slices"
	"sync"
	"time"
)

// Datasets with live state, in activity order.
//
// Every worker whose state is loaded is on one of two lists, kept by the
// committer under one lock (activity.mu): hot, the states not quieted
// since their last message, and quiet, the quieted ones. Each is ordered
// by last activity, the most recent at the front. A message (handle) or a
// load moves its worker to the front of hot; a state dropped for any
// reason (dropState) takes its worker off both. The sweep (idle.go)
// walks hot from the back while the datasets there are due to be
// quieted, moving each to the front of quiet (it is newer than every
// worker quieted before it, so quiet stays ordered), then quiet from the
// back while they are due to be evicted. It stops at the first one not
// due, so a sweep costs what it does, not what the committer holds.
//
// Lock order: a worker's mu, then activity.mu. The sweep holds
// activity.mu only to pick the next due worker, and takes that worker's
// mu with TryLock, so it never waits for a batch; it takes the worker off
// its list, lets go of activity.mu and does the work with only the
// worker's mu held: the other datasets' batches are not held up by a
// Quiet or an eviction.

// actNode is a worker's place on a list; guarded by activity.mu.
type actNode struct {
	prev, next *actNode
	list       *actList  // nil while on no list
	w          *worker   // nil for a list's root
	at         time.Time // last activity, as the list orders it
}

// actList is a circular list through its root: root.next is the front
// (most recent), root.prev the back (oldest).
type actList struct {
	root actNode
	n    int
}

func (l *actList) lazyInit() {
	if l.root.next == nil {
		l.root.next, l.root.prev = &l.root, &l.root
	}
}

func (l *actList) pushFront(n *actNode) {
	l.lazyInit()
	n.prev, n.next = &l.root, l.root.next
	l.root.next.prev = n
	l.root.next = n
	n.list = l
	l.n++
}

func (l *actList) back() *actNode {
	if l.root.prev == nil || l.root.prev == &l.root {
		return nil
	}
	return l.root.prev
}

func unlink(n *actNode) {
	if n.list == nil {
		return
	}
	n.prev.next, n.next.prev = n.next, n.prev
	n.list.n--
	n.prev, n.next, n.list = nil, nil, nil
}

// activity holds the two lists.
type activity struct {
	mu         sync.Mutex
	hot, quiet actList
}

// touch moves w to the front of hot, last active at. The caller holds
// w.mu and w has a state.
func (a *activity) touch(w *worker, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	unlink(&w.act)
	w.act.w, w.act.at = w, at
	a.hot.pushFront(&w.act)
}

// quieted puts w, just quieted by the sweep, at the front of quiet. The
// caller holds w.mu.
func (a *activity) quieted(w *worker) {
	a.mu.Lock()
	defer a.mu.Unlock()
	unlink(&w.act)
	a.quiet.pushFront(&w.act)
}

// remove takes w off the lists (its state is dropped). The caller holds
// w.mu.
func (a *activity) remove(w *worker) {
	a.mu.Lock()
	defer a.mu.Unlock()
	unlink(&w.act)
}

// maxBusy is how many busy workers (their mu held: a batch under way) a
// walk looks past. A busy worker keeps its place, so the list stays in
// order, and the next sweep tries it again. Looking past a few rather
// than stopping at the first keeps one slow batch from holding back every
// due dataset behind it; the bound keeps a walk from running the length
// of a list of busy workers (there are at most Config.Deciders of them in
// a batch, and a batch moves its worker to the front of hot as it
// starts). A worker quieted a sweep late goes to the front of quiet,
// ahead of workers a little newer than it: its eviction waits for
// theirs, late by at most the sweeps it was busy for.
const maxBusy = 8

// nextDue takes the oldest worker of l last active before cutoff that is
// not busy, off l and with its mu held, or returns nil at the first
// worker not due (or past maxBusy busy ones). busy collects the workers
// looked past; the caller passes it back for the rest of its walk.
func (a *activity) nextDue(l *actList, cutoff time.Time, busy *[]*worker) *worker {
	a.mu.Lock()
	defer a.mu.Unlock()
	for n := l.back(); n != nil && n != &l.root; n = n.prev {
		if !n.at.Before(cutoff) {
			return nil
		}
		if slices.Contains(*busy, n.w) {
			continue
		}
		if n.w.mu.TryLock() {
			unlink(n)
			return n.w
		}
		if len(*busy) == maxBusy {
			return nil
		}
		*busy = append(*busy, n.w)
	}
	return nil
}
