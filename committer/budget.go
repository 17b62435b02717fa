package committer

import (
	"container/list"
	"sync"
	"sync/atomic"

	"cellguard/committer/decide"
)

// One memory budget (Config.CacheBytes) covers the caches of every
// dataset: recent manifests, committed transactions, the change index and
// what older history read from the log. A dataset's head manifest is its
// minimum and is not counted. Each worker reports what its caches cost
// after every batch; when the sum exceeds the budget, the datasets that
// reported least recently are asked to drop their caches, and if that is
// not enough the reporting dataset drops its own oldest entries. Dropping
// a cache changes no decision: a read version that is no longer cached is
// pinned from the nearest checkpoint and the log, within the same bounds
// as always, or rejected READ_VERSION_TOO_OLD.
//
// Workers own their state, so one never touches another's caches: a
// request to drop them is a signal handled between batches, under the
// worker's lock (before its next batch, or by the committer's loop, which
// the budget wakes when it asks: idle.go). The budget queues the shares
// it asks, so the loop serves those and looks at no other dataset.

// cacheBudget is the budget shared by all of a committer's datasets.
type cacheBudget struct {
	limit int

	mu     sync.Mutex
	total  int                     // sum of the shares' costs
	asked  int                     // sum of the costs of the shares asked to drop theirs
	lru    *list.List              // shares with a cost not asked, most recently reported first
	shares map[string]*budgetShare // by dataset
	// askedQ holds the shares asked since the sweep last took them
	// (takeAsked), each once: the sweep serves just those.
	askedQ []*budgetShare
	// wake tells the committer's loop that shares were asked: it serves
	// them at once rather than at its next sweep. Buffered, never closed.
	wake chan struct{}
}

// budgetShare is one dataset's part of the budget. Its fields other than
// trim are guarded by the budget's mutex.
type budgetShare struct {
	b       *cacheBudget
	ds      string
	cost    int
	elem    *list.Element // in b.lru; nil while cost is 0 or pending
	pending bool          // asked to drop its caches, not done yet (out of b.lru, its cost in b.asked)
	queued  bool          // in b.askedQ
	// trim is set when the share is asked to drop its caches, and
	// cleared by the owner that does (takeRequest): a flag, not a channel,
	// since every loaded dataset has a share.
	trim atomic.Bool
}

func newCacheBudget(limit int) *cacheBudget {
	return &cacheBudget{limit: limit, lru: list.New(), shares: map[string]*budgetShare{}, wake: make(chan struct{}, 1)}
}

// join returns a new share for ds, replacing (and releasing) any earlier
// one: a reloaded state starts with empty caches.
func (b *cacheBudget) join(ds string) *budgetShare {
	s := &budgetShare{b: b, ds: ds}
	b.mu.Lock()
	defer b.mu.Unlock()
	if old := b.shares[ds]; old != nil {
		old.setLocked(0)
	}
	b.shares[ds] = s
	return s
}

// leave releases the share of ds if it is s (a dataset whose state was
// dropped).
func (s *budgetShare) leave(ds string) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s.setLocked(0)
	if b.shares[ds] == s {
		delete(b.shares, ds)
	}
}

// takeRequest reports whether the share was asked to drop its caches
// since the last call.
func (s *budgetShare) takeRequest() bool { return s.trim.Swap(false) }

// report records what the dataset's caches cost now and marks it the most
// recently used. If the budget is exceeded, it asks the least recently
// used datasets to drop their caches and returns how many bytes the
// caller must drop itself (0 when the others' caches cover the excess).
//
// The costs of shares already asked count as freed, and those shares
// leave the list until they report again, so a report walks only the
// shares it asks: O(1) amortized, however many datasets are waiting to
// drop their caches.
func (s *budgetShare) report(cost int) (excess int) {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	s.setLocked(cost)
	if s.elem != nil {
		b.lru.MoveToFront(s.elem)
	}
	excess = b.total - b.asked - b.limit
	for excess > 0 {
		e := b.lru.Back()
		if e == nil || e.Value.(*budgetShare) == s {
			break // every other share is more recent or asked: drop our own
		}
		o := e.Value.(*budgetShare)
		excess -= o.cost
		o.askLocked()
	}
	return max(excess, 0)
}

// askLocked asks the share to drop its caches.
func (s *budgetShare) askLocked() {
	b := s.b
	s.pending = true
	b.asked += s.cost
	b.lru.Remove(s.elem)
	s.elem = nil
	s.trim.Store(true)
	s.queueLocked()
	select {
	case b.wake <- struct{}{}:
	default: // the loop is told already
	}
}

// queueLocked puts the share in askedQ unless it is there.
func (s *budgetShare) queueLocked() {
	if !s.queued {
		s.queued = true
		s.b.askedQ = append(s.b.askedQ, s)
	}
}

// askedSignal returns the channel that says shares were asked to drop their
// caches since the committer's loop last served them; nil without a
// budget.
func (b *cacheBudget) askedSignal() <-chan struct{} {
	if b == nil {
		return nil
	}
	return b.wake
}

// takeAsked returns the shares asked since the last call, and empties
// the queue.
func (b *cacheBudget) takeAsked() []*budgetShare {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.askedQ
	b.askedQ = nil
	for _, s := range q {
		s.queued = false
	}
	return q
}

// reask queues shares again whose owners were busy when the sweep came
// to serve them.
func (b *cacheBudget) reask(shares []*budgetShare) {
	if len(shares) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range shares {
		s.queueLocked()
	}
}

// setLocked changes the share's cost, keeping total, asked and lru in
// step. A share that sets its cost has answered any request.
func (s *budgetShare) setLocked(cost int) {
	b := s.b
	if s.pending {
		b.asked -= s.cost
		s.pending = false
	}
	b.total += cost - s.cost
	s.cost = cost
	switch {
	case cost == 0 && s.elem != nil:
		b.lru.Remove(s.elem)
		s.elem = nil
	case cost > 0 && s.elem == nil:
		s.elem = b.lru.PushFront(s)
	}
}

// used returns the bytes counted against the budget, for tests and metrics.
func (b *cacheBudget) used() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

// Join implements decide.Budget: a nil budget gives no share.
func (b *cacheBudget) Join(ds string) decide.BudgetShare {
	if b == nil {
		return nil
	}
	return b.join(ds)
}

// Report implements decide.BudgetShare (report).
func (s *budgetShare) Report(cost int) int { return s.report(cost) }

// Leave implements decide.BudgetShare (leave).
func (s *budgetShare) Leave(ds string) { s.leave(ds) }
