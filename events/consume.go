package events

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// consume pulls messages from cons, at most max in flight, and calls fn for
// each until fn returns an error (returned as is) or ctx ends (nil). A
// failure of the pull itself is wrapped as "events: <what>: …". It is the
// one pull loop behind Subscriber.Run and Rejections.Run.
func consume(ctx context.Context, cons jetstream.Consumer, max int, what string, fn func(jetstream.Msg) error) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(max))
	if err != nil {
		return fmt.Errorf("events: %s: %w", what, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("events: %s: %w", what, err)
		}
		if err := fn(m); err != nil {
			return err
		}
	}
}
