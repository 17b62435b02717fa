package committer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/subject"
)

// Sharing partitions between committers.
//
// Every committer announces itself on the beacon subject (beacon.go);
// the live committers are those heard within TakeoverAfter. Each one
// computes the same assignment of partitions to live committers
// (assignPartitions: rendezvous hashing with a load bound, so every
// committer gets ⌊P/n⌋ or ⌈P/n⌉ partitions and a committer joining
// takes about its share from the others; join.go says how it joins) and
// consumes its own. A committer that leaves its partitions unpins them,
// so the new owner's waiting pull takes the pin at once; the partitions of a committer that died are unpinned by the
// survivors' fast takeover (beacon.go) after TakeoverAfter. While views
// differ (for a beacon interval or so), two committers may pull the same
// partition: the pin gives it to one, and the fenced decision log keeps
// even two deciders safe. With fast takeover off, every committer pulls
// every partition and the pins decide.

// partitionCount returns the current partition count (the stream's
// subject transform).
func (c *Committer) partitionCount() int {
	c.partMu.Lock()
	defer c.partMu.Unlock()
	if len(c.gens) == 0 {
		return c.cfg.Partitions
	}
	return c.gens[0]
}

// multiSource reports whether a dataset's messages may be stored under
// more than one subject: while a change of the partition count is
// drained, or messages staged before partitioning remain. Every batch
// then checks for undecided messages before it.
func (c *Committer) multiSource() bool {
	c.partMu.Lock()
	n := len(c.gens)
	c.partMu.Unlock()
	return n > 1 || c.legacy.Load()
}

// stagedFilters returns the subjects under which ds's staged messages
// may be stored now: its partition under each live partition count, and
// the unpartitioned subject while messages staged before partitioning
// remain.
func (c *Committer) stagedFilters(ds string) []string {
	c.partMu.Lock()
	out := make([]string, 0, len(c.gens)+1)
	for _, n := range c.gens {
		out = append(out, c.sc.TxnPartitioned(n, subject.Partition(ds, n), ds))
	}
	c.partMu.Unlock()
	if c.legacy.Load() {
		out = append(out, c.sc.Txn(ds))
	}
	return out
}

// getStaged returns the first staged message at or after seq on filter.
func (c *Committer) getStaged(ctx context.Context, seq uint64, filter string) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := context.WithTimeout(ctx, logRequestTimeout)
	defer cancel()
	return c.txn.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
}

// settle removes a decided message from CG_TXN: an ack for a delivered
// one; a delete for one read directly, which no consumer of ours holds.
func (c *Committer) settle(ctx context.Context, it item) {
	if it.msg != nil {
		_ = it.msg.Ack()
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), logRequestTimeout)
	defer cancel()
	if err := c.txn.DeleteMsg(ctx, it.Seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		// Left behind, it is found decided and removed next time.
		c.log.Debug("remove a decided message", "seq", it.Seq, "err", err)
	}
}

// partitionConfig reads the partition count from CG_TXN's subject
// transform; 0 when the stream is not partitioned.
func partitionCountOf(sc subject.Scheme, cfg jetstream.StreamConfig) int {
	t := cfg.SubjectTransform
	if t == nil || t.Source != sc.TxnAll() {
		return 0
	}
	for n := range strings.SplitSeq(t.Destination, ".") {
		if v, ok := strings.CutPrefix(n, "{{partition("); ok {
			v, _, _ = strings.Cut(v, ",")
			if p, err := strconv.Atoi(v); err == nil && p > 0 {
				if src, dest := sc.TxnPartitionMapping(p); src == t.Source && dest == t.Destination {
					return p
				}
			}
		}
	}
	return 0
}

// ensurePartitioned makes CG_TXN partitioned (a stream of the
// one-consumer-per-dataset layout is not: its transform is added, with Config.Partitions)
// and learns the partition counts that have consumers. Consumers of the
// one-consumer-per-dataset layout are deleted: their messages, staged
// before the transform, are drained by their datasets (discover).
func (c *Committer) ensurePartitioned(ctx context.Context) error {
	info, err := c.txn.Info(ctx)
	if err != nil {
		return fmt.Errorf("committer: stream %s: %w", c.sc.TxnStream(), err)
	}
	n := partitionCountOf(c.sc, info.Config)
	if n == 0 {
		if info.Config.SubjectTransform != nil {
			return fmt.Errorf("%w: %s: subject transform %s → %s is not cellguard's partitioning", ErrStreamMismatch,
				c.sc.TxnStream(), info.Config.SubjectTransform.Source, info.Config.SubjectTransform.Destination)
		}
		if err := c.setPartitionCount(ctx, info.Config, c.cfg.Partitions); err != nil {
			return err
		}
		c.log.Info("staging stream partitioned", "partitions", c.cfg.Partitions)
		n = c.cfg.Partitions
	} else if n != c.cfg.Partitions && c.cfg.Partitions != DefaultPartitions {
		c.log.Warn("the staging stream has another partition count than configured; the stream's is used (change it with `cellguard partitions set`)",
			"stream", n, "configured", c.cfg.Partitions)
	}
	return c.loadGenerations(ctx, n)
}

// setPartitionCount sets CG_TXN's subject transform to n partitions.
func (c *Committer) setPartitionCount(ctx context.Context, cfg jetstream.StreamConfig, n int) error {
	return SetPartitionCount(ctx, c.js, c.sc.Prefix(), n)
}

// SetPartitionCount changes the partition count of the staging stream of
// the deployment with prefix (the documented procedure: committers
// follow within a discovery interval, create the new partitions'
// consumers, drain the old ones while keeping each dataset's order
// across both, and delete them once drained).
func SetPartitionCount(ctx context.Context, js jetstream.JetStream, prefix string, n int) error {
	if n < 1 || n > MaxPartitions {
		return fmt.Errorf("%w: partition count %d not in 1..%d", ErrInvalidConfig, n, MaxPartitions)
	}
	sc, err := subject.NewScheme(prefix)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	s, err := js.Stream(ctx, sc.TxnStream())
	if err != nil {
		return fmt.Errorf("committer: stream %s: %w", sc.TxnStream(), err)
	}
	cfg := s.CachedInfo().Config
	src, dest := sc.TxnPartitionMapping(n)
	cfg.SubjectTransform = &jetstream.SubjectTransformConfig{Source: src, Destination: dest}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("committer: partition %s into %d: %w", sc.TxnStream(), n, err)
	}
	return nil
}

// PartitionCount returns the partition count of the staging stream of
// the deployment with prefix (0: not partitioned yet).
func PartitionCount(ctx context.Context, js jetstream.JetStream, prefix string) (int, error) {
	sc, err := subject.NewScheme(prefix)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	s, err := js.Stream(ctx, sc.TxnStream())
	if err != nil {
		return 0, fmt.Errorf("committer: stream %s: %w", sc.TxnStream(), err)
	}
	return partitionCountOf(sc, s.CachedInfo().Config), nil
}

// loadGenerations records n as the current partition count and every
// other count that still has partition consumers; it deletes the
// consumers of the one-consumer-per-dataset layout.
func (c *Committer) loadGenerations(ctx context.Context, n int) error {
	lister := c.txn.ListConsumers(ctx)
	gens := []int{n}
	var legacy []string
	for ci := range lister.Info() {
		if g, _, ok := subject.ParsePartitionConsumer(ci.Name); ok {
			if !slices.Contains(gens, g) {
				gens = append(gens, g)
			}
			continue
		}
		if strings.HasPrefix(ci.Name, "commit-") {
			if _, err := c.sc.ParseStaged(ci.Config.FilterSubject); !errors.Is(err, subject.ErrNotOurs) {
				legacy = append(legacy, ci.Name)
			}
		}
	}
	if err := lister.Err(); err != nil {
		return fmt.Errorf("committer: list consumers: %w", err)
	}
	for _, name := range legacy {
		if err := c.txn.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("committer: delete dataset consumer %s of the unpartitioned layout: %w", name, err)
		}
		c.log.Info("deleted a per-dataset consumer of the unpartitioned layout", "consumer", name)
	}
	slices.Sort(gens[1:])
	c.partMu.Lock()
	c.gens = gens
	c.partMu.Unlock()
	return nil
}

// followPartitionCount notices a change of the stream's partition count
// and retires the partition consumers of earlier counts once drained.
func (c *Committer) followPartitionCount(ctx context.Context) error {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := c.txn.Info(ictx)
	if err != nil {
		return err
	}
	n := partitionCountOf(c.sc, info.Config)
	c.partMu.Lock()
	gens := slices.Clone(c.gens)
	c.partMu.Unlock()
	if n == 0 || len(gens) == 0 {
		return nil
	}
	if n != gens[0] {
		c.log.Info("partition count changed; draining the old partitions", "from", gens[0], "to", n)
		old := slices.DeleteFunc(gens, func(g int) bool { return g == n })
		gens = append([]int{n}, old...)
	}
	for _, g := range gens[1:] {
		if drained, err := c.retire(ictx, g); err != nil {
			return err
		} else if drained {
			gens = slices.DeleteFunc(gens, func(x int) bool { return x == g })
			c.log.Info("old partitions drained and deleted", "partitions", g)
		}
	}
	c.partMu.Lock()
	c.gens = gens
	c.partMu.Unlock()
	return nil
}

// retire deletes the consumers of partition count g that hold nothing
// (no message pending or unacked) and reports whether none is left. The
// transform no longer stores anything under g, so an empty consumer
// stays empty.
func (c *Committer) retire(ctx context.Context, g int) (bool, error) {
	left := 0
	for k := range g {
		name := c.sc.PartitionConsumer(g, k)
		cons, err := c.txn.Consumer(ctx, name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		ci := cons.CachedInfo()
		if ci.NumPending > 0 || ci.NumAckPending > 0 {
			left++
			continue
		}
		if err := c.txn.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return false, err
		}
	}
	return left == 0, nil
}

// reconcile starts the partitions assigned to this committer and stops
// the others. Only Run's goroutine calls it.
func (c *Committer) reconcile(ctx context.Context) {
	want := map[string][2]int{}
	for _, pk := range c.assigned() {
		want[c.sc.PartitionConsumer(pk[0], pk[1])] = pk
	}
	var release []*partition
	started := 0
	c.partMu.Lock()
	for name, p := range c.parts {
		if _, ok := want[name]; !ok {
			release = append(release, p)
			delete(c.parts, name)
		}
	}
	for name, pk := range want {
		if _, ok := c.parts[name]; ok {
			continue
		}
		p := newPartition(c, pk[0], pk[1])
		p.start(ctx, &c.wg)
		c.parts[name] = p
		started++
	}
	n := len(c.parts)
	c.partMu.Unlock()
	if started > 0 || len(release) > 0 {
		c.log.Info("partitions reassigned", "started", started, "released", len(release), "consuming", n)
	}
	for _, p := range release {
		p.stop(true)
		c.partMu.Lock()
		if c.released == nil {
			c.released = map[string]time.Time{}
		}
		c.released[p.name] = time.Now()
		c.partMu.Unlock()
		c.log.Info("partition released to another committer", "partition", p.name)
	}
	c.metrics.partitions.Set(float64(n))
}

// recentlyReleased returns the partitions this committer gave up within
// the last AckWait (it may hold unacked messages of theirs), forgetting
// older ones.
func (c *Committer) recentlyReleased(now time.Time) []string {
	c.partMu.Lock()
	defer c.partMu.Unlock()
	var out []string
	for name, t := range c.released {
		if now.Sub(t) > c.cfg.AckWait {
			delete(c.released, name)
			continue
		}
		if _, consuming := c.parts[name]; !consuming {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// stopPartitions stops every partition (Run is ending).
func (c *Committer) stopPartitions() {
	c.partMu.Lock()
	parts := c.parts
	c.parts = map[string]*partition{}
	c.partMu.Unlock()
	for _, p := range parts {
		if p.cancel != nil {
			p.cancel() // all at once; stop waits for each
		}
	}
	for _, p := range parts {
		p.stop(false)
	}
}

// startingPartitions counts the partitions assigned to this committer
// that are not consuming (their consumer is being created, or failed).
func (c *Committer) startingPartitions() int {
	c.partMu.Lock()
	defer c.partMu.Unlock()
	n := 0
	for _, p := range c.parts {
		if !p.consuming.Load() {
			n++
		}
	}
	return n
}

// ownedPartitions returns the partitions this committer consumes, with
// the pin id each last delivered under ("" before a delivery).
func (c *Committer) ownedPartitions() map[string]string {
	c.partMu.Lock()
	defer c.partMu.Unlock()
	out := make(map[string]string, len(c.parts))
	for name, p := range c.parts {
		pin, _ := p.pin.Load().(string)
		out[name] = pin
	}
	return out
}

// assigned returns the partitions (count, index) this committer consumes.
func (c *Committer) assigned() [][2]int {
	c.partMu.Lock()
	gens := slices.Clone(c.gens)
	c.partMu.Unlock()
	var all [][2]int
	for _, g := range gens {
		for k := range g {
			all = append(all, [2]int{g, k})
		}
	}
	if c.beacons == nil {
		return all
	}
	now := time.Now()
	members := c.beacons.liveMembers(now)
	claims := c.joinClaims(now)
	var mine [][2]int
	for i, owner := range assignPartitions(len(all), members, func(i int) string {
		return c.sc.PartitionConsumer(all[i][0], all[i][1])
	}) {
		if owner == c.beacons.id && !slices.Contains(claims, c.sc.PartitionConsumer(all[i][0], all[i][1])) {
			mine = append(mine, all[i])
		}
	}
	return mine
}

// assignPartitions assigns n partitions (named by name) to members:
// rendezvous hashing with a load bound. Partitions are taken in order;
// each goes to the member ranking highest for it (hash of member and
// partition name) among those that may take one more: every member gets
// ⌊n/m⌋ partitions, and n mod m of them one more. Every member computing
// it over the same members gets the same answer.
func assignPartitions(n int, members []string, name func(int) string) []string {
	out := make([]string, n)
	if len(members) == 0 {
		return out
	}
	members = slices.Clone(members)
	slices.Sort(members)
	floor, extra := n/len(members), n%len(members)
	load := map[string]int{}
	for i := range n {
		pn := name(i)
		best, bestScore := "", uint64(0)
		for _, m := range members {
			if load[m] > floor || load[m] == floor && extra == 0 {
				continue
			}
			if s := rendezvous(m, pn); best == "" || s > bestScore || s == bestScore && cmp.Less(m, best) {
				best, bestScore = m, s
			}
		}
		out[i] = best
		if load[best]++; load[best] == floor+1 {
			extra--
		}
	}
	return out
}

func rendezvous(member, partition string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(member))
	h.Write([]byte{0})
	h.Write([]byte(partition))
	return h.Sum64()
}
