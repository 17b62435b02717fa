package namespace_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"cellguard/committer"
	"cellguard/events"
	"cellguard/internal/declog"
	"cellguard/internal/namespace"
	"cellguard/internal/natstest"
	"cellguard/internal/publish"
	"cellguard/internal/subject"
	"cellguard/producer"
	"cellguard/proto/cellguardpb"
)

func testLogger() *slog.Logger {
	if os.Getenv("CG_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// env is what `cellguard serve --lance-root R --lance-namespace …` runs,
// in process: an embedded NATS server, the committer, the publisher and
// the namespace on a loopback HTTP server.
type env struct {
	root string
	url  string // namespace base URL
	ns   *namespace.Server
	reg  *prometheus.Registry
	log  *declog.Log
	js   jetstream.JetStream // the namespace's
	pc   *producer.Client
	pub  *publish.Manager
	nats *natstest.Server
}

type envOptions struct {
	tokens *namespace.Tokens
	// admin gives the namespace an admin connection (the test server
	// has no accounts: any connection may write tombstones).
	admin bool
	// dropWait is Config.DropWait (0: the default).
	dropWait time.Duration
}

func newEnv(t *testing.T, opts envOptions) *env {
	t.Helper()
	e := &env{root: t.TempDir(), reg: prometheus.NewRegistry()}
	srv := natstest.RunServer(t)
	e.nats = srv
	cnc, _ := natstest.Connect(t, srv.URL())
	cm, err := committer.New(cnc, committer.Config{
		Logger: testLogger(), Registerer: e.reg, DiscoverEvery: 20 * time.Millisecond,
		TakeoverOnStart: true, LanceRoot: e.root,
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, cm.Run)
	waitFor(t, "committer ready", cm.Ready)

	_, js := natstest.Connect(t, srv.URL())
	e.js = js
	sc, _ := subject.NewScheme("")
	if e.log, err = declog.Open(t.Context(), js, sc, declog.Options{RequestTimeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	met, err := publish.NewMetrics(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.pub = publish.NewManager(e.log, publish.ManagerOptions{Logger: testLogger(), Metrics: met, DiscoverEvery: 20 * time.Millisecond})
	run(t, e.pub.Run)

	pnc, _ := natstest.Connect(t, srv.URL())
	if e.pc, err = producer.New(pnc, producer.Config{Timeout: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.pc.Close)

	var admin *namespace.Admin
	if opts.admin {
		_, ajs := natstest.Connect(t, srv.URL())
		al, err := declog.Open(t.Context(), ajs, sc, declog.Options{RequestTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		admin = &namespace.Admin{JetStream: ajs, Log: al}
	}
	e.ns, err = namespace.New(namespace.Config{
		Log: e.log, JetStream: js, LanceRoot: e.root, Tokens: opts.tokens, Admin: admin, DropWait: opts.dropWait,
		Logger: testLogger(), Registerer: e.reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(e.ns)
	t.Cleanup(hs.Close)
	t.Cleanup(e.ns.Close)
	e.url = hs.URL
	return e
}

// run runs fn until the test ends.
func run(t *testing.T, fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = fn(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// waitFor polls cond with a generous deadline (the machine is shared).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkLog checks that the decision log of ds has committed versions
// 1..head, each published in storage with the transaction the log
// committed.
func (e *env) checkLog(t *testing.T, ds string, head uint64) {
	t.Helper()
	sc := e.log.Scheme()
	last, ok, err := e.log.Last(t.Context(), sc.Dec(ds, subject.Committed))
	if err != nil || !ok || last.Version != head {
		t.Fatalf("log head of %s: %+v %v %v, want version %d", ds, last, ok, err, head)
	}
	cfg, err := e.log.Config(t.Context(), ds)
	if err != nil {
		t.Fatal(err)
	}
	loc, err := publish.OpenLocation(t.Context(), cfg.GetLocation(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	v := uint64(0)
	for r, err := range e.log.Scan(t.Context(), sc.Dec(ds, subject.Committed), 1, declog.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		v++
		if r.Version != v {
			t.Fatalf("committed versions not contiguous: %d after %d", r.Version, v-1)
		}
		f, err := publish.ReadVersion(t.Context(), loc, v)
		if err != nil {
			t.Fatalf("version %d not published: %v", v, err)
		}
		if f.Transaction.GetUuid() != r.TxnID {
			t.Errorf("version %d in storage has txn %s, the log committed %s", v, f.Transaction.GetUuid(), r.TxnID)
		}
	}
}

// committedMetric reads the committer's count of committed decisions on ds.
func (e *env) committedMetric(t *testing.T, ds string) float64 {
	t.Helper()
	return e.decisionMetric(t, ds, "committed", "")
}

// decisionMetric reads the committer's count of decisions on ds with the
// outcome and reason ("" for commits).
func (e *env) decisionMetric(t *testing.T, ds, outcome, reason string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cellguard_committer_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["dataset"] == ds && labels["outcome"] == outcome && (reason == "" || labels["reason"] == reason) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// checkEvents follows ds with an events.Subscriber and expects versions
// 1..head in order.
func (e *env) checkEvents(t *testing.T, ds string, head uint64) {
	t.Helper()
	sub, err := events.NewSubscriber(e.pc.Conn(), events.Config{Dataset: ds, From: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var got []uint64
	err = sub.Run(ctx, func(_ context.Context, c *events.Committed) error {
		got = append(got, c.Version)
		if c.Version == head {
			cancel()
		}
		return nil
	})
	if uint64(len(got)) != head {
		t.Fatalf("events: versions %v (%v), want 1..%d", got, err, head)
	}
	for i, v := range got {
		if v != uint64(i+1) {
			t.Fatalf("events: versions %v, want 1..%d", got, head)
		}
	}
}

// rejectedEvent follows the rejections of ds from the start of the log
// (an ephemeral events.Rejections feed) until one has reason, and
// returns it.
func (e *env) rejectedEvent(t *testing.T, ds string, reason cellguardpb.Reason) *events.Rejected {
	t.Helper()
	q, err := events.NewRejections(e.pc.Conn(), events.RejectionsConfig{Dataset: ds, FromStart: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var got *events.Rejected
	err = q.Run(ctx, func(_ context.Context, r *events.Rejected) error {
		if r.Err.Reason == reason {
			got = r
			cancel()
		}
		return nil
	})
	if got == nil {
		t.Fatalf("events: no %v rejection of %s (%v)", reason, ds, err)
	}
	return got
}
