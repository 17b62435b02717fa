package events

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
)

// consume pulls records from cons through the decision log, at most max
// in flight, and calls fn for each until fn returns an error (returned as
// is) or ctx ends (nil; fn is not called once ctx has ended). A malformed
// record reaches fn with its error, to settle its message; a failure of
// the pull itself is wrapped as "events: <what>: …". It is the one pull
// loop behind Subscriber.Run and Rejections.Run.
func consume(ctx context.Context, dl *declog.Log, cons jetstream.Consumer, max int, what string, fn func(declog.Delivery, error) error) error {
	for d, err := range dl.Pull(ctx, cons, max, false) {
		if ctx.Err() != nil {
			// Run is ending: a record pulled meanwhile goes back to the
			// consumer instead of reaching fn after ctx ended.
			if d.Msg != nil && acks(cons) {
				_ = d.Msg.Nak()
			}
			return nil
		}
		if err != nil && !errors.Is(err, declog.ErrMalformedRecord) {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("events: %s: %w", what, err)
		}
		if err := fn(d, err); err != nil {
			return err
		}
	}
	return nil
}

// acks reports whether cons expects acknowledgements (a durable consumer,
// not an ordered one).
func acks(cons jetstream.Consumer) bool {
	info := cons.CachedInfo()
	return info != nil && info.Config.AckPolicy != jetstream.AckNonePolicy
}
