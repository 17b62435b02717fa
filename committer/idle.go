package committer

import (
	"time"
)

// Idle datasets and the cache budget.
//
// A dataset whose last message arrived more than Config.IdleEvict ago
// drops its state (head, window, change index, decided ids): most of
// what a dataset costs in memory. The next message of the dataset loads
// it again from the newest checkpoint and the log, exactly as at start.
// A dataset asked by the shared cache budget (budget.go) to drop its
// caches does so at the next sweep, or before its next batch.
//
// A dataset quiet for quietAfter (1 s), well before IdleEvict, keeps its
// state but makes it small (decide.State.Quiet): its head manifest is
// held packed, one compressed byte slice, until its next batch decodes
// it, and the window's manifests, which share the head's fragments, go.
// BenchmarkResidentDatasets measures both forms.
//
// Sweeps run on Run's goroutine every sweepEvery; a dataset busy with a
// batch is skipped (and swept next time).

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

// sweepDatasets evicts idle datasets, quiets quiet ones and serves cache
// requests.
func (c *Committer) sweepDatasets(now time.Time) {
	for _, w := range c.workerList() {
		if !w.mu.TryLock() {
			continue
		}
		w.honorCacheRequest()
		switch quiet := now.Sub(w.active); {
		case w.st == nil:
		case c.cfg.IdleEvict > 0 && quiet > c.cfg.IdleEvict:
			w.evictState()
		case quiet > quietAfter(c.cfg.IdleEvict):
			w.st.Quiet()
		}
		w.mu.Unlock()
	}
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
	select {
	case <-share.requests():
		w.st.DropCaches()
	default:
	}
}
