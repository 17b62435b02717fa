package committer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/natstest"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// testConfig is a Config with timers small enough for tests.
func testConfig() Config {
	return Config{
		Logger:          testLogger(),
		AckWait:         2 * time.Second,
		PinnedTTL:       3 * time.Second,
		PullExpiry:      time.Second,
		DiscoverEvery:   50 * time.Millisecond,
		TakeoverOnStart: true,
		BatchSize:       64,
		Partitions:      8, // fewer consumers to create and take over per start
		CheckpointEvery: 10,
		Window:          8,
		TxnMaxBytes:     64 << 20,
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("CG_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// running is a committer started by a test.
type running struct {
	c      *Committer
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
}

// start runs a committer on its own connection to url.
func start(t testing.TB, url string, cfg Config, opts ...nats.Option) *running {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{c: c, nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	// Run allows its stream setup 30 s (a fresh 3-node cluster under -race
	// can take most of that to answer); wait a little longer than that.
	deadline := time.Now().Add(45 * time.Second)
	for !c.Ready() {
		select {
		case err := <-r.done:
			r.done <- err
			if errors.Is(err, errCrash) {
				return r // the injected crash came before readiness
			}
			t.Fatalf("committer exited at start: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("committer not ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return r
}

// stop shuts the committer down gracefully (idempotent).
func (r *running) stop(t testing.TB) error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	r.cancel = nil
	var err error
	select {
	case err = <-r.done:
	case <-time.After(15 * time.Second):
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Errorf("committer did not stop; goroutines:\n%s", b.String())
	}
	r.nc.Close()
	return err
}

// crashed waits for a committer whose hook fired, then drops its
// connection without any cleanup, as a dead process would.
func (r *running) crashed(t testing.TB) {
	t.Helper()
	select {
	case err := <-r.done:
		if !errors.Is(err, errCrash) {
			t.Fatalf("committer exited with %v, want an injected crash", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("injected crash did not stop the committer")
	}
	r.cancel()
	r.cancel = nil
	r.nc.Close()
}

// stage publishes a staged transaction with its uuid as message id.
func stage(t testing.TB, js jetstream.JetStream, ds string, id string, body []byte) {
	t.Helper()
	var sc subject.Scheme
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var last error
	for {
		actx, acancel := context.WithTimeout(ctx, time.Second)
		_, err := js.Publish(actx, sc.Txn(ds), body, jetstream.WithMsgID(id))
		acancel()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Errorf("stage %s: %v (last: %v)", id, err, last)
			return
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
}

// ensureStreamsFor creates the streams before any committer runs, so
// tests can stage first.
func ensureStreamsFor(t testing.TB, js jetstream.JetStream, cfg Config) {
	t.Helper()
	if _, _, _, err := ensureStreams(t.Context(), js, cfg.withDefaults()); err != nil {
		t.Fatal(err)
	}
}

// logged is one decision read back from CG_DEC.
type logged struct {
	seq uint64
	rec *cellguardpb.Decision
}

// readLog returns every decision of ds, retrying while the cluster
// recovers.
func readLog(t testing.TB, js jetstream.JetStream, ds string) []logged {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := tryReadLog(js, ds)
		if err == nil {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("read log of %s: %v", ds, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tryReadLog(js jetstream.JetStream, ds string) ([]logged, error) {
	var sc subject.Scheme
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, sc.DecStream())
	if err != nil {
		return nil, err
	}
	last, err := st.GetLastMsgForSubject(ctx, sc.DecOf(ds))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cons, err := js.OrderedConsumer(ctx, sc.DecStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{sc.DecOf(ds)}})
	if err != nil {
		return nil, err
	}
	// One pull subscription for the whole read. Next on an ordered
	// consumer deletes and recreates the server-side consumer for every
	// record; right after a node is killed one of those ~150 round trips
	// fails often enough (no responders) that every attempt of readLog
	// fails and the test reports a read error or a short log.
	it, err := cons.Messages(jetstream.PullMaxMessages(500))
	if err != nil {
		return nil, err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	var out []logged
	for {
		m, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("after %d records: %w", len(out), err)
		}
		md, _ := m.Metadata()
		r := &cellguardpb.Decision{}
		if err := proto.Unmarshal(m.Data(), r); err != nil {
			return nil, err
		}
		out = append(out, logged{seq: md.Sequence.Stream, rec: r})
		if md.Sequence.Stream >= last.Sequence {
			return out, nil
		}
	}
}

// waitDecided waits until ds's log holds n decisions.
func waitDecided(t testing.TB, js jetstream.JetStream, ds string, n int, timeout time.Duration) []logged {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		l := readLog(t, js, ds)
		if len(l) >= n {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("dataset %s: %d decisions after %v, want %d", ds, len(l), timeout, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkLog verifies the invariants of a decision log: exactly one decision
// per staged id, nothing else; txn sequences strictly increasing; versions
// contiguous from 1; and replaying the committed records reproduces the
// same manifest at every version.
func checkLog(t testing.TB, l []logged, staged []string) *table.Manifest {
	t.Helper()
	seen := map[string]int{}
	var lastTxnSeq, version uint64
	var head *table.Manifest
	for i, e := range l {
		seen[e.rec.TxnUuid]++
		if e.rec.TxnSeq <= lastTxnSeq {
			t.Errorf("record %d (%s): txn seq %d after %d: not in stream order", i, e.rec.TxnUuid, e.rec.TxnSeq, lastTxnSeq)
		}
		lastTxnSeq = e.rec.TxnSeq
		if e.rec.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED {
			continue
		}
		version++
		if e.rec.Version != version {
			t.Fatalf("record %d: version %d, want %d", i, e.rec.Version, version)
		}
		txn := &lancepb.Transaction{}
		if err := proto.Unmarshal(e.rec.Transaction, txn); err != nil {
			t.Fatal(err)
		}
		next, err := applyTxn(t.Context(), head, txn, nil)
		if err != nil {
			t.Fatalf("replay version %d: %v", version, err)
		}
		if next.Version() != version {
			t.Fatalf("replay produced version %d, want %d", next.Version(), version)
		}
		head = next
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("txn %s has %d decisions, want 1", id, n)
		}
	}
	var missing []string
	for _, id := range staged {
		if seen[id] == 0 {
			missing = append(missing, id)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("%d staged txns have no decision: %v", len(missing), missing[:min(len(missing), 5)])
	}
	return head
}

func runServer(t testing.TB) *natstest.Server {
	return natstest.RunServer(t)
}

// partitionOf returns the partition of c that consumes ds, waiting for
// it to start.
func partitionOf(t testing.TB, c *Committer, ds string) *partition {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := c.partitionCount()
		name := c.sc.PartitionConsumer(n, subject.Partition(ds, n))
		c.partMu.Lock()
		p := c.parts[name]
		c.partMu.Unlock()
		if p != nil {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("no partition of this committer consumes %s", ds)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pause makes c look like a paused process for ds: it stops pulling ds's
// partition and stops announcing itself, while the batch in hand waits.
func pause(t testing.TB, c *Committer, ds string) {
	t.Helper()
	if c.beacons != nil {
		c.beacons.silent.Store(true)
	}
	partitionOf(t, c, ds).stopConsume()
}

// waitShared waits until the committers consume every partition between
// them, each some.
func waitShared(t testing.TB, cs ...*Committer) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		total, each := 0, true
		for _, c := range cs {
			n := len(c.ownedPartitions())
			total += n
			each = each && n > 0
		}
		if each && total == cs[0].partitionCount() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("partitions not shared: %d consumed in all, want %d", total, cs[0].partitionCount())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
