package committer

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"cellguard/internal/subject"
)

// Fast takeover from a dead committer.
//
// A consumer's pin moves to a standby only after PinnedTTL of silence
// from the pinned committer (12 s by default; shorter makes an idle pin
// flap). When a committer dies with its node, its datasets would stall
// that long. So every committer announces, every beaconEvery on core
// NATS, the pins it holds (consumer → pin id, learnt from the Nats-Pin-Id
// of its deliveries). When a committer's announcements stop for
// TakeoverAfter, the live committer with the smallest id checks each
// consumer it held a pin on: if the consumer is still pinned to it, or to
// a pin no live committer announces while messages wait (a consumer
// leader change re-pins), it unpins and resets the consumer, so a
// standby's waiting pull gets the pin and the unacked messages at once.
//
// A live but slow committer taken for dead only loses its pins: the
// fenced decision log keeps two committers from both deciding, exactly
// as after any pin change.

// beaconEvery is how often a committer announces its pins.
const beaconEvery = 500 * time.Millisecond

// beacon is one announcement.
type beacon struct {
	ID   string            `json:"id"`
	Pins map[string]string `json:"pins,omitempty"` // consumer → pin id
}

type heldPin struct {
	owner string
	seen  time.Time
}

// suspect is a consumer whose pin holder went silent.
type suspect struct {
	pin   string // the pin the silent committer announced
	since time.Time
}

// beacons tracks the announcements of every committer.
type beacons struct {
	c    *Committer
	id   string
	mu   sync.Mutex
	live map[string]time.Time  // committer id → last announcement
	pins map[[2]string]heldPin // (consumer, pin id) → holder
	// suspects are consumers whose announced holder went silent.
	suspects map[string]suspect
}

func newBeacons(c *Committer) *beacons {
	return &beacons{c: c, id: nuid.Next(), live: map[string]time.Time{}, pins: map[[2]string]heldPin{}, suspects: map[string]suspect{}}
}

// run announces and watches until ctx ends. It runs on a goroutine of
// Run's; the subscription is gone when it returns.
func (b *beacons) run(ctx context.Context) {
	c := b.c
	sub, err := c.nc.Subscribe(c.sc.Beacon(), b.receive)
	if err != nil {
		c.log.Warn("fast takeover off: subscribe to beacons", "err", err)
		return
	}
	defer func() { _ = sub.Unsubscribe() }()
	tick := time.NewTicker(beaconEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.pinKick:
			b.announce() // a new pin: tell the others now, not at the tick
			continue
		case <-tick.C:
		}
		b.announce()
		for _, cons := range b.orphans(time.Now()) {
			b.check(ctx, cons)
		}
	}
}

func (b *beacons) receive(m *nats.Msg) {
	var bc beacon
	if json.Unmarshal(m.Data, &bc) != nil || bc.ID == "" {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.live[bc.ID] = now
	for cons, pin := range bc.Pins {
		b.pins[[2]string{cons, pin}] = heldPin{owner: bc.ID, seen: now}
	}
}

func (b *beacons) announce() {
	c := b.c
	bc := beacon{ID: b.id, Pins: map[string]string{}}
	c.mu.Lock()
	for ds, w := range c.workers {
		if pin, _ := w.pin.Load().(string); pin != "" {
			bc.Pins[c.sc.Consumer(ds)] = pin
		}
	}
	c.mu.Unlock()
	data, err := json.Marshal(bc)
	if err == nil {
		_ = c.nc.Publish(c.sc.Beacon(), data)
	}
	b.mu.Lock()
	b.live[b.id] = time.Now() // we are live even if our own echo is late
	b.mu.Unlock()
}

// orphans returns the consumers to check for a dead holder, if this
// committer is the one to act (the smallest live id): those on which a
// now silent committer announced a pin, until they are settled or
// PinnedTTL has passed (then the server's own unpin has acted). It
// forgets committers silent for long.
func (b *beacons) orphans(now time.Time) []string {
	after := b.c.cfg.TakeoverAfter
	b.mu.Lock()
	defer b.mu.Unlock()
	var live []string
	for id, t := range b.live {
		switch {
		case now.Sub(t) <= after:
			live = append(live, id)
		case now.Sub(t) > time.Minute:
			delete(b.live, id)
		}
	}
	for k, h := range b.pins {
		if now.Sub(h.seen) > after && now.Sub(b.live[h.owner]) > after {
			delete(b.pins, k)
			if _, ok := b.suspects[k[0]]; !ok {
				b.suspects[k[0]] = suspect{pin: k[1], since: now}
			}
		}
	}
	if len(live) == 0 || slices.Min(live) != b.id {
		return nil
	}
	var out []string
	for cons, s := range b.suspects {
		if now.Sub(s.since) > b.c.cfg.PinnedTTL {
			delete(b.suspects, cons)
			continue
		}
		out = append(out, cons)
	}
	return out
}

// livePin reports whether a live committer announces pin on consumer.
func (b *beacons) livePin(consumer, pin string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.pins[[2]string{consumer, pin}]
	return ok && now.Sub(h.seen) <= b.c.cfg.TakeoverAfter
}

func (b *beacons) settle(consumer string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.suspects, consumer)
}

// check unpins and resets consumer when its pin belongs to no live
// committer: it is the silent committer's pin, or a pin no live
// committer announces although it has been held for TakeoverAfter while
// messages wait (a holder that is alive receives them, learns its pin id
// and announces it). An idle consumer's unknown pin is left alone: its
// live holder may simply have had nothing to receive.
func (b *beacons) check(ctx context.Context, consumer string) {
	c := b.c
	b.mu.Lock()
	dead := b.suspects[consumer].pin
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cons, err := c.txn.Consumer(ctx, consumer)
	if err != nil {
		return // try again at the next tick
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return
	}
	now := time.Now()
	var pin string
	var since time.Time
	for _, g := range info.PriorityGroups {
		if g.Group == subject.PriorityGroup {
			pin, since = g.PinnedClientID, g.PinnedTS
		}
	}
	waiting := info.NumPending > 0 || info.NumAckPending > 0
	switch {
	case pin == "" || b.livePin(consumer, pin, now):
		b.settle(consumer) // a waiting pull gets (or has) the pin
		return
	case pin != dead && !(waiting && now.Sub(since) > c.cfg.TakeoverAfter):
		return // undecided yet
	}
	b.settle(consumer)
	if err := c.txn.UnpinConsumer(ctx, consumer, subject.PriorityGroup); err != nil {
		c.log.Warn("fast takeover: unpin", "consumer", consumer, "err", err)
		return
	}
	if _, err := c.txn.ResetConsumer(ctx, consumer); err != nil {
		c.log.Warn("fast takeover: reset", "consumer", consumer, "err", err)
	}
	c.log.Info("fast takeover: the pinned committer went silent; consumer unpinned", "consumer", consumer, "pin", pin)
}
