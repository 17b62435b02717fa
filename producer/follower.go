package producer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"cellguard/internal/declog"
	"cellguard/table"
)

// follower follows one dataset's decision log from the latest committed
// version on: it keeps the head manifest and a window of recent ones, and
// hands each decision to the Commit or Outcome waiting for it. It reads
// the log on one goroutine it owns; stop ends that goroutine and waits
// for it.
type follower struct {
	c  *Client
	ds string

	once     sync.Once
	startErr error

	mu       sync.Mutex
	head     *table.Manifest // nil before the dataset is created
	seen     uint64          // last CG_DEC sequence handled
	window   map[uint64]snapEntry
	waiters  map[string][]chan declog.Record
	progress chan struct{} // closed and replaced whenever seen advances
	err      error         // the log could not be followed
	cancel   context.CancelFunc
	done     chan struct{} // closed when the reading goroutine has exited
	old      snapEntry     // the last version loaded from outside the window
}

type snapEntry struct {
	m   *table.Manifest
	seq uint64
}

func newFollower(c *Client, ds string) *follower {
	return &follower{c: c, ds: ds, window: map[uint64]snapEntry{}, waiters: map[string][]chan declog.Record{}, progress: make(chan struct{})}
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
	dl, err := c.decisionLog(ctx)
	if err != nil {
		return err
	}
	// The follower outlives the call that starts it: its reading
	// goroutine ends with stop, not with ctx.
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	f.mu.Lock()
	f.cancel, f.done = cancel, done
	f.mu.Unlock()
	go func() {
		defer close(done)
		f.follow(fctx, dl, seq+1)
	}()
	return nil
}

// follow folds the records of the dataset from sequence from on, live,
// until ctx ends or a record cannot be folded in.
func (f *follower) follow(ctx context.Context, dl *declog.Log, from uint64) {
	for r, err := range dl.Scan(ctx, dl.Scheme().DecOf(f.ds), from, declog.ScanOptions{Live: true}) {
		if err != nil {
			if ctx.Err() == nil {
				f.fail(fmt.Errorf("producer: follow %s: %w", f.ds, err))
			}
			return
		}
		if !f.handle(ctx, r) {
			return
		}
	}
}

// seenSeq returns the last log sequence the follower handled.
func (f *follower) seenSeq() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen
}

// failed reports whether the follower stopped following.
func (f *follower) failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err != nil
}

// stop ends the follower and waits for its reading goroutine.
func (f *follower) stop() {
	f.mu.Lock()
	cancel, done := f.cancel, f.done
	if f.err == nil {
		f.err = ErrClosed
	}
	f.broadcast()
	f.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// handle folds one log record in and reports whether to go on. It runs
// on the follower's goroutine, so records arrive one at a time, in log
// order.
func (f *follower) handle(ctx context.Context, r declog.Record) bool {
	f.mu.Lock()
	head, seen, failed := f.head, f.seen, f.err != nil
	f.mu.Unlock()
	if failed {
		return false
	}
	if r.Seq <= seen {
		return true
	}
	var next *table.Manifest
	if r.Committed() {
		var have uint64
		if head != nil {
			have = head.Version()
		}
		if r.Version <= have { // a committed record the load already included
			f.advance(r, nil)
			return true
		}
		var err error
		if next, _, err = declog.Replay(ctx, head, r, f); err != nil {
			f.fail(fmt.Errorf("producer: %w", err))
			return false
		}
	}
	f.advance(r, next)
	return true
}

func (f *follower) advance(r declog.Record, next *table.Manifest) {
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
	ch     chan declog.Record
	cancel func()
}

// wait registers for the decision of txnID; records handled from now on
// are delivered to the waiter.
func (f *follower) wait(txnID string) waiter {
	ch := make(chan declog.Record, 1)
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
func (f *follower) Manifest(ctx context.Context, v uint64) (*table.Manifest, error) {
	if e, ok := f.cached(v); ok {
		return e.m, nil
	}
	ctx, cancel := context.WithTimeout(ctx, f.c.cfg.Timeout)
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
