package committer

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
)

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	for name, cfg := range map[string]Config{
		"batch too large":        {BatchSize: 1001},
		"ack pending < batch":    {BatchSize: 64, MaxAckPending: 8},
		"pull expiry flaps pin":  {PinnedTTL: 3 * time.Second, PullExpiry: 2 * time.Second},
		"pull expiry too short":  {PullExpiry: 500 * time.Millisecond},
		"bad prefix":             {Prefix: "a.b"},
		"bad dataset":            {Datasets: []string{"a.b"}},
		"bad policy":             {DeletionPolicy: "lenient"},
		"txn limit over msg max": {MaxTxnBytes: 2 << 20, StreamMaxMsgSize: 1 << 20},
		"replicas":               {Replicas: 7},
		"atomic batch min":       {AtomicBatchMin: -1},
	} {
		if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestAtomicBatchMinFollowsTheLog: unless configured, the smallest atomic
// batch is 32 on a single-replica file log (the server syncs a file store
// per atomic batch) and 2 on a memory or replicated one (a chain of
// single appends would pay a round per decision).
func TestAtomicBatchMinFollowsTheLog(t *testing.T) {
	open := func(url string, cfg Config) *Committer {
		t.Helper()
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		c, err := New(nc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.openStreams(t.Context()); err != nil {
			t.Fatal(err)
		}
		return c
	}
	srv := natstest.RunServer(t)
	for _, tc := range []struct {
		name string
		cfg  Config
		want int
	}{
		{"file R1", Config{Prefix: "f1"}, 32},
		{"memory R1", Config{Prefix: "m1", Storage: jetstream.MemoryStorage, TxnMaxBytes: 16 << 20}, 2},
		{"configured", Config{Prefix: "c1", AtomicBatchMin: 5}, 5},
	} {
		if got := open(srv.URL(), tc.cfg).atomicMin; got != tc.want {
			t.Errorf("%s: atomicMin = %d, want %d", tc.name, got, tc.want)
		}
	}
	if testing.Short() {
		return
	}
	cl := natstest.RunCluster(t, 3)
	if got := open(cl.Servers[0].URL(), Config{Replicas: 3}).atomicMin; got != 2 {
		t.Errorf("file R3: atomicMin = %d, want 2", got)
	}
}
