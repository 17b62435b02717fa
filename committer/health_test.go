package committer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"cellguard/internal/natstest"
	"cellguard/internal/subject"
)

func get(t *testing.T, c *Committer, path string) (int, health) {
	t.Helper()
	rec := httptest.NewRecorder()
	h := c.Readyz()
	if path == "/healthz" {
		h = c.Healthz()
	}
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	var body health
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s: body %q: %v", path, rec.Body.String(), err)
	}
	return rec.Code, body
}

// waitProbe polls path until it answers code, and returns the body.
func waitProbe(t *testing.T, c *Committer, path string, code int, timeout time.Duration) health {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got, body := get(t, c, path)
		if got == code {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %d %+v after %v, want %d", path, got, body, timeout, code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReadyzPerDataset: /readyz is 503 while any served dataset is not
// deciding (here: its log holds a record it cannot read) and names it;
// the healthy dataset decides meanwhile and shows as deciding.
func TestReadyzPerDataset(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	ensureStreamsFor(t, js, cfg)
	var sc subject.Scheme
	if _, err := js.Publish(t.Context(), sc.Dec("poisoned", subject.Committed), []byte("not a decision")); err != nil {
		t.Fatal(err)
	}
	cfg.Datasets = []string{"good", "poisoned"}
	r := start(t, srv.URL(), cfg)
	id := newUUID()
	stage(t, js, "good", id, mustMarshal(t, createTxn(id)))
	waitDecided(t, js, "good", 1, 10*time.Second)

	// The detail names one cause at a time, and a partition still
	// starting comes first: wait for the one this test is about.
	var body health
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		body = waitProbe(t, r.c, "/readyz", 503, 10*time.Second)
		if strings.Contains(body.Detail, "poisoned") || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(body.Detail, "poisoned") || strings.Contains(body.Detail, "good") {
		t.Errorf("/readyz detail %q, want it to name poisoned only", body.Detail)
	}
	states := map[string]DatasetState{}
	for _, d := range body.Datasets {
		states[d.Dataset] = d.State
	}
	if states["good"] != DatasetDeciding || states["poisoned"] == DatasetDeciding || states["poisoned"] == "" {
		t.Errorf("/readyz datasets %+v, want good deciding and poisoned not", body.Datasets)
	}
	if code, h := get(t, r.c, "/healthz"); code != 200 {
		t.Errorf("/healthz = %d %+v, want 200 (the process is fine)", code, h)
	}
}

// TestReadyzAllDeciding: with every dataset loaded and deciding, /readyz
// is 200 and lists them.
func TestReadyzAllDeciding(t *testing.T) {
	srv := natstest.RunServer(t)
	cfg := testConfig()
	cfg.Datasets = []string{"x", "y"}
	r := start(t, srv.URL(), cfg)
	body := waitProbe(t, r.c, "/readyz", 200, 20*time.Second)
	if len(body.Datasets) != 2 || body.Datasets[0].Dataset != "x" || body.Datasets[1].State != DatasetDeciding {
		t.Errorf("/readyz datasets %+v, want x and y deciding", body.Datasets)
	}
}

// TestHealthzStuckStart: a committer whose server has no JetStream keeps
// retrying its setup; /healthz turns 503 "stuck" once StartStuckAfter has
// passed, and cancelling still stops it cleanly.
func TestHealthzStuckStart(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cfg := testConfig()
	cfg.StartStuckAfter = time.Second
	c, err := New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	body := waitProbe(t, c, "/healthz", 503, 20*time.Second)
	if body.Status != "stuck" || !strings.Contains(body.Detail, "last error") {
		t.Errorf("/healthz = %+v, want stuck with the last error", body)
	}
	if code, _ := get(t, c, "/readyz"); code != 503 {
		t.Errorf("/readyz = %d during a stuck start, want 503", code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after cancel during start-up = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// TestConcurrentFirstStart: three committers started together with a
// fresh 3-node cluster (before it has a meta leader), one per node, all
// set up the R3 streams, become ready, and decisions flow.
func TestConcurrentFirstStart(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster")
	}
	cl := natstest.StartCluster(t, 3)
	cfg := testConfig()
	cfg.Replicas = 3
	cfg.TakeoverOnStart = false
	var cs []*Committer
	dones := make([]chan error, len(cl.Servers))
	for i, s := range cl.Servers {
		nc, err := nats.Connect(s.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		c, err := New(nc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		dones[i] = make(chan error, 1)
		go func() { dones[i] <- c.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case <-dones[i]:
			case <-time.After(20 * time.Second):
				t.Errorf("committer %d did not stop", i)
			}
		})
		cs = append(cs, c)
	}
	deadline := time.Now().Add(90 * time.Second)
	for i, c := range cs {
		for !c.Ready() {
			select {
			case err := <-dones[i]:
				t.Fatalf("committer %d exited during start-up: %v", i, err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("committer %d not ready (phase detail %+v)", i, must(c.healthz()))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	_, js := natstest.Connect(t, cl.URLs())
	for i := range 3 {
		ds := fmt.Sprintf("first%d", i)
		id := newUUID()
		stage(t, js, ds, id, mustMarshal(t, createTxn(id)))
	}
	for i := range 3 {
		waitDecided(t, js, fmt.Sprintf("first%d", i), 1, 60*time.Second)
	}
	var sc subject.Scheme
	for _, name := range []string{sc.TxnStream(), sc.DecStream(), "OBJ_" + sc.CheckpointBucket()} {
		s, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if got := s.CachedInfo().Config.Replicas; got != 3 {
			t.Errorf("stream %s has %d replicas, want 3", name, got)
		}
	}
}

func must(h health, _ int) health { return h }
