package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/natsconn"
	"cellguard/internal/retry"
)

// consume pulls records from cons through the decision log, at most max
// in flight, and calls fn for each until fn returns an error (returned as
// is) or ctx ends (nil; fn is not called once ctx has ended). A malformed
// record reaches fn with its error, to settle its message; a failure of
// the pull itself is wrapped as "events: <what>: …". A pull that ends
// because the server went away (a restart, a lost connection, missed
// heartbeats) starts again on the same durable consumer, after a pause
// growing to a few seconds, so that a worker's Run rides through a
// server restart as a live subscriber's does. It is the one pull loop
// behind Subscriber.Run and Rejections.Run.
func consume(ctx context.Context, dl *declog.Log, cons jetstream.Consumer, max int, what string, fn func(declog.Delivery, error) error) error {
	for attempt := 0; ; attempt++ {
		pulled, err := consumeOnce(ctx, dl, cons, max, what, fn)
		if err == nil || !pulled || !natsconn.Transient(err) || ctx.Err() != nil {
			return err
		}
		if retry.Sleep(ctx, min(100*time.Millisecond<<min(attempt, 5), 3*time.Second)) != nil {
			return nil
		}
	}
}

// consumeOnce is one pull of consume; pulled reports that its error came
// from the pull, not from fn.
func consumeOnce(ctx context.Context, dl *declog.Log, cons jetstream.Consumer, max int, what string, fn func(declog.Delivery, error) error) (pulled bool, err error) {
	for d, err := range dl.Pull(ctx, cons, max, false) {
		if ctx.Err() != nil {
			// Run is ending: a record pulled meanwhile goes back to the
			// consumer instead of reaching fn after ctx ended.
			if d.Msg != nil && acks(cons) {
				_ = d.Msg.Nak()
			}
			return false, nil
		}
		if err != nil && !errors.Is(err, declog.ErrMalformedRecord) {
			if ctx.Err() != nil {
				return false, nil
			}
			return true, fmt.Errorf("events: %s: %w", what, err)
		}
		if err := fn(d, err); err != nil {
			return false, err
		}
	}
	return false, nil
}

// acks reports whether cons expects acknowledgements (a durable consumer,
// not an ordered one).
func acks(cons jetstream.Consumer) bool {
	info := cons.CachedInfo()
	return info != nil && info.Config.AckPolicy != jetstream.AckNonePolicy
}
