package committer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/retry"
	"cellguard/internal/subject"
)

// Partitions.
//
// CG_TXN's subject transform stores a transaction staged on
// <prefix>.txn.<dataset> under <prefix>.txp.<n>.<p>.<dataset>, where n is
// the partition count and p = subject.Partition(dataset, n), a hash the
// server computes. Each partition has one durable, pinned consumer
// (subject.PartitionConsumer). A partition delivers in stream order, so
// every dataset's messages arrive in order, interleaved with the other
// datasets of the partition; the partition loop hands each dataset its
// messages, and the dataset's worker decides them against its state.
//
// A committer consumes the partitions assigned to it (assign.go): all
// of them when it is alone, its share when several run. Consumers are
// per partition, never per dataset, so 10,000 datasets cost 64
// consumers, and a restart creates none.

// partition consumes one partition consumer and hands each dataset its
// messages. Its methods run on its own goroutine (run), apart from the
// consume callback, which only queues messages.
type partition struct {
	c     *Committer
	n, k  int // partition k of n
	name  string
	cons  jetstream.Consumer
	ccMu  sync.Mutex // guards cc and quit: a test may stop the pulls from outside
	cc    jetstream.ConsumeContext
	in    chan jetstream.Msg
	quit  chan struct{} // closed to release a blocked consume callback
	pinID string
	pin   atomic.Value // string: pinID, for the beacons
	// epoch changes whenever a message of the partition may have been
	// delivered elsewhere or lost (start, pin change, a gap in delivery
	// sequences): every dataset checks for undecided messages before its
	// next batch from a new epoch.
	epoch    uint64
	lastCseq uint64
	// consuming is set while the consumer is being pulled from.
	consuming atomic.Bool
	// failures counts the consumptions that failed (the consumer could
	// not be created or read, the server was away).
	failures atomic.Uint64

	// cancel and done are set by start; a partition never started has
	// neither, and stop has nothing to wait for.
	cancel context.CancelFunc
	done   chan struct{}
}

func newPartition(c *Committer, n, k int) *partition {
	return &partition{c: c, n: n, k: k, name: c.sc.PartitionConsumer(n, k)}
}

// partitionRestart paces the restarts of a partition whose consumer
// failed (the server was unreachable, the consumer deleted).
var partitionRestart = retry.Backoff{Initial: 200 * time.Millisecond, Max: 5 * time.Second, Jitter: true}

// start runs the partition on a goroutine of its own, counted in wg,
// until ctx ends or stop.
func (p *partition) start(ctx context.Context, wg *sync.WaitGroup) {
	pctx, cancel := context.WithCancel(ctx)
	p.cancel, p.done = cancel, make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.run(pctx)
	}()
}

// run consumes until ctx ends, restarting the consumption after a failure.
func (p *partition) run(ctx context.Context) {
	defer close(p.done)
	for attempt := 0; ; attempt++ {
		began := time.Now()
		err := p.serve(ctx)
		if ctx.Err() != nil || errors.Is(err, errCrash) {
			return
		}
		p.failures.Add(1)
		if time.Since(began) > partitionRestart.Max {
			attempt = 0
		}
		pause := partitionRestart.Delay(attempt)
		p.c.log.Warn("partition consumer failed; restarting", "partition", p.name, "attempt", attempt, "pause", pause, "err", err)
		if retry.Sleep(ctx, pause) != nil {
			return
		}
	}
}

// serve creates the consumer, consumes it and hands out batches until ctx
// ends (nil) or the consumption fails.
func (p *partition) serve(ctx context.Context) error {
	c := p.c
	if err := p.ensureConsumer(ctx); err != nil {
		return err
	}
	if c.cfg.TakeoverOnStart {
		p.takeover(ctx)
	}
	p.in = make(chan jetstream.Msg, 2*c.cfg.BatchSize)
	if err := p.consume(); err != nil {
		return err
	}
	defer p.stopConsume()
	var watch sync.WaitGroup
	defer watch.Wait()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watch.Add(1)
	go func() {
		defer watch.Done()
		p.watchStrayPin(wctx)
	}()
	p.consuming.Store(true)
	defer p.consuming.Store(false)
	p.epoch, p.lastCseq = c.epochs.Add(1), 0
	batch := make([]jetstream.Msg, 0, c.cfg.BatchSize)
	for {
		select {
		case <-ctx.Done():
			p.stopConsume()
			p.nakBuffered()
			return nil
		case m := <-p.in:
			batch = append(batch[:0], m)
		}
	drain:
		for len(batch) < c.cfg.BatchSize {
			select {
			case m := <-p.in:
				batch = append(batch, m)
			default:
				break drain
			}
		}
		if err := p.handle(ctx, batch); err != nil {
			return err
		}
	}
}

func (p *partition) ensureConsumer(ctx context.Context) error {
	c := p.c
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var cons jetstream.Consumer
	var err error
	if p.n == c.partitionCount() {
		cons, err = c.txn.CreateOrUpdateConsumer(cctx, partitionConsumerConfig(c.cfg, c.sc, p.n, p.k))
	} else {
		// A partition of an earlier count is drained, never re-created:
		// once its consumer is gone (retired), so is the partition.
		cons, err = c.txn.Consumer(cctx, p.name)
	}
	if err != nil {
		return fmt.Errorf("committer: consumer %s: %w", p.name, err)
	}
	p.cons = cons
	return nil
}

// partitionConsumerConfig is the configuration of partition k of n's
// consumer.
func partitionConsumerConfig(cfg Config, sc subject.Scheme, n, k int) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:        sc.PartitionConsumer(n, k),
		Description:    fmt.Sprintf("cellguard committer, partition %d of %d", k, n),
		FilterSubject:  sc.PartitionFilter(n, k),
		AckPolicy:      jetstream.AckExplicitPolicy,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		MaxAckPending:  cfg.MaxAckPending,
		AckWait:        cfg.AckWait,
		MaxDeliver:     -1,
		PriorityGroups: []string{subject.PriorityGroup},
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PinnedTTL:      cfg.PinnedTTL,
	}
}

// takeover moves the pin to this committer and redelivers what a dead
// predecessor held.
//
// Only what is needed is asked of the server, going by the consumer's
// state as ensureConsumer read it: an unpin when a client is pinned, a
// reset when messages are delivered and unacked. A committer starting
// takes all of its partitions over at once, and on a busy server those
// requests queue behind each other; the ones a partition does not need
// would only delay the others' first deliveries.
func (p *partition) takeover(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pinned, unacked := true, true // without the state, do both
	if ci := p.cons.CachedInfo(); ci != nil {
		pinned, unacked = false, ci.NumAckPending > 0
		for _, g := range ci.PriorityGroups {
			pinned = pinned || g.PinnedClientID != ""
		}
	}
	if pinned {
		_ = p.c.txn.UnpinConsumer(ctx, p.name, subject.PriorityGroup) // unpinned meanwhile is fine
	}
	if unacked {
		if _, err := p.c.txn.ResetConsumer(ctx, p.name); err != nil {
			p.c.log.Warn("takeover: reset consumer", "partition", p.name, "err", err)
		}
	}
}

// A stray pin.
//
// A committer that gives a partition up stops pulling and unpins the
// consumer, so that the new owner's waiting pull gets the pin. But a pull
// request it sent before it stopped may still wait at the server (until
// its expiry), and the server may pin that one: the messages then go to a
// subscription that is gone, and the partition waits out PinnedTTL (12 s
// by default) before the server unpins it (TestJoinLoadsCheckpointsPromptly
// joins a committer to a 3-node cluster, where this can happen). So stop
// unpins only a pin that is its own or that no live committer announces.
// As a second guard, for PinnedTTL after it starts,
// a partition looks every strayPinEvery at its consumer: a pin that is not
// its own and that no live committer announces, seen on two looks in a row
// while messages wait, is stray. It is unpinned (and the consumer reset,
// for what went to it), so the waiting pull of this committer gets the pin.

// strayPinEvery is how often a starting partition looks for a stray pin.
const strayPinEvery = time.Second

// watchStrayPin looks for a stray pin (above) until PinnedTTL after the
// partition started, or ctx's end.
func (p *partition) watchStrayPin(ctx context.Context) {
	b := p.c.beacons
	if b == nil {
		return // alone, or the takeover is off: no one else to hold a pin
	}
	until := time.Now().Add(p.c.cfg.PinnedTTL)
	tick := time.NewTicker(strayPinEvery)
	defer tick.Stop()
	seen := ""
	for time.Now().Before(until) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		seen = p.freeStrayPin(ctx, b, seen)
	}
}

// freeStrayPin takes one look at the consumer's pin; seen is the stray
// pin the last look found ("" for none). It returns the pin this look
// found stray but did not free yet.
func (p *partition) freeStrayPin(ctx context.Context, b *beacons, seen string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := p.cons.Info(ctx)
	if err != nil {
		return ""
	}
	pin, _ := pinOf(info)
	mine, _ := p.pin.Load().(string)
	waiting := info.NumPending > 0 || info.NumAckPending > 0
	if pin == "" || pin == mine || !waiting || b.livePin(p.name, pin, time.Now()) {
		return ""
	}
	if pin != seen {
		return pin // look again: its holder may be about to announce it
	}
	if err := p.c.txn.UnpinConsumer(ctx, p.name, subject.PriorityGroup); err != nil {
		p.c.log.Warn("stray pin: unpin", "partition", p.name, "err", err)
		return ""
	}
	if info.NumAckPending > 0 {
		if _, err := p.c.txn.ResetConsumer(ctx, p.name); err != nil {
			p.c.log.Warn("stray pin: reset", "partition", p.name, "err", err)
		}
	}
	p.c.log.Info("a pin no live committer holds; unpinned", "partition", p.name, "pin", pin)
	return ""
}

func (p *partition) consume() error {
	in, quit := p.in, make(chan struct{})
	// The callback never blocks a stop: stopConsume closes quit before it
	// waits for the consume context to close.
	cc, err := p.cons.Consume(func(m jetstream.Msg) {
		select {
		case in <- m:
		case <-quit:
		}
	},
		jetstream.PullPriorityGroup(subject.PriorityGroup),
		jetstream.PullExpiry(p.c.cfg.PullExpiry),
		jetstream.PullMaxMessages(p.c.cfg.BatchSize),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				p.c.log.Debug("consume", "partition", p.name, "err", err)
			}
		}))
	if err != nil {
		return fmt.Errorf("committer: consume %s: %w", p.name, err)
	}
	p.ccMu.Lock()
	p.cc, p.quit = cc, quit
	p.ccMu.Unlock()
	return nil
}

// stopConsume stops pulling; the batch in hand is not affected.
func (p *partition) stopConsume() {
	p.ccMu.Lock()
	defer p.ccMu.Unlock()
	if p.cc != nil {
		close(p.quit)
		p.cc.Stop()
		<-p.cc.Closed()
		p.cc = nil
	}
}

// nakBuffered hands back the messages received but not handled.
func (p *partition) nakBuffered() {
	for {
		select {
		case m := <-p.in:
			_ = m.Nak()
		default:
			return
		}
	}
}

// handle reads a batch's metadata, notes delivery anomalies, and hands
// each dataset its messages in stream order.
func (p *partition) handle(ctx context.Context, batch []jetstream.Msg) error {
	c := p.c
	items := make([]item, 0, len(batch))
	var pending uint64
	for _, m := range batch {
		md, err := m.Metadata()
		if err != nil {
			_ = m.Nak()
			c.log.Warn("staged message without metadata", "partition", p.name, "err", err)
			continue
		}
		if pin := m.Headers().Get("Nats-Pin-Id"); pin != "" && pin != p.pinID {
			if p.pinID != "" {
				p.epoch = c.epochs.Add(1)
			}
			p.pinID = pin
			p.pin.Store(pin)
			select {
			case c.pinKick <- struct{}{}:
			default:
			}
		}
		if p.lastCseq != 0 && md.Sequence.Consumer != p.lastCseq+1 {
			p.epoch = c.epochs.Add(1) // a delivery went elsewhere or was lost
		}
		p.lastCseq = md.Sequence.Consumer
		pending = md.NumPending
		_, _, ds, _ := c.sc.ParsePartitioned(m.Subject())
		items = append(items, item{
			staged:      staged{Seq: md.Sequence.Stream, Data: m.Data(), MsgID: m.Headers().Get(subject.HdrMsgID), Header: m.Headers()},
			ds:          ds,
			stamp:       md.Timestamp,
			msg:         c.holds.hold(m, time.Now()),
			redelivered: md.NumDelivered > 1,
			epoch:       p.epoch,
		})
	}
	c.metrics.partitionPending.WithLabelValues(p.name).Set(float64(pending))
	for _, group := range byDataset(items) {
		ds := group[0].ds
		if ds == "" {
			for _, it := range group {
				_ = it.msg.Nak() // not a partitioned subject: cannot happen with the consumer's filter
			}
			continue
		}
		c.worker(ds).enqueue(group)
	}
	return nil
}

// byDataset splits items into one group per dataset, each sorted by
// stream sequence, in the order the datasets first appear. The groups
// may share items' array (a batch of one dataset, the usual case, is
// items itself); each group is sized once.
func byDataset(items []item) [][]item {
	if oneDataset(items) {
		sortItems(items)
		return [][]item{items}
	}
	index := map[string]int{}
	var sizes []int
	for _, it := range items {
		i, ok := index[it.ds]
		if !ok {
			i = len(sizes)
			index[it.ds] = i
			sizes = append(sizes, 0)
		}
		sizes[i]++
	}
	groups := make([][]item, len(sizes))
	for i, n := range sizes {
		groups[i] = make([]item, 0, n)
	}
	for _, it := range items {
		i := index[it.ds]
		groups[i] = append(groups[i], it)
	}
	for _, g := range groups {
		sortItems(g)
	}
	return groups
}

// oneDataset reports whether items are all of one dataset (and there
// is at least one).
func oneDataset(items []item) bool {
	if len(items) == 0 {
		return false
	}
	for _, it := range items[1:] {
		if it.ds != items[0].ds {
			return false
		}
	}
	return true
}

// stop ends the partition's consumption, waits for the batch in hand to
// finish, and unpins the consumer so that the committer it now belongs to
// gets the pin at once. It may be called in any state: never started,
// still creating its consumer, after the creation failed, with the
// server away.
func (p *partition) stop(unpin bool) {
	if p.cancel == nil {
		return // never started
	}
	p.cancel()
	<-p.done // run closes it on every return
	// run has returned: p.cons is read after its last write.
	if !unpin || p.cons == nil {
		// Without a consumer handle this committer never pulled from
		// the consumer, so it holds no pin of it and left no pull.
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// Only this committer's pin: the committer the partition now belongs
	// to may have it already (its start took it over), and unpinning it
	// would let a pull this one left at the server take it (a stray pin).
	if info, err := p.cons.Info(ctx); err == nil {
		pin, _ := pinOf(info)
		mine, _ := p.pin.Load().(string)
		if pin == "" || pin != mine && p.c.beacons != nil && p.c.beacons.livePin(p.name, pin, time.Now()) {
			return
		}
	}
	if err := p.c.txn.UnpinConsumer(ctx, p.name, subject.PriorityGroup); err != nil {
		p.c.log.Debug("release partition: unpin", "partition", p.name, "err", err)
	}
}

// pinOf returns the id of the client pinned on the committers' priority
// group ("" for none) and since when.
func pinOf(info *jetstream.ConsumerInfo) (id string, since time.Time) {
	for _, g := range info.PriorityGroups {
		if g.Group == subject.PriorityGroup {
			return g.PinnedClientID, g.PinnedTS
		}
	}
	return "", time.Time{}
}
