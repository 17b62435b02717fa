package committer

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
)

// TestDecisionLogFull runs a committer on a decision log created with a
// small MaxBytes (Discard: new): once an append is refused for want of
// room, the dataset says so (retrying, reason decision-log-full) instead
// of deciding, and nothing is acked: the staged transactions wait in
// CG_TXN; once the log has room, they are decided.
func TestDecisionLogFull(t *testing.T) {
	srv := runServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	txnCfg, decCfg := StreamConfigs(cfg)
	decCfg.MaxBytes = 2 << 10
	for _, sc := range []jetstream.StreamConfig{txnCfg, decCfg} {
		if _, err := js.CreateStream(t.Context(), sc); err != nil {
			t.Fatal(err)
		}
	}
	r := start(t, srv.URL(), cfg)
	const n = 20
	for i := range n {
		id := newUUID()
		stage(t, js, fmt.Sprintf("full%02d", i), id, mustMarshal(t, createTxn(id)))
	}
	deadline := time.Now().Add(time.Minute)
	var full []DatasetStatus
	for len(full) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no dataset reports a full decision log: %v", r.c.DatasetStatuses())
		}
		time.Sleep(20 * time.Millisecond)
		for _, s := range r.c.DatasetStatuses() {
			if s.State == DatasetRetrying && s.Reason == reasonLogFull {
				full = append(full, s)
			}
		}
	}
	dec, err := js.Stream(t.Context(), decCfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	di, err := dec.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	txn, err := js.Stream(t.Context(), txnCfg.Name)
	if err != nil {
		t.Fatal(err)
	}
	ti, err := txn.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Every staged transaction is decided in the log or still staged.
	if di.State.Msgs+ti.State.Msgs < n || ti.State.Msgs == 0 {
		t.Fatalf("%d decisions in the log, %d transactions staged; want %d in all, some staged (%v)", di.State.Msgs, ti.State.Msgs, n, full)
	}
	// Once the log has room, every dataset is decided.
	decCfg.MaxBytes = -1
	if _, err := js.UpdateStream(t.Context(), decCfg); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		waitDecided(t, js, fmt.Sprintf("full%02d", i), 1, 2*time.Minute)
	}
}
