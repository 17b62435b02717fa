package namespace

import (
	"context"
	"sync"
	"time"

	"cellguard/internal/declog"
	"cellguard/internal/retry"
)

// A table's decision feed follows its decision log live (declog Scan
// with Live: one ordered consumer, only while the table commits) and
// keeps its newest records, so that a version/create learns of its
// decision as soon as the log holds it, without polling. It is a fast
// path only: the waiter still looks at the log itself now and then
// (feedFallback), so a feed that lags or fails costs time, never a
// decision.
type decisionFeed struct {
	mu      sync.Mutex
	running bool
	users   int
	stop    context.CancelFunc
	done    chan struct{} // closed when the running read has ended
	idle    *time.Timer
	changed chan struct{} // closed when recs changes
	recs    []declog.Record
}

const (
	// feedRecords bounds the records a feed keeps: only one
	// version/create of a table waits at a time on a server (the
	// table's commit lock), so a few suffice.
	feedRecords = 16
	// feedLinger is how long a feed follows a table after its last
	// waiter left: a client's next commit usually comes sooner.
	feedLinger = 30 * time.Second
)

// feedFallback is the waiter's own look at the log: after feedFirst,
// then at intervals doubling up to feedMax.
const (
	feedFirst = 20 * time.Millisecond
	feedMax   = 200 * time.Millisecond
)

// join starts following ds from log sequence from, if not following
// already, and counts a waiter until leave.
func (f *decisionFeed) join(s *Server, ds string, from uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users++
	if f.idle != nil {
		f.idle.Stop()
		f.idle = nil
	}
	if f.running {
		return
	}
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	f.running, f.stop, f.done = true, cancel, done
	go func() {
		defer close(done)
		f.follow(ctx, s, ds, from)
	}()
}

// leave ends a waiter; the feed stops feedLinger after the last one.
func (f *decisionFeed) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.users--
	if f.users > 0 || !f.running {
		return
	}
	f.idle = time.AfterFunc(feedLinger, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.users == 0 && f.running {
			f.stopLocked()
		}
	})
}

// close stops the feed and waits until its read has ended (the server
// stops serving).
func (f *decisionFeed) close() {
	f.mu.Lock()
	if f.idle != nil {
		f.idle.Stop()
		f.idle = nil
	}
	if f.running {
		f.stopLocked()
	}
	done := f.done
	f.mu.Unlock()
	if done != nil {
		<-done
	}
}

func (f *decisionFeed) stopLocked() {
	f.stop()
	f.running = false
	f.recs = nil
}

// follow reads ds's decision log live from sequence from until ctx ends,
// starting again after a failure.
func (f *decisionFeed) follow(ctx context.Context, s *Server, ds string, from uint64) {
	b := retry.Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second}
	for attempt := 0; ctx.Err() == nil; attempt++ {
		for r, err := range s.cfg.Log.Scan(ctx, s.sc.DecOf(ds), from, declog.ScanOptions{Live: true}) {
			if err != nil {
				break
			}
			attempt = 0
			from = r.Seq + 1
			f.add(r)
		}
		if retry.Sleep(ctx, b.Delay(attempt)) != nil {
			return
		}
	}
}

func (f *decisionFeed) add(r declog.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.running {
		return
	}
	f.recs = append(f.recs, r)
	if len(f.recs) > feedRecords {
		f.recs = append(f.recs[:0], f.recs[len(f.recs)-feedRecords:]...)
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// find returns the decision of the staged message at txnSeq (or of
// transaction id) among the feed's records at or after log sequence
// from, and a channel closed when the feed has more.
func (f *decisionFeed) find(from, txnSeq uint64, id string) (declog.Record, bool, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.recs {
		if r.Seq >= from && (r.TxnSeq == txnSeq || r.TxnID == id) {
			return r, true, f.changed
		}
	}
	return declog.Record{}, false, f.changed
}
