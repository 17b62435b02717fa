package committer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// joinListen is how long a starting committer listens for the others
// before it takes its share of the partitions (a round trip and some
// scheduling). Answers that come later do not make it take every
// partition: it leaves the partitions someone consumes alone until it
// hears them announced (join.go).
const joinListen = 150 * time.Millisecond

// beaconEvery is how often a committer announces its pins.
const beaconEvery = 500 * time.Millisecond

// beacon is one announcement.
type beacon struct {
	ID   string            `json:"id"`
	Pins map[string]string `json:"pins,omitempty"` // consumer → pin id
	// Partitions are the partition consumers the committer consumes
	// (assign.go), pinned or not yet.
	Partitions []string `json:"partitions,omitempty"`
	// Released are the partitions it gave up within the last AckWait: it
	// may still hold unacked messages of theirs (a batch in hand). If it
	// dies, they are redelivered at once (resetReleased), not after
	// AckWait.
	Released []string `json:"released,omitempty"`
	// Host and PID say which process this is, for `cellguard status`.
	Host  string    `json:"host,omitempty"`
	PID   int       `json:"pid,omitempty"`
	Since time.Time `json:"since,omitzero"`
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
	c      *Committer
	id     string
	host   string
	since  time.Time
	silent atomic.Bool // tests: stop announcing, as a paused process would
	mu     sync.Mutex
	live   map[string]time.Time  // committer id → last announcement
	pins   map[[2]string]heldPin // (consumer, pin id) → holder
	// suspects are consumers whose announced holder went silent.
	suspects map[string]suspect
	// released is each committer's last announced Released list; reset
	// marks (committer, consumer) pairs already reset after its silence.
	released map[string][]string
	// parts is each committer's last announced Partitions list.
	parts map[string][]string
	reset map[[2]string]bool
}

func newBeacons(c *Committer) *beacons {
	host, _ := os.Hostname()
	return &beacons{c: c, id: nuid.Next(), host: host, since: time.Now(),
		live: map[string]time.Time{}, pins: map[[2]string]heldPin{}, suspects: map[string]suspect{},
		released: map[string][]string{}, parts: map[string][]string{}, reset: map[[2]string]bool{}}
}

// liveMembers returns the ids of the committers heard within
// TakeoverAfter, this one included.
func (b *beacons) liveMembers(now time.Time) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []string{b.id}
	for id, t := range b.live {
		if id != b.id && now.Sub(t) <= b.c.cfg.TakeoverAfter {
			out = append(out, id)
		}
	}
	return out
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
	// Taking over is requests to the server, which may be slow or go
	// unanswered for seconds (a consumer that is gone, a leader that
	// moves): they run on a goroutine of their own, so that this loop
	// never misses an announcement. A committer whose announcements stop
	// is taken for dead by the others, who take its partitions.
	kick := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		b.takeOver(ctx, kick)
	}()
	defer wg.Wait()
	b.announce() // at once: the others answer a new id right away (receive)
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
		select { // the taking over looks again once it is done with the last look
		case kick <- struct{}{}:
		default:
		}
	}
}

// takeOverParallel bounds the consumers a takeover checks or resets at
// once: a silent committer may have held dozens, each a request or two.
const takeOverParallel = 8

// takeOver checks, at each kick, the consumers a silent committer held or
// released, several at a time, until ctx ends.
func (b *beacons) takeOver(ctx context.Context, kick <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		}
		if h := b.c.cfg.takeOverHook; h != nil {
			h()
		}
		eachParallel(b.orphans(time.Now()), func(cons string) { b.check(ctx, cons) })
		eachParallel(b.releasedBySilent(time.Now()), func(cons string) { b.resetReleased(ctx, cons) })
	}
}

// eachParallel calls fn for every name, takeOverParallel at a time, and
// returns when all calls have.
func eachParallel(names []string, fn func(string)) {
	sem := make(chan struct{}, takeOverParallel)
	var wg sync.WaitGroup
	for _, name := range names {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			fn(name)
		}()
	}
	wg.Wait()
}

func (b *beacons) receive(m *nats.Msg) {
	var bc beacon
	if json.Unmarshal(m.Data, &bc) != nil || bc.ID == "" {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, known := b.live[bc.ID]; !known && bc.ID != b.id {
		select { // a committer joined: let it hear us now, not at the tick
		case b.c.pinKick <- struct{}{}:
		default:
		}
	}
	b.live[bc.ID] = now
	b.released[bc.ID] = bc.Released
	b.parts[bc.ID] = bc.Partitions
	for cons, pin := range bc.Pins {
		b.pins[[2]string{cons, pin}] = heldPin{owner: bc.ID, seen: now}
	}
}

func (b *beacons) announce() {
	c := b.c
	if b.silent.Load() {
		return // a test pauses this committer
	}
	bc := beacon{ID: b.id, Pins: map[string]string{}, Host: b.host, PID: os.Getpid(), Since: b.since}
	for name, pin := range c.ownedPartitions() {
		bc.Partitions = append(bc.Partitions, name)
		if pin != "" {
			bc.Pins[name] = pin
		}
	}
	slices.Sort(bc.Partitions)
	bc.Released = c.recentlyReleased(time.Now())
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
			delete(b.parts, id)
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

// releasedBySilent returns, if this committer is the one to act (the
// smallest live id), the partitions a now silent committer announced as
// released: it may have died holding unacked messages of theirs. Each is
// returned once per silent committer.
func (b *beacons) releasedBySilent(now time.Time) []string {
	after := b.c.cfg.TakeoverAfter
	b.mu.Lock()
	defer b.mu.Unlock()
	var live []string
	for id, t := range b.live {
		if now.Sub(t) <= after {
			live = append(live, id)
		}
	}
	if len(live) == 0 || slices.Min(live) != b.id {
		return nil
	}
	var out []string
	for id, rel := range b.released {
		t, ok := b.live[id]
		if !ok || now.Sub(t) <= after || id == b.id {
			continue
		}
		for _, cons := range rel {
			if k := [2]string{id, cons}; !b.reset[k] {
				b.reset[k] = true
				out = append(out, cons)
			}
		}
	}
	return out
}

// resetReleased redelivers a released partition's unacked messages to
// whoever holds its pin now.
func (b *beacons) resetReleased(ctx context.Context, consumer string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	switch err := b.c.resetIfExists(ctx, consumer); {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		// Retired meanwhile (a partition of an earlier count): nothing
		// of it is left to redeliver.
	case err != nil:
		b.c.log.Warn("fast takeover: reset a partition the silent committer released", "consumer", consumer, "err", err)
	default:
		b.c.log.Info("fast takeover: a committer went silent after releasing a partition; unacked messages redelivered", "consumer", consumer)
	}
}

// announced reports whether another live committer announces that it
// consumes the partition consumer name.
func (b *beacons) announced(name string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, parts := range b.parts {
		if id != b.id && now.Sub(b.live[id]) <= b.c.cfg.TakeoverAfter && slices.Contains(parts, name) {
			return true
		}
	}
	return false
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
	pin, since := pinOf(info)
	waiting := info.NumPending > 0 || info.NumAckPending > 0
	switch {
	case pin == "" || b.livePin(consumer, pin, now):
		// A waiting pull gets (or has) the pin; but what the silent
		// committer received and never acked waits for AckWait unless
		// the consumer is reset (the server drops a dead client's pin
		// without the "timeout" advisory that resets it otherwise).
		b.settle(consumer)
		if info.NumAckPending > 0 {
			b.resetReleased(ctx, consumer)
		}
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

// CommitterInfo is what a running committer announces about itself.
type CommitterInfo struct {
	ID         string
	Host       string
	PID        int
	Since      time.Time
	Partitions []string // partition consumers it consumes
	Pinned     int      // of which it holds the pin
}

// Committers listens to the committers' announcements on the deployment
// with prefix for listen (at least two announcement intervals is enough
// to hear every live one) and returns what each said, by id.
func Committers(ctx context.Context, nc *nats.Conn, prefix string, listen time.Duration) ([]CommitterInfo, error) {
	sc, err := subject.NewScheme(prefix)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	var mu sync.Mutex
	seen := map[string]CommitterInfo{}
	sub, err := nc.Subscribe(sc.Beacon(), func(m *nats.Msg) {
		var bc beacon
		if json.Unmarshal(m.Data, &bc) != nil || bc.ID == "" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		seen[bc.ID] = CommitterInfo{ID: bc.ID, Host: bc.Host, PID: bc.PID, Since: bc.Since, Partitions: bc.Partitions, Pinned: len(bc.Pins)}
	})
	if err != nil {
		return nil, fmt.Errorf("committer: listen to announcements: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		return nil, fmt.Errorf("committer: listen to announcements: %w", err)
	}
	t := time.NewTimer(listen)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
	}
	mu.Lock()
	defer mu.Unlock()
	out := make([]CommitterInfo, 0, len(seen))
	for _, ci := range seen {
		out = append(out, ci)
	}
	slices.SortFunc(out, func(a, b CommitterInfo) int { return strings.Compare(a.Host+a.ID, b.Host+b.ID) })
	return out, nil
}
