package committer

import (
	"context"
	"flag"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/producer"
	"cellguard/proto/lancepb"
)

// decisionTimes returns the server timestamps of ds's decision records,
// in log order.
func decisionTimes(t *testing.T, js jetstream.JetStream, ds string) []time.Time {
	t.Helper()
	var sc subject.Scheme
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, sc.DecStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{sc.DecOf(ds)}, HeadersOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Time
	for {
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, md.Timestamp)
			n++
		}
		if n == 0 {
			return out
		}
	}
}

// gapAfter returns the time from at to the first decision after it, and
// the longest gap between consecutive decisions after at.
func gapAfter(ts []time.Time, at time.Time) (first, longest time.Duration) {
	prev := at
	first = -1
	for _, tm := range ts {
		if tm.Before(at) {
			continue
		}
		if first < 0 {
			first = tm.Sub(at)
		}
		longest = max(longest, tm.Sub(prev))
		prev = tm
	}
	return first, longest
}

// steadyLoad stages appends to ds every interval until stop is closed.
// It returns the uuids staged so far when called.
func steadyLoad(t *testing.T, js jetstream.JetStream, ds string, every time.Duration, stop <-chan struct{}) func() []string {
	ids := []string{newUUID()}
	stage(t, js, ds, ids[0], mustMarshal(t, createTxn(ids[0])))
	done := make(chan struct{})
	var n atomic.Int64
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(every):
			}
			id := newUUID()
			stage(t, js, ds, id, mustMarshal(t, appendTxn(id, 1)))
			ids = append(ids, id)
			n.Add(1)
		}
	}()
	return func() []string { <-done; return ids }
}

var failoverMeasure = flag.Bool("failover.measure", false, "run the failover measurement (3-node cluster, about 25 s)")

type sdkCall struct {
	took, latest time.Duration // the whole call, and Latest's part
	err          error
}

// sdkLoad commits appends to ds through the producer SDK, one after
// another, until stop is closed; it returns every call's duration and
// error when called.
func sdkLoad(t *testing.T, urls, ds string, stop <-chan struct{}) func() []sdkCall {
	t.Helper()
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := producer.New(nc, producer.Config{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	schema := []*lancepb.Field{{Id: 0, Name: "a", ParentId: -1, LogicalType: "int64"}, {Id: 1, Name: "b", ParentId: -1, LogicalType: "int64"}}
	if _, err := pc.Commit(t.Context(), producer.Create(ds, schema, dataFragment("c.lance", 1))); err != nil {
		t.Fatalf("SDK create: %v", err)
	}
	var calls []sdkCall
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer nc.Close()
		defer pc.Close()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			begin := time.Now()
			snap, err := pc.Latest(context.Background(), ds)
			latest := time.Since(begin)
			if err == nil {
				_, err = pc.Commit(context.Background(), snap.NewTxn().Append(dataFragment(fmt.Sprintf("f%d.lance", i), 1)))
			}
			calls = append(calls, sdkCall{took: time.Since(begin), latest: latest, err: err})
		}
	}()
	return func() []sdkCall { <-done; return calls }
}

// TestFailoverDecisionGap measures, on a 3-node cluster with R3 streams,
// how long decisions stop when the node leading CG_DEC is killed: (a) the
// committer is connected elsewhere and survives; (b) the committer is
// connected to the killed node and a standby on another node takes over.
// It logs the numbers (docs/benchmarks.md), asserting only correctness:
// every staged transaction gets exactly one decision.
func TestFailoverDecisionGap(t *testing.T) {
	if !*failoverMeasure {
		t.Skip("measurement: run with -failover.measure (docs/benchmarks.md)")
	}
	for _, sameNode := range []bool{false, true} {
		name := "committer-survives"
		if sameNode {
			name = "committer-on-killed-node"
		}
		t.Run(name, func(t *testing.T) {
			cl := natstest.RunCluster(t, 3)
			_, js := natstest.Connect(t, cl.URLs())
			cfg := testConfig()
			cfg.Replicas = 3
			cfg.TakeoverOnStart = false
			// Production pin timers: the takeover must not wait for them.
			cfg.PinnedTTL, cfg.PullExpiry = 12*time.Second, 3*time.Second
			ensureStreamsFor(t, js, cfg)
			leader := cl.WaitStreamLeader(t, "CG_DEC")
			var other *natstest.Server
			for _, s := range cl.Servers {
				if s != leader {
					other = s
					break
				}
			}
			first := other
			if sameNode {
				first = leader
			}
			victim := start(t, first.URL(), cfg)
			ds := "failover"
			stop := make(chan struct{})
			wait := steadyLoad(t, js, ds, 10*time.Millisecond, stop)
			waitDecided(t, js, ds, 20, 30*time.Second)
			if sameNode {
				start(t, other.URL(), cfg) // the standby, pinned to nothing yet
			}
			time.Sleep(500 * time.Millisecond)
			if l := cl.StreamLeader("CG_DEC"); l != leader {
				t.Skip("CG_DEC leader moved before the kill")
			}
			sdk := sdkLoad(t, cl.URLs(), "sdk", stop)
			kill := time.Now()
			leader.Stop()
			if sameNode {
				victim.nc.Close() // the committer dies with its node
			}
			time.Sleep(8 * time.Second)
			close(stop)
			calls := sdk()
			var slowest, slowestLatest time.Duration
			for _, c := range calls {
				if c.err != nil {
					t.Errorf("SDK Commit during failover: %v after %v", c.err, c.took)
				}
				slowest = max(slowest, c.took-c.latest)
				slowestLatest = max(slowestLatest, c.latest)
			}
			t.Logf("%s: %d SDK Latest+Commit calls during the failover, slowest Commit %v, slowest Latest %v",
				name, len(calls), slowest.Round(10*time.Millisecond), slowestLatest.Round(10*time.Millisecond))
			ids := wait()
			l := waitDecided(t, js, ds, len(ids), 60*time.Second)
			checkLog(t, l, ids)
			_, sdkGap := gapAfter(decisionTimes(t, js, "sdk"), kill)
			t.Logf("%s: longest gap between SDK decisions after the kill %v", name, sdkGap.Round(10*time.Millisecond))
			firstAfter, longest := gapAfter(decisionTimes(t, js, ds), kill)
			t.Logf("%s: first decision %v after killing the CG_DEC leader; longest gap after the kill %v (PinnedTTL %v)",
				name, firstAfter.Round(10*time.Millisecond), longest.Round(10*time.Millisecond), cfg.PinnedTTL)
		})
	}
}
