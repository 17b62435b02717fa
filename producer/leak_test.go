package producer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"cellguard/internal/natstest"
	"cellguard/producer"
)

// TestNoGoroutinesAfterClose: after Close, no goroutine of the producer
// is left — dataset followers, outcome lookups and commits cut short by
// their context or by Close have all ended.
func TestNoGoroutinesAfterClose(t *testing.T) {
	e := newEnv(t)
	c, _ := e.client(t)
	s := e.store(t, "leak")
	create(t, c, s, "leak", []int64{1})
	snap, err := c.Latest(t.Context(), "leak")
	if err != nil {
		t.Fatal(err)
	}
	var txns []*producer.Txn
	for range 6 {
		txns = append(txns, yTxn(t, s, snap, 0))
	}
	var wg sync.WaitGroup
	for i, txn := range txns {
		wg.Go(func() {
			ctx := t.Context()
			if i%2 == 0 { // some calls give up early
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Duration(i)*time.Millisecond)
				defer cancel()
			}
			_, _ = c.Commit(ctx, txn)
			_, _ = c.Outcome(ctx, "leak", txn.ID(), 1)
		})
	}
	wg.Wait()
	if _, err := c.Latest(t.Context(), "leak"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	e.stop()
	natstest.CheckNoGoroutines(t, "cellguard/producer", "cellguard/committer")
}
