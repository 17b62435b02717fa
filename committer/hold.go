package committer

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Held messages.
//
// A delivered staged message waits in its dataset's queue until a decider
// takes it, and deciding is slower than arrival when a backlog builds (a
// burst of creations): a message may wait minutes. The server would
// redeliver it every AckWait meanwhile, re-sending its body to a
// committer that already holds it and scanning a large pending set to do
// so. So every delivered message the committer holds undecided is in the
// hold set, and a keeper (holds.keep) tells the server it is in progress
// before its AckWait runs out: each message touched more than AckWait/3
// ago gets an InProgress, oldest first, every AckWait/4. The set is a
// list ordered by last touch, so a look costs what is due, not what is
// held.
//
// A message leaves the set when it is settled (acked, handed back,
// terminated: the wrapper's methods), when a redelivery of it replaces it
// in its dataset's queue (worker.enqueue), and when it has been held for
// Config.HoldLimit (default 8×AckWait). The limit is what keeps a stuck
// decider from pinning a message forever: past it the message is no
// longer extended and the server redelivers it, as it would without the
// keeper. A decider's own steps are bounded well below it (an append
// attempt 1.5 s, a log request 2 s, a catch-up scan 1 min), so only a
// decider that is stuck, or a backlog deeper than HoldLimit's worth of
// deciding, reaches it; the backlog then costs one redelivery per
// HoldLimit instead of one per AckWait.

// holds is the committer's set of held messages.
type holds struct {
	mu         sync.Mutex
	head, tail *heldMsg // least recently touched first
	n          int
	onChange   func(n int) // the held count after a change (the gauge), under mu
}

// heldMsg is a delivered message in the hold set. Its settling methods
// take it out of the set before they settle it.
type heldMsg struct {
	jetstream.Msg
	hs         *holds
	prev, next *heldMsg
	listed     bool
	since      time.Time // when it was delivered
	touched    time.Time // its delivery or its last InProgress
}

// hold adds m, delivered at now, to the set. Calls pass nondecreasing
// times.
func (hs *holds) hold(m jetstream.Msg, now time.Time) *heldMsg {
	h := &heldMsg{Msg: m, hs: hs, since: now, touched: now}
	hs.mu.Lock()
	if hs.tail != nil && hs.tail.touched.After(now) {
		h.touched = hs.tail.touched // the list stays ordered
	}
	hs.pushBack(h)
	hs.changed()
	hs.mu.Unlock()
	return h
}

// release takes h out of the set; a message no longer listed is left
// alone.
func (hs *holds) release(h *heldMsg) {
	hs.mu.Lock()
	if h.listed {
		hs.unlink(h)
		hs.changed()
	}
	hs.mu.Unlock()
}

// due returns the messages touched at or before now-stale, oldest first,
// and marks them touched at now; a message held since before now-limit
// leaves the set instead (it is no longer extended). It looks at the
// messages due and at the first one that is not.
func (hs *holds) due(now time.Time, stale, limit time.Duration) []*heldMsg {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	var out []*heldMsg
	before, cut := hs.n, now.Add(-stale)
	first := hs.tail // the last one touched before this look: the loop ends after it
	for h := hs.head; h != nil && !h.touched.After(cut); {
		next, last := h.next, h == first
		hs.unlink(h)
		if limit <= 0 || now.Sub(h.since) < limit {
			h.touched = now
			hs.pushBack(h)
			out = append(out, h)
		}
		if last {
			break
		}
		h = next
	}
	if hs.n != before {
		hs.changed()
	}
	return out
}

// held is how many messages the set holds.
func (hs *holds) held() int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.n
}

func (hs *holds) pushBack(h *heldMsg) {
	h.prev, h.next, h.listed = hs.tail, nil, true
	if hs.tail != nil {
		hs.tail.next = h
	} else {
		hs.head = h
	}
	hs.tail = h
	hs.n++
}

func (hs *holds) unlink(h *heldMsg) {
	if h.prev != nil {
		h.prev.next = h.next
	} else {
		hs.head = h.next
	}
	if h.next != nil {
		h.next.prev = h.prev
	} else {
		hs.tail = h.prev
	}
	h.prev, h.next, h.listed = nil, nil, false
	hs.n--
}

func (hs *holds) changed() {
	if hs.onChange != nil {
		hs.onChange(hs.n)
	}
}

func (h *heldMsg) Ack() error {
	h.hs.release(h)
	return h.Msg.Ack()
}

func (h *heldMsg) DoubleAck(ctx context.Context) error {
	h.hs.release(h)
	return h.Msg.DoubleAck(ctx)
}

func (h *heldMsg) Nak() error {
	h.hs.release(h)
	return h.Msg.Nak()
}

func (h *heldMsg) NakWithDelay(delay time.Duration) error {
	h.hs.release(h)
	return h.Msg.NakWithDelay(delay)
}

func (h *heldMsg) Term() error {
	h.hs.release(h)
	return h.Msg.Term()
}

func (h *heldMsg) TermWithReason(reason string) error {
	h.hs.release(h)
	return h.Msg.TermWithReason(reason)
}

// unhold takes a delivered message out of the hold set without settling
// it: a later delivery of it took its place.
func unhold(m jetstream.Msg) {
	if h, ok := m.(*heldMsg); ok {
		h.hs.release(h)
	}
}

// keep extends the held messages until ctx ends: every AckWait/4, an
// InProgress for each message touched more than AckWait/3 ago, until it
// has been held HoldLimit. It stops extending for good after an injected
// crash: a dead process tells the server nothing.
func (c *Committer) keep(ctx context.Context) {
	every, stale, limit := c.cfg.AckWait/4, c.cfg.AckWait/3, c.cfg.HoldLimit
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if c.deciders.crashed.Load() {
				return
			}
			for _, h := range c.holds.due(time.Now(), stale, limit) {
				if h.Msg.InProgress() == nil {
					c.metrics.inProgress.Inc()
				}
			}
		}
	}
}

// startKeeper runs keep on a goroutine of its own until the returned
// function is called, which waits for it. Run stops it after the
// deciders: the batches they finish on a stop stay extended.
func (c *Committer) startKeeper() (stop func()) {
	if c.cfg.HoldLimit < 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.keep(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}
