package declog

// A live scan follows the log past its end (an SDK client waiting for its
// decisions, an events subscriber) through an ordered consumer's Messages
// iterator, the only way to wait for new records without a request per
// wake-up. That iterator can stall (pull.go: its refill races with its
// own request goroutine) until two heartbeats are missed, 10 s; an SDK
// client saw its commits on one dataset answered only by its once-a-second
// fallback for that long. So a live scan that has had no record for
// liveQuiet asks the log for the last record on its filter: when the log
// holds one the scan has not had (still so a moment later), the consumer
// is stalled, and the scan goes on from a new one where it got to.

import (
	"context"
	"fmt"
	"iter"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// liveQuiet is how long a live scan goes without a record before it looks
// for a stall; liveRecheck is how long it then waits for a record in
// flight before it calls the consumer stalled.
const (
	liveQuiet   = time.Second
	liveRecheck = 200 * time.Millisecond
)

// scanLive is Scan with Live set.
func (l *Log) scanLive(ctx context.Context, filter string, from uint64, headersOnly bool) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		for {
			cons, err := l.ordered(ctx, filter, from, headersOnly)
			if err != nil {
				yield(Record{}, err)
				return
			}
			stalled := false
			for d, err := range l.pullLive(ctx, cons, filter, from, headersOnly, &stalled) {
				if err != nil {
					yield(Record{}, err)
					return
				}
				if !yield(d.Record, nil) {
					return
				}
				from = d.Seq + 1
			}
			if !stalled {
				return
			}
			l.liveRestarts.Add(1)
		}
	}
}

// pullLive reads an ordered consumer through its Messages iterator, from
// sequence from on, until the caller stops, ctx ends, or the consumer is
// found stalled: then it ends with *stalled set and no error.
func (l *Log) pullLive(ctx context.Context, cons jetstream.Consumer, filter string, from uint64, headersOnly bool, stalled *bool) iter.Seq2[Delivery, error] {
	return func(yield func(Delivery, error) bool) {
		it, err := cons.Messages(jetstream.PullMaxMessages(1000))
		if err != nil {
			yield(Delivery{}, fmt.Errorf("declog: pull: %w", err))
			return
		}
		defer it.Stop()
		stop := context.AfterFunc(ctx, it.Stop)
		defer stop()

		var next atomic.Uint64 // the first sequence not yet had
		next.Store(from)
		var stuck, over atomic.Bool
		var dog *time.Timer
		dog = time.AfterFunc(liveQuiet, func() {
			if over.Load() {
				return
			}
			if l.stalledAt(ctx, filter, &next) {
				stuck.Store(true)
				it.Stop()
				return
			}
			if !over.Load() {
				dog.Reset(liveQuiet)
			}
		})
		defer func() {
			over.Store(true)
			dog.Stop()
		}()
		for {
			m, err := it.Next()
			if err != nil {
				if stuck.Load() && ctx.Err() == nil {
					*stalled = true
					return
				}
				if ctx.Err() != nil {
					err = ctx.Err()
				}
				yield(Delivery{}, fmt.Errorf("declog: pull: %w", err))
				return
			}
			dog.Reset(liveQuiet)
			if md, err := m.Metadata(); err == nil {
				next.Store(md.Sequence.Stream + 1)
			}
			if !yieldMsg(l, m, headersOnly, yield) {
				return
			}
		}
	}
}

// stalledAt reports whether the log holds a record on filter at or past
// *next that has still not arrived liveRecheck later.
func (l *Log) stalledAt(ctx context.Context, filter string, next *atomic.Uint64) bool {
	want := next.Load()
	last, ok, err := l.lastSeq(ctx, filter)
	if err != nil || !ok || last < want {
		return false
	}
	t := time.NewTimer(liveRecheck)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	return next.Load() == want
}
