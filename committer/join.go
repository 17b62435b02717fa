package committer

import (
	"context"
	"slices"
	"time"

	"cellguard/internal/retry"
	"cellguard/internal/subject"
)

// Joining.
//
// A committer that starts listens joinListen for the others' answers
// before it takes its share of the partitions. On a cluster the answers
// can come later than that; a joiner alone in its view would take every
// partition, and they would move back within a beacon interval: each
// partition moved twice, each move a checkpoint load per active dataset.
//
// So after joinListen a joiner also looks at the partition consumers (one
// list request): a partition whose consumer is pinned, or has a pull
// waiting, is consumed by someone. Until every such partition is
// announced by a committer it has heard, at most TakeoverAfter (a
// committer not heard that long is taken for dead anyway), it consumes
// only the partitions nobody consumes. On an empty deployment there are
// none to wait for, and a joiner that hears the others within joinListen
// (the usual case) takes its share at once.

// joining is what a committer waits to hear while it joins.
type joining struct {
	claimed      []string // partition consumers someone consumed at the start
	since, until time.Time
}

// join listens for the other committers, then notes the partitions that
// someone consumes (assigned leaves them alone until their consumers are
// heard). It runs once, before the first assignment.
func (c *Committer) join(ctx context.Context) {
	if retry.Sleep(ctx, joinListen) != nil {
		return
	}
	claimed := c.claimedPartitions(ctx)
	if len(claimed) == 0 {
		return
	}
	now := time.Now()
	c.partMu.Lock()
	c.joining = &joining{claimed: claimed, since: now, until: now.Add(c.cfg.TakeoverAfter)}
	c.partMu.Unlock()
}

// claimedPartitions returns the partition consumers that are pinned or
// have a pull waiting: some committer consumes them. When the consumers
// cannot be listed it returns none, and the joiner takes its share as
// it hears the others.
func (c *Committer) claimedPartitions(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.TakeoverAfter)
	defer cancel()
	var out []string
	lister := c.txn.ListConsumers(ctx)
	for ci := range lister.Info() {
		if _, _, ok := subject.ParsePartitionConsumer(ci.Name); !ok {
			continue
		}
		if pin, _ := pinOf(ci); pin != "" || ci.NumWaiting > 0 {
			out = append(out, ci.Name)
		}
	}
	if err := lister.Err(); err != nil {
		c.log.Debug("join: list the partition consumers", "err", err)
		return nil
	}
	return out
}

// joinClaims returns, while this committer joins, the partitions
// someone consumed at its start: it leaves them alone until it has heard
// every one announced, or its wait is over (then the join ends).
func (c *Committer) joinClaims(now time.Time) []string {
	c.partMu.Lock()
	j := c.joining
	c.partMu.Unlock()
	if j == nil {
		return nil
	}
	heard := !slices.ContainsFunc(j.claimed, func(name string) bool { return !c.beacons.announced(name, now) })
	if !heard && now.Before(j.until) {
		return j.claimed
	}
	c.partMu.Lock()
	c.joining = nil
	c.partMu.Unlock()
	c.log.Info("joined", "claimed", len(j.claimed), "all heard", heard, "waited", now.Sub(j.since).Round(time.Millisecond))
	return nil
}
