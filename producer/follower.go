package producer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/subject"
	"cellguard/table"
)

// follower follows one dataset's decision log from the latest committed
// version on: it keeps the head manifest and a window of recent ones, and
// hands each decision to the Commit or Outcome waiting for it. Its consume
// callback runs on one goroutine owned by the ordered consumer; the
// goroutine exits when stop is called.
type follower struct {
	c  *Client
	ds string

	once     sync.Once
	startErr error

	mu       sync.Mutex
	head     *table.Manifest // nil before the dataset is created
	seen     uint64          // last CG_DEC sequence handled
	window   map[uint64]snapEntry
	waiters  map[string][]chan Record
	progress chan struct{} // closed and replaced whenever seen advances
	err      error         // the log could not be followed
	cc       jetstream.ConsumeContext
	old      snapEntry // the last version loaded from outside the window
}

type snapEntry struct {
	m   *table.Manifest
	seq uint64
}

func newFollower(c *Client, ds string) *follower {
	return &follower{c: c, ds: ds, window: map[uint64]snapEntry{}, waiters: map[string][]chan Record{}, progress: make(chan struct{})}
}

// started starts the follower once: load the latest committed version,
// then consume every record after it.
func (f *follower) started(ctx context.Context) error {
	f.once.Do(func() { f.startErr = f.start(ctx) })
	return f.startErr
}

func (f *follower) start(ctx context.Context) error {
	c := f.c
	if _, _, err := c.streams(ctx); err != nil {
		return err
	}
	m, seq, err := c.load(ctx, f.ds, 0, f)
	switch {
	case errors.Is(err, ErrDatasetNotFound):
		// Follow from the start: the creating record is still to come.
	case err != nil:
		return err
	default:
		f.head = m
		f.seen = seq
		f.window[m.Version()] = snapEntry{m: m, seq: seq}
	}
	cons, err := c.js.OrderedConsumer(ctx, c.sc.DecStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{c.sc.DecOf(f.ds)},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    seq + 1,
	})
	if err != nil {
		return fmt.Errorf("producer: follow %s: %w", f.ds, err)
	}
	cc, err := cons.Consume(f.handle, jetstream.PullMaxMessages(256))
	if err != nil {
		return fmt.Errorf("producer: follow %s: %w", f.ds, err)
	}
	f.mu.Lock()
	f.cc = cc
	f.mu.Unlock()
	return nil
}

// failed reports whether the follower stopped following.
func (f *follower) failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err != nil
}

func (f *follower) stop() {
	f.mu.Lock()
	cc := f.cc
	f.cc = nil
	if f.err == nil {
		f.err = ErrClosed
	}
	f.broadcast()
	f.mu.Unlock()
	if cc != nil {
		cc.Stop()
	}
}

// handle folds one log record in. It runs on the consumer's goroutine,
// so records arrive one at a time, in log order.
func (f *follower) handle(msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		f.fail(fmt.Errorf("producer: follow %s: %w", f.ds, err))
		return
	}
	r, err := parseRecord(f.c.sc, md.Sequence.Stream, msg.Subject(), msg.Headers(), msg.Data())
	if err != nil {
		f.fail(fmt.Errorf("producer: follow %s: %w", f.ds, err))
		return
	}
	f.mu.Lock()
	head, seen, failed := f.head, f.seen, f.err != nil
	f.mu.Unlock()
	if failed || r.Seq <= seen {
		return
	}
	var next *table.Manifest
	if r.Outcome == subject.Committed {
		var have uint64
		if head != nil {
			have = head.Version()
		}
		if r.Version <= have { // a committed record the load already included
			f.advance(r, nil)
			return
		}
		if next, err = applyRecord(head, r, f); err != nil {
			f.fail(err)
			return
		}
	}
	f.advance(r, next)
}

func (f *follower) advance(r Record, next *table.Manifest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if next != nil {
		f.head = next
		f.window[next.Version()] = snapEntry{m: next, seq: r.Seq}
		if w := uint64(f.c.cfg.Window); next.Version() > w {
			delete(f.window, next.Version()-w)
		}
	}
	f.seen = r.Seq
	for _, ch := range f.waiters[r.TxnID] {
		ch <- r // buffered, one record per waiter
	}
	delete(f.waiters, r.TxnID)
	f.broadcast()
}

func (f *follower) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
	f.broadcast()
}

// broadcast wakes every waitSeen; f.mu is held.
func (f *follower) broadcast() {
	close(f.progress)
	f.progress = make(chan struct{})
}

// waitSeen blocks until the follower has handled the record at seq.
func (f *follower) waitSeen(ctx context.Context, seq uint64) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		f.mu.Lock()
		seen, err, ch := f.seen, f.err, f.progress
		f.mu.Unlock()
		if seen >= seq {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		case <-tick.C:
			if err := f.c.connErr(); err != nil {
				return err
			}
		}
	}
}

// waiter is a registration for the decision of one transaction.
type waiter struct {
	ch     chan Record
	cancel func()
}

// wait registers for the decision of txnID; records handled from now on
// are delivered to the waiter.
func (f *follower) wait(txnID string) waiter {
	ch := make(chan Record, 1)
	f.mu.Lock()
	f.waiters[txnID] = append(f.waiters[txnID], ch)
	f.mu.Unlock()
	return waiter{ch: ch, cancel: func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		ws := f.waiters[txnID]
		for i, w := range ws {
			if w == ch {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(f.waiters, txnID)
		} else {
			f.waiters[txnID] = ws
		}
	}}
}

// snapshot returns the head as a Snapshot, or ErrDatasetNotFound.
func (f *follower) snapshot() (*Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	if f.head == nil {
		return nil, fmt.Errorf("producer: %s: %w", f.ds, ErrDatasetNotFound)
	}
	return &Snapshot{dataset: f.ds, m: f.head, seq: f.window[f.head.Version()].seq}, nil
}

// cached returns version v if it is in memory.
func (f *follower) cached(v uint64) (snapEntry, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.window[v]; ok {
		return e, true
	}
	if f.old.m != nil && f.old.m.Version() == v {
		return f.old, true
	}
	return snapEntry{}, false
}

func (f *follower) seqOf(v uint64) (uint64, bool) {
	e, ok := f.cached(v)
	return e.seq, ok
}

func (f *follower) headVersion() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.head == nil {
		return 0
	}
	return f.head.Version()
}

// Manifest implements table.Versions for the Restore operation.
func (f *follower) Manifest(v uint64) (*table.Manifest, error) {
	if e, ok := f.cached(v); ok {
		return e.m, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.c.cfg.Timeout)
	defer cancel()
	m, seq, err := f.c.load(ctx, f.ds, v, f)
	if errors.Is(err, ErrVersionNotFound) || errors.Is(err, ErrDatasetNotFound) {
		return nil, fmt.Errorf("%w: %v", table.ErrVersionNotFound, err)
	}
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.old = snapEntry{m: m, seq: seq}
	f.mu.Unlock()
	return m, nil
}
