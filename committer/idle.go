package committer

import (
	"context"
	"time"
)

// A worker whose dataset saw no staged message for Config.IdleEvict drops
// its state (head, window, change index, decided ids): most of what a
// dataset costs in memory. Its consumer stays, so the next message
// arrives as usual; the state is then loaded again from the newest
// checkpoint and the log, exactly as at start.

// idleTimer fires once after a period without reset; a zero period never
// fires.
type idleTimer struct {
	d time.Duration
	t *time.Timer
}

func newIdleTimer(d time.Duration) *idleTimer {
	it := &idleTimer{d: d}
	if d > 0 {
		it.t = time.NewTimer(d)
	}
	return it
}

// c returns the channel that fires; nil (never ready) when disabled.
func (it *idleTimer) c() <-chan time.Time {
	if it.t == nil {
		return nil
	}
	return it.t.C
}

func (it *idleTimer) reset() {
	if it.t != nil {
		it.t.Reset(it.d)
	}
}

func (it *idleTimer) stop() {
	if it.t != nil {
		it.t.Stop()
	}
}

// evictState drops the dataset's state after inactivity.
func (w *worker) evictState() {
	if w.st == nil {
		return
	}
	w.st.leaveBudget()
	w.st = nil
	w.setStatus(DatasetIdle, "", "")
	w.c.metrics.evictions.WithLabelValues(w.c.dsLabel(w.ds)).Inc()
	w.c.log.Debug("idle dataset: state evicted", "dataset", w.ds)
}

// reloadIfEvicted loads the state again when a message arrives for an
// evicted dataset.
func (w *worker) reloadIfEvicted(ctx context.Context) error {
	if w.st != nil {
		return nil
	}
	w.setStatus(DatasetLoading, "", "")
	if err := w.load(ctx); err != nil {
		return err
	}
	w.setStatus(DatasetDeciding, "", "")
	return nil
}

// cacheRequests returns the channel on which the cache budget asks this
// dataset to drop its caches; nil (never ready) without a state or budget.
func (w *worker) cacheRequests() <-chan struct{} {
	if w.st == nil || w.st.share == nil {
		return nil
	}
	return w.st.share.requests()
}
