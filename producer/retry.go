package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cellguard/internal/retry"
)

// RecomputeFunc computes a transaction from a snapshot: read what it
// needs (Txn.Read protects what it read), write data files, build the
// transaction. Returning a nil Txn means there is nothing to commit.
type RecomputeFunc func(ctx context.Context, snap *Snapshot) (*Txn, error)

// RetryOption tunes one RetryWithRecompute call.
type RetryOption func(*retryOptions) error

type retryOptions struct {
	attempts     int
	initial, max time.Duration
	maxElapsed   time.Duration
	onRetry      func(attempt int, err error)
}

// MaxAttempts bounds the number of commits tried (default 5).
func MaxAttempts(n int) RetryOption {
	return func(o *retryOptions) error {
		if n < 1 {
			return fmt.Errorf("%w: MaxAttempts(%d)", ErrInvalidOption, n)
		}
		o.attempts = n
		return nil
	}
}

// Backoff sets the pause before the first retry and its cap; each retry
// doubles it, with full jitter (default 20 ms, 1 s).
func Backoff(initial, max time.Duration) RetryOption {
	return func(o *retryOptions) error {
		if initial <= 0 || max < initial {
			return fmt.Errorf("%w: Backoff(%v, %v)", ErrInvalidOption, initial, max)
		}
		o.initial, o.max = initial, max
		return nil
	}
}

// MaxElapsed bounds the whole call when ctx has no deadline (default: the
// client's Timeout).
func MaxElapsed(d time.Duration) RetryOption {
	return func(o *retryOptions) error {
		if d <= 0 {
			return fmt.Errorf("%w: MaxElapsed(%v)", ErrInvalidOption, d)
		}
		o.maxElapsed = d
		return nil
	}
}

// OnRetry calls fn before each retry with the attempt that failed
// (1-based) and its rejection.
func OnRetry(fn func(attempt int, err error)) RetryOption {
	return func(o *retryOptions) error {
		o.onRetry = fn
		return nil
	}
}

// RetryWithRecompute commits the transaction fn computes from the latest
// version of ds. On a retryable rejection it waits (exponential backoff
// with jitter), re-reads the latest version, runs fn again and commits the
// new transaction, up to MaxAttempts commits; any other error ends it. A
// commit whose outcome is lost is looked up, never recomputed blindly: a
// new transaction is computed only when the log shows the previous one
// rejected, or withdrawn (ErrNotStaged): never while it may still commit.
//
// It returns the version committed, or the last error (a *RejectedError
// after the last attempt). When fn returns a nil Txn it returns the
// version fn read and nil.
func (c *Client) RetryWithRecompute(ctx context.Context, ds string, fn RecomputeFunc, opts ...RetryOption) (uint64, error) {
	o := retryOptions{attempts: 5, initial: 20 * time.Millisecond, max: time.Second, maxElapsed: c.cfg.Timeout}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return 0, err
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.maxElapsed)
		defer cancel()
	}
	b := retry.Backoff{Initial: o.initial, Max: o.max, Jitter: true}
	for attempt := 1; ; attempt++ {
		snap, err := c.Latest(ctx, ds)
		if err != nil {
			return 0, err
		}
		txn, err := fn(ctx, snap)
		if err != nil {
			return 0, err
		}
		if txn == nil {
			return snap.Version(), nil
		}
		v, err := c.Commit(ctx, txn)
		if errors.Is(err, ErrOutcomeUnknown) && ctx.Err() == nil {
			v, err = c.Outcome(ctx, ds, txn.ID(), txn.ReadVersion())
		}
		if errors.Is(err, ErrNotStaged) {
			// Withdrawn: the uuid never commits, a recomputation may.
			err = fmt.Errorf("%w: %w", ErrRetryable, err)
		}
		if err == nil || !errors.Is(err, ErrRetryable) {
			return v, err
		}
		if attempt >= o.attempts {
			return 0, fmt.Errorf("producer: %s: gave up after %d attempts: %w", ds, attempt, err)
		}
		if o.onRetry != nil {
			o.onRetry(attempt, err)
		}
		if serr := retry.Sleep(ctx, b.Delay(attempt-1)); serr != nil {
			return 0, fmt.Errorf("producer: %s: retry after attempt %d: %w (last: %w)", ds, attempt, serr, err)
		}
	}
}
