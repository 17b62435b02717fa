package committer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"cellguard/internal/natstest"
)

// settledMsg is a delivery that records how it was settled.
type settledMsg struct {
	jetstream.Msg
	name    string
	settled string
}

func (m *settledMsg) Ack() error                       { m.settled = "ack"; return nil }
func (m *settledMsg) DoubleAck(context.Context) error  { m.settled = "double-ack"; return nil }
func (m *settledMsg) Nak() error                       { m.settled = "nak"; return nil }
func (m *settledMsg) NakWithDelay(time.Duration) error { m.settled = "nak-delay"; return nil }
func (m *settledMsg) Term() error                      { m.settled = "term"; return nil }
func (m *settledMsg) TermWithReason(string) error      { m.settled = "term-reason"; return nil }

func heldNames(hs []*heldMsg) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.Msg.(*settledMsg).name
	}
	return out
}

func listed(hs *holds) []string {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	var out []string
	for h := hs.head; h != nil; h = h.next {
		out = append(out, h.Msg.(*settledMsg).name)
	}
	return out
}

// TestHoldsDueOldestFirst holds messages at different times and looks at
// them as time passes: a look returns only the messages last touched at
// least stale ago, oldest first, and moves them behind the others.
func TestHoldsDueOldestFirst(t *testing.T) {
	var hs holds
	t0 := time.Unix(1000, 0)
	sec := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for i, name := range []string{"a", "b", "c"} {
		hs.hold(&settledMsg{name: name}, sec(i))
	}
	const stale, limit = 3 * time.Second, time.Hour
	if got := heldNames(hs.due(sec(2), stale, limit)); len(got) != 0 {
		t.Fatalf("due at 2s = %v; want none", got)
	}
	if got := fmt.Sprint(heldNames(hs.due(sec(4), stale, limit))); got != "[a b]" {
		t.Fatalf("due at 4s = %v; want [a b]", got)
	}
	if got := fmt.Sprint(listed(&hs)); got != "[c a b]" {
		t.Fatalf("order after the look = %v; want [c a b]", got)
	}
	hs.hold(&settledMsg{name: "d"}, sec(5))
	if got := fmt.Sprint(heldNames(hs.due(sec(7), stale, limit))); got != "[c a b]" {
		t.Fatalf("due at 7s = %v; want [c a b]", got)
	}
	if got := fmt.Sprint(listed(&hs)); got != "[d c a b]" {
		t.Fatalf("order after the second look = %v; want [d c a b]", got)
	}
	// Touched at 7s: nothing of a, b, c is due before 10s.
	if got := fmt.Sprint(heldNames(hs.due(sec(9), stale, limit))); got != "[d]" {
		t.Fatalf("due at 9s = %v; want [d]", got)
	}
	if hs.held() != 4 {
		t.Fatalf("held = %d; want 4", hs.held())
	}
}

// TestHoldsSettleReleases settles held messages every way a delivery can
// be settled, and replaces one by a later delivery: each leaves the set
// and the held count follows; the settlement reaches the delivery.
func TestHoldsSettleReleases(t *testing.T) {
	var count atomic.Int64
	hs := holds{onChange: func(n int) { count.Store(int64(n)) }}
	now := time.Unix(1000, 0)
	settle := map[string]func(jetstream.Msg) error{
		"ack":         func(m jetstream.Msg) error { return m.Ack() },
		"double-ack":  func(m jetstream.Msg) error { return m.DoubleAck(context.Background()) },
		"nak":         func(m jetstream.Msg) error { return m.Nak() },
		"nak-delay":   func(m jetstream.Msg) error { return m.NakWithDelay(time.Second) },
		"term":        func(m jetstream.Msg) error { return m.Term() },
		"term-reason": func(m jetstream.Msg) error { return m.TermWithReason("x") },
	}
	var msgs []*settledMsg
	var held []*heldMsg
	for name := range settle {
		m := &settledMsg{name: name}
		msgs = append(msgs, m)
		held = append(held, hs.hold(m, now))
	}
	replaced := hs.hold(&settledMsg{name: "replaced"}, now)
	if int(count.Load()) != len(settle)+1 {
		t.Fatalf("held count = %d; want %d", count.Load(), len(settle)+1)
	}
	unhold(replaced)
	unhold(replaced) // a second time changes nothing
	for i, h := range held {
		if err := settle[msgs[i].name](h); err != nil {
			t.Fatal(err)
		}
		if msgs[i].settled != msgs[i].name {
			t.Errorf("%s settled as %q", msgs[i].name, msgs[i].settled)
		}
		if err := h.Ack(); err != nil { // settled twice: the set is unchanged
			t.Fatal(err)
		}
	}
	if hs.held() != 0 || count.Load() != 0 || hs.head != nil || hs.tail != nil {
		t.Fatalf("after settling all: held %d, count %d, list %v; want empty", hs.held(), count.Load(), listed(&hs))
	}
	if got := hs.due(now.Add(time.Hour), time.Second, 0); len(got) != 0 {
		t.Fatalf("due after settling all = %v; want none", heldNames(got))
	}
}

// TestHoldsLimit holds messages past the limit: a look drops them
// instead of extending them, and keeps extending the younger ones.
func TestHoldsLimit(t *testing.T) {
	var hs holds
	t0 := time.Unix(1000, 0)
	old := hs.hold(&settledMsg{name: "old"}, t0)
	hs.hold(&settledMsg{name: "young"}, t0.Add(5*time.Second))
	const stale, limit = time.Second, 8 * time.Second
	if got := fmt.Sprint(heldNames(hs.due(t0.Add(7*time.Second), stale, limit))); got != "[old young]" {
		t.Fatalf("due at 7s = %v; want [old young]", got)
	}
	if got := fmt.Sprint(heldNames(hs.due(t0.Add(9*time.Second), stale, limit))); got != "[young]" {
		t.Fatalf("due at 9s = %v; want [young] (old is past the limit)", got)
	}
	if got := fmt.Sprint(listed(&hs)); got != "[young]" || hs.held() != 1 {
		t.Fatalf("held after the limit: %v (%d); want [young]", got, hs.held())
	}
	if err := old.Ack(); err != nil { // decided at last: it is settled as any other
		t.Fatal(err)
	}
	if old.Msg.(*settledMsg).settled != "ack" || hs.held() != 1 {
		t.Fatalf("old settled %q, held %d; want ack, 1", old.Msg.(*settledMsg).settled, hs.held())
	}
}

// holdScenario runs a committer with one decider, AckWait 1 s and the
// given HoldLimit. The decider stops at its decision of dataset "slow"
// until the test lets it go; a message of dataset "queued" waits in the
// queue behind it meanwhile.
type holdScenario struct {
	t       *testing.T
	js      jetstream.JetStream
	r       *running
	release chan struct{}
	let     sync.Once
	decided map[string]*atomic.Int64 // StepDecided per dataset
}

func newHoldScenario(t *testing.T, holdLimit time.Duration) *holdScenario {
	srv := runServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	cfg.AckWait = time.Second
	cfg.HoldLimit = holdLimit
	cfg.Deciders = 1
	s := &holdScenario{t: t, js: js, release: make(chan struct{}), decided: map[string]*atomic.Int64{"slow": {}, "queued": {}}}
	entered := make(chan struct{})
	var once atomic.Bool
	cfg.hook = func(step Step, ds string) error {
		if step != StepDecided {
			return nil
		}
		if n := s.decided[ds]; n != nil {
			n.Add(1)
		}
		if ds == "slow" && once.CompareAndSwap(false, true) {
			close(entered)
			select {
			case <-s.release:
			case <-time.After(90 * time.Second):
				return errors.New("the test never let the decider go")
			}
		}
		return nil
	}
	s.r = start(t, srv.URL(), cfg)
	t.Cleanup(s.letGo) // before the committer stops, on any failure
	stageCreate(t, js, "slow")
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the slow dataset was never decided")
	}
	return s
}

func stageCreate(t *testing.T, js jetstream.JetStream, ds string) {
	id := newUUID()
	stage(t, js, ds, id, mustMarshal(t, createTxn(id)))
}

// consumers returns the partition consumers of the datasets.
func (s *holdScenario) consumers(ds ...string) map[string]jetstream.Consumer {
	out := map[string]jetstream.Consumer{}
	for _, d := range ds {
		p := partitionOf(s.t, s.r.c, d)
		out[p.name] = p.cons
	}
	return out
}

// redelivered sums the consumers' redelivered pending messages and their
// deliveries.
func (s *holdScenario) redelivered(cons map[string]jetstream.Consumer) (redelivered int, delivered uint64) {
	s.t.Helper()
	for name, c := range cons {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := c.Info(ctx)
		cancel()
		if err != nil {
			s.t.Fatalf("consumer %s: %v", name, err)
		}
		redelivered += info.NumRedelivered
		delivered += info.Delivered.Consumer
	}
	return redelivered, delivered
}

// letGo lets the held decider go on.
func (s *holdScenario) letGo() { s.let.Do(func() { close(s.release) }) }

func (s *holdScenario) heldCount() int {
	return int(testutil.ToFloat64(s.r.c.metrics.held))
}

// TestHeldMessagesAreNotRedelivered holds one message in a decider and
// queues another behind it, both for three AckWaits: the server
// redelivers neither (the keeper keeps them in progress), and each is
// decided once.
func TestHeldMessagesAreNotRedelivered(t *testing.T) {
	s := newHoldScenario(t, 0) // the default HoldLimit: 8 s
	stageCreate(t, s.js, "queued")
	c := s.r.c
	deadline := time.Now().Add(30 * time.Second)
	for c.holds.held() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("held messages = %d; want the slow one and the queued one", c.holds.held())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s.heldCount() != 2 {
		t.Errorf("%s = %d; want 2", metricHeld, s.heldCount())
	}
	cons := s.consumers("slow", "queued")
	for end := time.Now().Add(3 * c.cfg.AckWait); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if n, _ := s.redelivered(cons); n != 0 {
			t.Fatalf("%d held messages redelivered", n)
		}
	}
	s.letGo()
	waitDecided(t, s.js, "slow", 1, 30*time.Second)
	waitDecided(t, s.js, "queued", 1, 30*time.Second)
	deadline = time.Now().Add(30 * time.Second)
	for c.holds.held() != 0 || s.heldCount() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("held after deciding: %d (gauge %d); want 0", c.holds.held(), s.heldCount())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, delivered := s.redelivered(cons); n != 0 || delivered != 2 {
		t.Errorf("redelivered %d, deliveries %d; want 0, 2", n, delivered)
	}
	if err := s.r.stop(t); err != nil {
		t.Fatal(err)
	}
	for _, ds := range []string{"slow", "queued"} {
		if l := readLog(t, s.js, ds); len(l) != 1 {
			t.Errorf("%s: %d decisions; want 1", ds, len(l))
		}
		if n := s.decided[ds].Load(); n != 1 {
			t.Errorf("%s decided %d times; want 1", ds, n)
		}
	}
	if n := testutil.ToFloat64(c.metrics.inProgress); n < 2 {
		t.Errorf("%s = %v; want at least one per held message", metricInProgress, n)
	}
}

// TestHeldPastLimitIsRedelivered holds a message in a decider past
// HoldLimit: the keeper gives it up, the server redelivers it, and it is
// still decided once.
func TestHeldPastLimitIsRedelivered(t *testing.T) {
	s := newHoldScenario(t, 2*time.Second)
	cons := s.consumers("slow")
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, _ := s.redelivered(cons)
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a message held past HoldLimit was not redelivered")
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.letGo()
	waitDecided(t, s.js, "slow", 1, 30*time.Second)
	c := s.r.c
	deadline = time.Now().Add(30 * time.Second)
	for c.holds.held() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("held after deciding: %d; want 0", c.holds.held())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.r.stop(t); err != nil {
		t.Fatal(err)
	}
	if l := readLog(t, s.js, "slow"); len(l) != 1 {
		t.Errorf("slow: %d decisions; want 1", len(l))
	}
}

// BenchmarkBacklogDeliveries stages one creation for each of 1,000
// datasets at once for a committer with one decider that takes 10 ms per
// decision and AckWait 1 s: the backlog waits ~10 s in the queue. It
// reports the deliveries the partition consumers made per staged message
// (1 when nothing is redelivered) and the InProgress acks sent per
// message, with the keeper off, at the default HoldLimit (8 s: the
// messages queued longest outlive it) and with a HoldLimit longer than
// the backlog. b.N is ignored beyond 1.
//
//	go test ./committer/ -run XXX -bench BacklogDeliveries -benchtime 1x
func BenchmarkBacklogDeliveries(b *testing.B) {
	for _, c := range []struct {
		name  string
		limit time.Duration
	}{{"off", -1}, {"default", 0}, {"1m", time.Minute}} {
		limit := c.limit
		b.Run("hold-limit="+c.name, func(b *testing.B) {
			const n = 1000
			srv := runServer(b)
			_, js := natstest.Connect(b, srv.URL())
			cfg := testConfig()
			cfg.AckWait, cfg.HoldLimit, cfg.Deciders = time.Second, limit, 1
			cfg.hook = func(s Step, _ string) error {
				if s == StepDecided {
					time.Sleep(10 * time.Millisecond)
				}
				return nil
			}
			ensureStreamsFor(b, js, cfg)
			r := start(b, srv.URL(), cfg)
			datasets := dsNames("backlog", n)
			for _, ds := range datasets {
				id := newUUID()
				stage(b, js, ds, id, mustMarshal(b, createTxn(id)))
			}
			for _, ds := range datasets {
				waitDecided(b, js, ds, 1, 5*time.Minute)
			}
			var delivered uint64
			for k := range cfg.Partitions {
				cons, err := js.Consumer(context.Background(), r.c.sc.TxnStream(), r.c.sc.PartitionConsumer(cfg.Partitions, k))
				if err != nil {
					b.Fatal(err)
				}
				info, err := cons.Info(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				delivered += info.Delivered.Consumer
			}
			b.ReportMetric(float64(delivered)/n, "deliveries/msg")
			b.ReportMetric(testutil.ToFloat64(r.c.metrics.inProgress)/n, "in_progress/msg")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// TestEnqueueRedeliveryLeavesHoldSet queues a held message, then its
// redelivery: the earlier delivery leaves the hold set, unsettled, and
// the redelivery is the one held.
func TestEnqueueRedeliveryLeavesHoldSet(t *testing.T) {
	c := &Committer{}
	w := &worker{c: c, queued: true} // queued: no decider to wake
	now := time.Unix(1000, 0)
	first := &settledMsg{name: "first"}
	again := &settledMsg{name: "again"}
	w.enqueue([]item{{staged: staged{Seq: 7}, msg: c.holds.hold(first, now)}})
	w.enqueue([]item{{staged: staged{Seq: 7}, msg: c.holds.hold(again, now), redelivered: true}})
	if got := fmt.Sprint(listed(&c.holds)); got != "[again]" || first.settled != "" {
		t.Fatalf("held after a redelivery: %v, first settled %q; want [again], unsettled", got, first.settled)
	}
	if len(w.queue) != 1 || w.queue[0].msg.(*heldMsg).Msg != again {
		t.Fatalf("queue after a redelivery: %+v; want the redelivery alone", w.queue)
	}
}
