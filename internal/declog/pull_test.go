package declog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/proto/cellguardpb"
)

// A durable consumer read one record at a time (MaxAckPending 1, as an
// events subscriber reads it) gets every record once and in order across
// runs: each batch is drained at every record, the case in which the
// Messages iterator of nats.go can fail to ask for the next one, and a run
// that ends in its handler leaves no pull request behind to take the next
// record (AckWait is an hour: a record taken so would not come back).
func TestPullDurableOneAtATime(t *testing.T) {
	l, js, sc := openLog(t)
	ds := "cities"
	const n = 60
	var expect uint64
	for v := uint64(1); v <= n; v++ {
		seqs, err := l.Append(t.Context(), ds, expect, []*cellguardpb.Decision{committed(t, ds, v)})
		if err != nil {
			t.Fatal(err)
		}
		expect = seqs[0]
	}
	cons, err := js.CreateConsumer(t.Context(), sc.DecStream(), jetstream.ConsumerConfig{
		Durable: "one", FilterSubject: sc.DecOf(ds), AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: 1, AckWait: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	next := uint64(1)
	for _, stopAt := range []uint64{n / 2, n} {
		// A generous bound against a hang; the runs normally take milliseconds.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		for d, err := range l.Pull(ctx, cons, 1, true) {
			if err != nil {
				if errors.Is(err, context.Canceled) && next > stopAt {
					break
				}
				cancel()
				t.Fatalf("Pull after version %d: %v", next-1, err)
			}
			if d.Version != next || d.Delivered != 1 {
				cancel()
				t.Fatalf("got version %d delivered %d times, want %d once", d.Version, d.Delivered, next)
			}
			if err := d.Msg.DoubleAck(ctx); err != nil {
				cancel()
				t.Fatal(err)
			}
			next++
			if d.Version == stopAt {
				cancel() // end the run from the handler, as events does
			}
		}
		cancel()
	}
	if next != n+1 {
		t.Fatalf("read up to version %d, want %d", next-1, n)
	}
}
