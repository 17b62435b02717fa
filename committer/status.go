package committer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"cellguard/committer/decide"
	"cellguard/internal/declog"
	"cellguard/internal/retry"
)

// errUntrustedLog reports a record of a dataset's decision log that the
// committer cannot trust (decide.ErrUntrustedLog).
var errUntrustedLog = decide.ErrUntrustedLog

// DatasetState is where one dataset's worker is.
type DatasetState string

// Dataset states.
const (
	// DatasetLoading: the worker is building the dataset's state from its
	// checkpoint and decision log (at start, or after a failure).
	DatasetLoading DatasetState = "loading"
	// DatasetDeciding: the state is loaded and staged messages are decided.
	DatasetDeciding DatasetState = "deciding"
	// DatasetIdle: no message arrived for Config.IdleEvict and the state
	// was dropped to save memory; it is loaded again when one does. An
	// idle dataset is healthy (ready).
	DatasetIdle DatasetState = "idle"
	// DatasetRetrying: the worker failed (Detail says why: the log or
	// the server could not be read, …) and starts again after a pause.
	DatasetRetrying DatasetState = "retrying"
	// DatasetDeleted: the dataset was deleted (its log ends with a
	// tombstone); every staged transaction is rejected DATASET_DELETED.
	// A deleted dataset is healthy (ready).
	DatasetDeleted DatasetState = "deleted"
	// DatasetStopped: the decision log holds a record the committer cannot
	// trust; nothing is decided or acked for this dataset until an
	// operator repairs the log and restarts the committer.
	DatasetStopped DatasetState = "stopped"
)

// DatasetStatus is one dataset's state as the committer sees it, for
// readiness probes and operators.
type DatasetStatus struct {
	Dataset string
	State   DatasetState
	// Reason is a short machine-readable cause: "untrusted-log" when
	// stopped; "decision-log-full" (CG_DEC refused the append for want of
	// room: nothing was stored) or "worker-failed" when retrying.
	Reason string
	// Detail says what went wrong, for people.
	Detail string
	// Since is when the dataset entered State.
	Since time.Time
}

// Reasons.
const (
	reasonUntrustedLog = "untrusted-log"
	reasonFailed       = "worker-failed"
	reasonLogFull      = "decision-log-full"
)

// DatasetStatuses returns the status of every dataset with a worker in
// this committer, by name.
func (c *Committer) DatasetStatuses() []DatasetStatus {
	c.mu.Lock()
	ws := make([]*worker, 0, len(c.workers))
	for _, w := range c.workers {
		ws = append(ws, w)
	}
	c.mu.Unlock()
	out := make([]DatasetStatus, 0, len(ws))
	for _, w := range ws {
		if s := w.status.Load(); s != nil {
			out = append(out, *s)
		} else {
			out = append(out, DatasetStatus{Dataset: w.ds, State: DatasetLoading})
		}
	}
	slices.SortFunc(out, func(a, b DatasetStatus) int { return strings.Compare(a.Dataset, b.Dataset) })
	return out
}

// setStatus records the worker's state, keeping Since when it is unchanged.
func (w *worker) setStatus(s DatasetState, reason, detail string) {
	if old := w.status.Load(); old != nil && old.State == s && old.Reason == reason {
		return
	}
	w.status.Store(&DatasetStatus{Dataset: w.ds, State: s, Reason: reason, Detail: detail, Since: time.Now()})
}

// failed handles an error that ended a batch of the dataset. The state
// is dropped (the next batch reloads it from the checkpoint and the log)
// and the batch's messages are handed back with a delay that grows with
// consecutive failures (workerRestart), so a dataset that keeps failing
// costs its partition almost nothing. When err says the decision log
// cannot be trusted, the dataset is loaded again with every read of the
// log at the stream leader (a replica may have served records with a
// hole), then at each other replica as leader (leader.go); when every
// replica's records are refused, the dataset stops: nothing is decided or
// acked for it until the committer restarts, and its messages come back
// only every stoppedRedelivery. An injected crash is returned.
func (w *worker) failed(ctx context.Context, err error, items []item) error {
	if errors.Is(err, errCrash) {
		w.c.signalFatal(err)
		return err
	}
	w.dropState()
	if errors.Is(err, errUntrustedLog) {
		// The records may have come from a replica that lost some (a
		// damaged block file): the dataset is loaded again, at the
		// stream leader (leader.go).
		if again, wait := w.retryUntrusted(ctx, err); again {
			w.retryAt = time.Now().Add(wait)
			nakItems(items, wait)
			w.setStatus(DatasetRetrying, reasonFailed, err.Error())
			return nil
		}
	}
	if errors.Is(err, errUntrustedLog) {
		w.stopped = true
		nakItems(items, stoppedRedelivery)
		w.setStatus(DatasetStopped, reasonUntrustedLog, err.Error())
		w.c.metrics.stopped.WithLabelValues(w.ds, reasonUntrustedLog).Set(1)
		w.c.log.Error("dataset stopped: its decision log holds a record that cannot be trusted; nothing is decided or acked for it until the log is repaired and the committer restarted",
			"dataset", w.ds, "err", err)
		return nil
	}
	pause := workerRestart.Delay(w.failures)
	w.failures++
	w.retryAt = time.Now().Add(pause)
	nakItems(items, pause)
	if ctx.Err() == nil && errors.Is(err, declog.ErrLogFull) {
		// Nothing was appended: the staged messages wait in CG_TXN
		// (handed back, not acked) until the log has room.
		w.setStatus(DatasetRetrying, reasonLogFull, err.Error())
		w.c.log.Error("decision log full: nothing is decided for the dataset until CG_DEC has room (its max bytes or messages, or the account's storage); retrying",
			"dataset", w.ds, "attempt", w.failures, "pause", pause, "err", err)
		return nil
	}
	if ctx.Err() == nil {
		w.setStatus(DatasetRetrying, reasonFailed, err.Error())
		w.c.log.Error("dataset failed; retrying", "dataset", w.ds, "attempt", w.failures, "pause", pause, "err", err)
	}
	return nil
}

// workerRestart paces the retries of a failed dataset: one that fails
// again right after (a broken committed state, an unreachable log) backs
// off up to Max instead of spinning.
var workerRestart = retry.Backoff{Initial: 500 * time.Millisecond, Max: 30 * time.Second}
