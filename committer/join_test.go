package committer

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cellguard/internal/natstest"
	"cellguard/internal/subject"
)

// TestJoinLoadsCheckpointsPromptly: on a 3-node cluster, two committers
// decide 16 datasets under a steady load and a third joins. Partitions
// move to it; every dataset must go on deciding within a short time.
//
// Two stalls were found this way (each left a dataset still for seconds
// while the others went on):
//   - the joiner loads a moved dataset from its newest checkpoint, and
//     reads of the checkpoint bucket and of the log's tail through
//     nats.go's ordered consumers sometimes waited two missed heartbeats
//     (10 s) on a cluster (declog's objects.go and pullBounded);
//   - a committer giving a partition up unpinned it even when the joiner
//     held the pin already, and a pull request it had left at the server
//     could then take the pin: the partition waited out PinnedTTL
//     (partition.stop, watchStrayPin).
func TestJoinLoadsCheckpointsPromptly(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster")
	}
	cl := natstest.StartCluster(t, 3)
	url := cl.URLs()
	_, js := natstest.Connect(t, url)
	cfg := testConfig()
	cfg.Replicas = 3
	cfg.AckWait = 15 * time.Second   // a stall must not hide behind a short AckWait
	cfg.PinnedTTL = 12 * time.Second // the default: a stray pin the watch missed would cost this
	a := start(t, url, cfg)
	const nds = 16
	name := func(i int) string { return fmt.Sprintf("join%02d", i) }
	for i := range nds {
		id := newUUID()
		stage(t, js, name(i), id, mustMarshal(t, createTxn(id)))
	}
	b := start(t, url, cfg)
	waitShared(t, a.c, b.c)

	var stop atomic.Bool
	var wg sync.WaitGroup
	staged := make([]int, nds)
	for i := range nds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				id := newUUID()
				stage(t, js, name(i), id, mustMarshal(t, appendTxn(id, 1)))
				staged[i]++
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	time.Sleep(2 * time.Second)
	join := time.Now()
	c := start(t, url, cfg)
	time.Sleep(6 * time.Second)
	stop.Store(true)
	wg.Wait()
	waitShared(t, a.c, b.c, c.c)

	// Normal gaps here are tens to hundreds of ms, and up to about a
	// second under -race; a machine loaded far beyond its cores stretches
	// them to several seconds. The stalls this guards against cost more: a
	// checkpoint read waiting out heartbeats 10 s, a stray pin left to the
	// server PinnedTTL (12 s). The limit sits between the two.
	const limit = 8 * time.Second
	var worst time.Duration
	for i := range nds {
		waitDecided(t, js, name(i), staged[i]+1, time.Minute)
		first, longest := gapAfter(decisionTimes(t, js, name(i)), join)
		if first > limit || longest > limit {
			t.Errorf("%s stalled after the join: first decision after %v, longest gap %v (limit %v)", name(i), first, longest, limit)
		}
		worst = max(worst, first, longest)
	}
	t.Logf("longest gap of any dataset after the join: %v", worst)
}

// TestJoinTakesOnlyItsShare: on a 3-node cluster, a committer joins two
// others whose announcements do not reach it at first (held back here, as
// a slow cluster can delay them). Every partition is pinned by one of the
// two, so until the joiner hears them it takes only what they gave up for
// it, then its share: it never holds more than its share and one (not
// every partition, alone in its view, to move them back when it hears the
// others).
func TestJoinTakesOnlyItsShare(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster")
	}
	cl := natstest.StartCluster(t, 3)
	url := cl.URLs()
	_, js := natstest.Connect(t, url)
	cfg := testConfig()
	cfg.Replicas = 3
	cfg.TakeoverOnStart = false
	// Long enough that no committer takes another for dead while the
	// announcements are held back, however loaded the machine.
	cfg.TakeoverAfter = 20 * time.Second
	a := start(t, url, cfg)
	b := start(t, url, cfg)
	waitShared(t, a.c, b.c)
	n := a.c.partitionCount()
	datasets := onEveryPartition(n)
	for _, ds := range datasets {
		id := newUUID()
		stage(t, js, ds, id, mustMarshal(t, createTxn(id)))
	}
	for _, ds := range datasets {
		waitDecided(t, js, ds, 1, time.Minute)
	}

	a.c.beacons.silent.Store(true)
	b.c.beacons.silent.Store(true)
	c := start(t, url, cfg)
	var most atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			most.Store(max(most.Load(), int64(len(c.c.ownedPartitions()))))
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	time.Sleep(10 * cfg.DiscoverEvery) // the joiner reassigns, hearing no one
	a.c.beacons.silent.Store(false)
	b.c.beacons.silent.Store(false)
	// The joiner hears them and its join ends (long before TakeoverAfter
	// would end it).
	deadline := time.Now().Add(cfg.TakeoverAfter / 2)
	for joining := true; joining; {
		c.c.partMu.Lock()
		joining = c.c.joining != nil
		c.c.partMu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the joiner heard the others and still waits to join")
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitShared(t, a.c, b.c, c.c)
	close(done)
	wg.Wait()
	if share := int64((n + 2) / 3); most.Load() > share+1 {
		t.Errorf("the joiner held %d of %d partitions at once; want at most its share %d and one", most.Load(), n, share)
	}
}

// onEveryPartition returns a dataset name on each of n partitions.
func onEveryPartition(n int) []string {
	byPart := map[int]string{}
	for i := 0; len(byPart) < n; i++ {
		ds := fmt.Sprintf("part%03d", i)
		if _, ok := byPart[subject.Partition(ds, n)]; !ok {
			byPart[subject.Partition(ds, n)] = ds
		}
	}
	out := make([]string, 0, n)
	for _, ds := range byPart {
		out = append(out, ds)
	}
	return out
}
