package committer

import (
	"time"

	"cellguard/committer/decide"
)

// Idle datasets and the cache budget.
//
// A dataset whose last message arrived more than Config.IdleEvict ago
// drops its state (head, window, change index, decided ids): most of
// what a dataset costs in memory. The next message of the dataset loads
// it again from the newest checkpoint and the log, exactly as at start.
// A dataset asked by the shared cache budget (budget.go) to drop its
// caches does so before its next batch, or sooner: the committer's loop
// serves the requests as soon as the budget makes them (and again at
// each sweep for the datasets that were busy). A set-up creating
// thousands of tables a second asks as many datasets a second, which
// would otherwise hold their caches past the budget until the sweep.
//
// A dataset quiet for quietAfter (1 s), well before IdleEvict, keeps its
// state but makes it small (decide.State.Quiet): its head manifest is
// held packed, one compressed byte slice, until its next batch decodes
// it, and the window's manifests, which share the head's fragments, go.
// BenchmarkResidentDatasets measures both forms.
//
// Sweeps run on Run's goroutine every sweepEvery and visit only the
// datasets due: the loaded ones are kept in activity order (activity.go),
// and the budget queues the datasets it asks (budget.go). A dataset busy
// with a batch keeps its place and is swept next time.

// sweepEvery is how often idle datasets and cache requests are looked at.
func sweepEvery(idle time.Duration) time.Duration {
	if idle > 0 {
		return min(max(idle/4, 10*time.Millisecond), 500*time.Millisecond)
	}
	return 500 * time.Millisecond
}

// quietAfter is how long a dataset goes without a message before its
// state is made quiet: 1 s, or a quarter of idle when that is shorter.
// Packing a head and decoding it again at the next batch costs about
// 1 µs per fragment (0.3 ms for a 256-fragment head), less than deciding
// a transaction: a dataset that writes less than once a second pays that
// at most once per transaction, and holds its head packed in between.
func quietAfter(idle time.Duration) time.Duration {
	if idle > 0 {
		return min(idle/4, time.Second)
	}
	return time.Second
}

// sweepDatasets serves the cache requests, quiets the datasets quiet for
// quietAfter and evicts the ones idle for IdleEvict. It visits only the
// datasets due (activity.go) and the ones the budget asked (budget.go).
func (c *Committer) sweepDatasets(now time.Time) {
	c.honorCacheRequests()
	a := &c.act
	evict := c.cfg.IdleEvict > 0
	var busy []*worker
	for {
		w := a.nextDue(&a.hot, now.Add(-quietAfter(c.cfg.IdleEvict)), &busy)
		if w == nil {
			break
		}
		switch {
		case w.st == nil: // none listed: dropState takes a worker off
		case evict && now.Sub(w.active) > c.cfg.IdleEvict:
			w.evictState()
		default:
			if !w.st.IsQuiet() {
				w.st.Quiet()
			}
			a.quieted(w)
		}
		w.mu.Unlock()
	}
	if !evict {
		return
	}
	busy = busy[:0]
	for {
		w := a.nextDue(&a.quiet, now.Add(-c.cfg.IdleEvict), &busy)
		if w == nil {
			break
		}
		if w.st != nil {
			w.evictState()
		}
		w.mu.Unlock()
	}
}

// honorCacheRequests serves the requests of the datasets the budget asked
// to drop their caches since the last sweep. A busy dataset's request is
// asked again at the next sweep (its batch may have started before the
// request came).
func (c *Committer) honorCacheRequests() {
	if c.budget == nil {
		return
	}
	asked := c.budget.takeAsked()
	if len(asked) == 0 {
		return
	}
	ws := make([]*worker, len(asked))
	c.mu.Lock()
	for i, s := range asked {
		ws[i] = c.workers[s.ds]
	}
	c.mu.Unlock()
	var again []*budgetShare
	for i, s := range asked {
		w := ws[i]
		if w == nil {
			continue
		}
		if !w.mu.TryLock() {
			again = append(again, s)
			continue
		}
		if w.st != nil && w.st.Share() == decide.BudgetShare(s) {
			w.honorCacheRequest()
		}
		w.mu.Unlock()
	}
	c.budget.reask(again)
}

// evictState drops the dataset's state after inactivity.
func (w *worker) evictState() {
	w.dropState()
	w.setStatus(DatasetIdle, "", "")
	w.c.metrics.evictions.WithLabelValues(w.c.dsLabel(w.ds)).Inc()
	w.c.log.Debug("idle dataset: state evicted", "dataset", w.ds)
}

// dropState forgets the state; the next batch loads it again.
func (w *worker) dropState() {
	if w.st == nil {
		return
	}
	w.st.LeaveBudget()
	w.st = nil
	w.c.act.remove(w)
}

// honorCacheRequest drops the caches when the budget asked for it.
func (w *worker) honorCacheRequest() {
	if w.st == nil {
		return
	}
	share, _ := w.st.Share().(*budgetShare)
	if share == nil {
		return
	}
	if share.takeRequest() {
		w.st.DropCaches()
	}
}
