package declog

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/retry"
	"cellguard/internal/subject"
)

// OpenWhenReady opens the decision log for a follower that starts
// beside the committer (the publisher, the namespace), retrying until the
// committer has created the stream or ctx ends.
func OpenWhenReady(ctx context.Context, nc *nats.Conn, prefix string) (jetstream.JetStream, *Log, error) {
	sc, err := subject.NewScheme(prefix)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	b := retry.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second}
	for attempt := 0; ; attempt++ {
		l, err := Open(ctx, js, sc, Options{RequestTimeout: 10 * time.Second})
		if err == nil {
			return js, l, nil
		}
		if err := retry.Sleep(ctx, b.Delay(attempt)); err != nil {
			return nil, nil, err
		}
	}
}
