// Package retry is the one retry loop of cellguard: exponential backoff,
// optionally with full jitter, whose sleeps end as soon as the context
// does.
//
// A caller describes the pauses with a Backoff and either drives its own
// loop with Backoff.Delay and Sleep (when each attempt needs bespoke
// handling between tries) or hands a function to Do:
//
//	b := retry.Backoff{Initial: 20 * time.Millisecond, Max: time.Second}
//	err := retry.Do(ctx, 5, b, func(ctx context.Context) error {
//		return fetch(ctx)
//	}, retry.Unless(ErrPermanent))
package retry

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Backoff describes the pause before each retry: Initial before the
// first, doubling up to Max. With Jitter each pause is drawn uniformly
// from [0, pause] ("full jitter"), which spreads out clients that failed
// together.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Jitter  bool
}

// Delay returns the pause after attempt (0-based) failed.
func (b Backoff) Delay(attempt int) time.Duration {
	d := b.Initial << min(attempt, 30)
	if d <= 0 || d > b.Max {
		d = b.Max
	}
	if b.Jitter && d > 0 {
		d = time.Duration(rand.Int64N(int64(d) + 1))
	}
	return d
}

// Sleep pauses for d, or until ctx ends; then it returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Do calls fn until it succeeds, attempts calls were made, ctx ends, or
// retryable (nil: every error is) says an error is final. It returns
// fn's last error; when ctx ends during a pause, ctx's error joined with
// fn's last one.
func Do(ctx context.Context, attempts int, b Backoff, fn func(context.Context) error, retryable func(error) bool) error {
	var err error
	for attempt := 0; attempt < max(attempts, 1); attempt++ {
		if err = fn(ctx); err == nil {
			return nil
		}
		if retryable != nil && !retryable(err) || attempt == attempts-1 {
			return err
		}
		if serr := Sleep(ctx, b.Delay(attempt)); serr != nil {
			return errors.Join(serr, err)
		}
	}
	return err
}

// Unless returns a retryable predicate that refuses errors matching any
// of final (errors.Is).
func Unless(final ...error) func(error) bool {
	return func(err error) bool {
		for _, f := range final {
			if errors.Is(err, f) {
				return false
			}
		}
		return true
	}
}
