package declog

// A live scan follows the log past its end (an SDK client waiting for its
// decisions, an events subscriber) through an ordered consumer's Messages
// iterator, the only way to wait for new records without a request per
// wake-up. That iterator can stall (pull.go: its refill races with its
// own request goroutine) until two heartbeats are missed, 10 s; an SDK
// client saw its commits on one dataset answered only by its once-a-second
// fallback for that long. So a live scan that has had no record for
// liveQuiet asks the log for the last record on its filter: when the log
// holds one the scan has not had (still so a moment later), the consumer
// is stalled, and the scan goes on from a new one where it got to.

import (
	"context"
	"errors"
	"iter"
	"sync/atomic"
	"time"
)

// liveQuiet is how long a live scan goes without a record before it looks
// for a stall; liveRecheck is how long it then waits for a record in
// flight before it calls the consumer stalled.
const (
	liveQuiet   = time.Second
	liveRecheck = 200 * time.Millisecond
)

// scanLive is Scan with Live set. A record that breaks the chain
// (chain.go) ends the consumer's read: the records from there to the
// stream leader's last one are read at the leader, and the scan goes on
// with a new consumer after them. A record that still breaks the chain
// where the last re-read began is handed out as it is.
func (l *Log) scanLive(ctx context.Context, filter string, from uint64, opts ScanOptions) iter.Seq2[Record, error] {
	headersOnly := opts.HeadersOnly
	return func(yield func(Record, error) bool) {
		ch := newChain(opts.After, from)
		var rereadAt uint64 // where the last re-read at the leader began
		for {
			cons, err := l.ordered(ctx, filter, from, headersOnly)
			if err != nil {
				yield(Record{}, err)
				return
			}
			w := &stallWatch{l: l, filter: filter}
			w.next.Store(from)
			stop, suspect := false, false
			for d, err := range l.pullMessages(ctx, cons, 1000, headersOnly, false, w) {
				if err != nil && (!errors.Is(err, ErrMalformedRecord) || d.Seq == 0) {
					yield(Record{}, err)
					stop = true
					break
				}
				if d.Seq >= ch.next && ch.next != rereadAt && (err == nil && ch.breaks(d.Record) || err != nil) {
					suspect = true
					break
				}
				if err == nil {
					ch.add(d.Record)
				}
				if !yield(d.Record, err) {
					stop = true
					break
				}
				from = d.Seq + 1
			}
			l.dropConsumer(cons)
			if stop {
				return
			}
			if suspect {
				rereadAt = ch.next
				last, ok, err := l.leaderLastSeq(ctx, filter)
				if err != nil {
					yield(Record{}, err)
					return
				}
				if ok {
					l.reread(filter, ch.next)
					if _, stopped := l.leaderRange(ctx, filter, ch.next, last, headersOnly, ch.pass(yield)); stopped {
						return
					}
				}
				from = ch.next
				continue
			}
			if !w.stuck.Load() {
				return
			}
			l.liveRestarts.Add(1)
		}
	}
}

// stallWatch watches a live read (pullMessages) for a stall: after
// liveQuiet without a record it asks the log, and when the log holds a
// record the read has not had, it stops the read with stuck set.
type stallWatch struct {
	l      *Log
	filter string
	next   atomic.Uint64 // the first sequence the read has not had
	stuck  atomic.Bool   // the read was stopped as stalled
	over   atomic.Bool   // the read has ended: the watch stops
	dog    *time.Timer
}

// start arms the watch over a read that stop ends.
func (w *stallWatch) start(ctx context.Context, stop func()) {
	w.dog = time.AfterFunc(liveQuiet, func() {
		if w.over.Load() {
			return
		}
		if w.stalled(ctx) {
			w.stuck.Store(true)
			stop()
			return
		}
		if !w.over.Load() {
			w.dog.Reset(liveQuiet)
		}
	})
}

// had notes a record the read had, at stream sequence seq.
func (w *stallWatch) had(seq uint64) {
	w.dog.Reset(liveQuiet)
	w.next.Store(seq + 1)
}

// end stops the watch.
func (w *stallWatch) end() {
	w.over.Store(true)
	w.dog.Stop()
}

// stalled reports whether the log holds a record on the filter at or
// past next that has still not arrived liveRecheck later.
func (w *stallWatch) stalled(ctx context.Context) bool {
	want := w.next.Load()
	last, ok, err := w.l.lastSeq(ctx, w.filter)
	if err != nil || !ok || last < want {
		return false
	}
	t := time.NewTimer(liveRecheck)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	return w.next.Load() == want
}
