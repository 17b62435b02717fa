package declog

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/retry"
)

// Why a consumer that acknowledges is read with Fetch, not Messages.
//
// The Messages iterator of nats.go (v1.55) refills in Next: when fewer
// than half the messages asked for remain outstanding, Next asks for more
// — but only if its background goroutine has finished publishing the
// previous pull request, which it marks as in progress from before the
// publish until after it. Next checks once and then blocks for a message;
// nothing but a message, a status message or the missing-heartbeat timer
// wakes it to check again. When the whole outstanding batch arrives and
// is consumed before that goroutine clears its mark (a slow goroutine on a
// loaded machine), no request is left at the server, so no message and no
// heartbeat ever comes: the iterator stalls until the heartbeat timer fires
// (2 × 15 s for a durable consumer), and Next then fails with
// ErrNoHeartbeat. A durable consumer read one message at a time (MaxAckPending 1, as an
// events subscriber or a work queue reads) drains its whole batch at
// every message, so it meets the race often (the events test of a
// resumed durable subscriber stalled about once in 40 runs under -race,
// the server holding no pull request and one message pending). A shorter
// expiry only shortens the stall, which then ends in that error sooner.
//
// Fetch has no such state: each call publishes one request before it
// returns and its batch ends when the request is satisfied, expires, or
// misses heartbeats, so pullFetch always has exactly one request at the
// server while it waits, and asks for the next one only after the caller
// has handled the last message — never while ctx has ended, so no request
// is left behind to take a message a stopped reader can no longer hand
// back (it would be held until AckWait).
//
// Ordered consumers keep Messages: Fetch on an ordered consumer recreates
// the server's consumer at every call, and their batches (256 or more)
// are rarely drained in one go; should one stall, the ordered consumer's
// own missing-heartbeat check (2 × 5 s) recreates it.

// fetchWait bounds one Fetch request; fetches follow each other, so it is
// the time an idle reader goes without a new request, not a limit on the
// reader. nats.go sends it heartbeats every 5 s (a Fetch of 10 s or more
// gets them, keeping heartbeat < wait/2) and ends the batch with
// ErrNoHeartbeat after two missed ones.
const fetchWait = 30 * time.Second

func (l *Log) pull(ctx context.Context, cons jetstream.Consumer, max int, headersOnly, bounded bool) iter.Seq2[Delivery, error] {
	switch {
	case acks(cons):
		return l.pullFetch(ctx, cons, max, headersOnly)
	case bounded && l.opts.FullAPI:
		return l.pullBounded(ctx, cons, max, headersOnly)
	}
	return l.pullMessages(ctx, cons, max, headersOnly, bounded, nil)
}

// A bounded read of an ordered consumer (a scan up to the last record
// present when it began: a committer loading a dataset, catching up after
// a fence) does not use Messages either. Its stall (above) was seen on a
// 3-node cluster: a committer taking a dataset over spent 10 s reading
// the few records after the checkpoint, and the dataset waited that long.
// It asks with FetchNoWait, each call answered at once with what is
// there: no request is left to miss, and an empty answer before the end
// is retried a few times, then reported. Each fetch replaces the ordered
// consumer's server-side consumer, deleting the last one, which only the
// committer's role may do (Options.FullAPI); other users keep Messages.

// boundedEmpty bounds the empty answers in a row a bounded read takes
// before it reports an error (its caller retries the scan from where it
// got to); boundedPause separates them.
const (
	boundedEmpty = 20
	boundedPause = 50 * time.Millisecond
)

// pullBounded reads an ordered consumer to the end of what it had pending
// when it was created (the caller stops at its bound), with FetchNoWait.
func (l *Log) pullBounded(ctx context.Context, cons jetstream.Consumer, max int, headersOnly bool) iter.Seq2[Delivery, error] {
	return func(yield func(Delivery, error) bool) {
		if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
			return // nothing on the filter from the start sequence on
		}
		err := fetchOrdered(ctx, cons, max, func(m jetstream.Msg) bool { return yieldMsg(l, m, headersOnly, yield) })
		if err != nil {
			yield(Delivery{}, fmt.Errorf("declog: pull: %w", err))
		}
	}
}

// fetchOrdered reads an ordered consumer with FetchNoWait, up to max
// messages a call, handing each to each until each returns false (then
// it returns nil). An empty answer, or none from a consumer not serving
// yet (no responders, seen on a cluster), is asked again after
// boundedPause, up to boundedEmpty times in a row; then, like a failed
// fetch or ctx's end, it is an error.
func fetchOrdered(ctx context.Context, cons jetstream.Consumer, max int, each func(jetstream.Msg) bool) error {
	for empty := 0; ; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := 0
		b, err := cons.FetchNoWait(max)
		if err == nil {
			for m := range b.Messages() {
				n++
				if !each(m) {
					return nil
				}
			}
			err = b.Error()
		}
		switch {
		case err == nil, errors.Is(err, jetstream.ErrNoMessages), errors.Is(err, nats.ErrNoResponders):
		default:
			return err
		}
		if n > 0 {
			empty = 0
			continue
		}
		if empty++; empty == boundedEmpty {
			return fmt.Errorf("no message came in %d asks", boundedEmpty)
		}
		if err := retry.Sleep(ctx, boundedPause); err != nil {
			return err
		}
	}
}

// acks reports whether cons expects acknowledgements (a durable consumer
// the caller settles, not an ordered one).
func acks(cons jetstream.Consumer) bool {
	info := cons.CachedInfo()
	return info != nil && info.Config.AckPolicy != jetstream.AckNonePolicy
}

// pullMessages reads an ordered consumer through its Messages iterator;
// with w set, a live read watched for a stall (live.go), which ends it
// with w.stuck set and no error.
func (l *Log) pullMessages(ctx context.Context, cons jetstream.Consumer, max int, headersOnly, bounded bool, w *stallWatch) iter.Seq2[Delivery, error] {
	return func(yield func(Delivery, error) bool) {
		it, err := cons.Messages(jetstream.PullMaxMessages(max))
		if err != nil {
			yield(Delivery{}, fmt.Errorf("declog: pull: %w", err))
			return
		}
		defer it.Stop()
		if info := cons.CachedInfo(); bounded && info != nil && info.NumPending == 0 {
			return // nothing on the filter from the start sequence on
		}
		stop := context.AfterFunc(ctx, it.Stop)
		defer stop()
		if w != nil {
			w.start(ctx, it.Stop)
			defer w.end()
		}
		for {
			m, err := it.Next()
			if err != nil {
				if w != nil && w.stuck.Load() && ctx.Err() == nil {
					return
				}
				if ctx.Err() != nil {
					err = ctx.Err()
				}
				yield(Delivery{}, fmt.Errorf("declog: pull: %w", err))
				return
			}
			if w != nil {
				if md, err := m.Metadata(); err == nil {
					w.had(md.Sequence.Stream)
				}
			}
			if !yieldMsg(l, m, headersOnly, yield) {
				return
			}
		}
	}
}

// pullFetch reads a consumer that acknowledges with one Fetch of up to
// max messages after another, until the caller stops or ctx ends.
func (l *Log) pullFetch(ctx context.Context, cons jetstream.Consumer, max int, headersOnly bool) iter.Seq2[Delivery, error] {
	return func(yield func(Delivery, error) bool) {
		for ctx.Err() == nil {
			more, err := l.fetchOnce(ctx, cons, max, headersOnly, yield)
			if err != nil {
				yield(Delivery{}, fmt.Errorf("declog: pull: %w", err))
				return
			}
			if !more {
				return
			}
		}
		yield(Delivery{}, fmt.Errorf("declog: pull: %w", ctx.Err()))
	}
}

// fetchOnce runs one Fetch and yields its messages. It returns more=false
// when the caller stopped ranging (the batch's messages not yielded are
// handed back to the consumer), and an error only for a failure that is
// not the normal end of a request: an expired request, missed heartbeats
// or a leader change (the request was lost, say by a server restart) and
// the request's own deadline just make the caller fetch again.
func (l *Log) fetchOnce(ctx context.Context, cons jetstream.Consumer, max int, headersOnly bool, yield func(Delivery, error) bool) (more bool, err error) {
	fctx, cancel := context.WithTimeout(ctx, fetchWait)
	defer cancel()
	b, err := cons.Fetch(max, jetstream.FetchContext(fctx))
	if err != nil {
		if ctx.Err() != nil || deadlinePassed(ctx) {
			<-ctx.Done() // FetchContext refuses a context at its deadline
			return false, ctx.Err()
		}
		return false, err
	}
	for m := range b.Messages() {
		if !yieldMsg(l, m, headersOnly, yield) {
			cancel()
			handBack(b)
			return false, nil
		}
	}
	switch err := b.Error(); {
	case err == nil, errors.Is(err, jetstream.ErrNoHeartbeat), errors.Is(err, jetstream.ErrConsumerLeadershipChanged):
		return true, nil
	case ctx.Err() != nil:
		return false, ctx.Err()
	case errors.Is(err, context.DeadlineExceeded):
		return true, nil // fctx's bound: the server's expiry notice was lost
	default:
		return false, err
	}
}

// deadlinePassed reports whether ctx's deadline is due, though ctx may not
// report it yet.
func deadlinePassed(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// handBack returns the messages of a stopped batch the caller never saw to
// the consumer, for redelivery now rather than after AckWait.
func handBack(b jetstream.MessageBatch) {
	for m := range b.Messages() {
		_ = m.Nak()
	}
}

// yieldMsg parses m and yields it; it reports whether to go on.
func yieldMsg(l *Log, m jetstream.Msg, headersOnly bool, yield func(Delivery, error) bool) bool {
	d, err := delivery(l.sc, m, headersOnly)
	if !yield(d, err) {
		return false
	}
	return d.Msg != nil // metadata unreadable: not a JetStream message
}
