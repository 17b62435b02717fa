package committer

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"cellguard/internal/natstest"
)

// waitState polls ds's status until it is want.
func waitState(t *testing.T, c *Committer, ds string, want DatasetState) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range c.DatasetStatuses() {
			if s.Dataset == ds && s.State == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("dataset %s never %s: %+v", ds, want, c.DatasetStatuses())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestIdleDatasetEvictedAndReloaded: an idle dataset's state is dropped,
// and the next staged message reloads it and is decided against the
// right head; a republished transaction is still recognized.
func TestIdleDatasetEvictedAndReloaded(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := retentionConfig()
	cfg.IdleEvict = 100 * time.Millisecond
	r := start(t, srv.URL(), cfg)
	ds := "sleepy"
	create := newUUID()
	stage(t, js, ds, create, mustMarshal(t, createTxn(create)))
	stageAppends(t, js, ds, 1, 24)
	waitVersion(t, js, ds, 25)
	waitState(t, r.c, ds, DatasetIdle)
	if n := testutil.ToFloat64(r.c.metrics.evictions.WithLabelValues(ds)); n < 1 {
		t.Errorf("evictions = %v, want ≥ 1", n)
	}
	stageAppends(t, js, ds, 25, 1)
	waitVersion(t, js, ds, 26)
	// The last append again, under another message id (as if past the
	// stream's dedupe window): the reloaded state knows its uuid, so there
	// is no second decision.
	waitState(t, r.c, ds, DatasetIdle)
	l := readLog(t, js, ds)
	again := l[len(l)-1].rec.TxnUuid
	id := newUUID()
	stage(t, js, ds, "restaged-"+again, mustMarshal(t, appendTxn(again, 25)))
	stage(t, js, ds, id, mustMarshal(t, appendTxn(id, 26)))
	waitVersion(t, js, ds, 27)
	seen := 0
	for _, e := range readLog(t, js, ds) {
		if e.rec.TxnUuid == again {
			seen++
		}
	}
	if seen != 1 {
		t.Errorf("transaction %s decided %d times after reload, want 1", again, seen)
	}
}
