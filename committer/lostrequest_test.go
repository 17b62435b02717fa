package committer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
)

// swallowingStream never answers the first swallow GetLastMsgForSubject
// calls, as when a request goes out on a connection that is dropping or is
// routed to a server being shut down (a killed stream leader).
type swallowingStream struct {
	jetstream.Stream
	swallow atomic.Int32
}

func (s *swallowingStream) GetLastMsgForSubject(ctx context.Context, subj string) (*jetstream.RawStreamMsg, error) {
	if s.swallow.Add(-1) >= 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Stream.GetLastMsgForSubject(ctx, subj)
}

// TestCatchUpSurvivesLostRequest: a log read whose request is lost must
// be retried after a short timeout, not wait out catchUp's one-minute
// deadline while the dataset's staged transactions stall (the cause of
// TestClusterStreamLeaderKilled's rare "150 decisions after 1m0s").
func TestCatchUpSurvivesLostRequest(t *testing.T) {
	srv := runServer(t)
	nc, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	ensureStreamsFor(t, js, cfg)
	ds := "lostreq"

	c, err := New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.openStreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	w := newWorker(c, ds)
	if err := w.load(t.Context()); err != nil {
		t.Fatal(err)
	}

	// Another committer decides a transaction; w must catch up on it.
	r := start(t, srv.URL(), cfg)
	id := newUUID()
	stage(t, js, ds, id, mustMarshal(t, createTxn(id)))
	waitDecided(t, js, ds, 1, 10*time.Second)
	_ = r.stop(t)

	sw := &swallowingStream{Stream: c.dec}
	sw.swallow.Store(1)
	c.useStreams(c.txn, sw, c.obj)
	begin := time.Now()
	if err := w.catchUp(t.Context()); err != nil {
		t.Fatalf("catchUp: %v", err)
	}
	if d := time.Since(begin); d > 15*time.Second {
		t.Errorf("catchUp took %v after one lost request, want a retry within seconds", d)
	}
	if w.st.HeadVersion() != 1 || !w.st.Decided.Has(id) {
		t.Errorf("after catchUp: head %d, decided(%s) = %v; want 1, true", w.st.HeadVersion(), id, w.st.Decided.Has(id))
	}
}
