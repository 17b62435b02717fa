package committer

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
)

// TestDeployPermissions loads deploy/nats/accounts.conf into a real server
// and proves the role split: the committer runs, a worker can stage and
// read decisions but cannot append to the decision log.
func TestDeployPermissions(t *testing.T) {
	roles := natstest.RunWithAccounts(t, "../deploy/nats/accounts.conf")
	url := roles.Server.ClientURL()

	cfg := testConfig()
	start(t, url, cfg, roles.Auth(t, "committer"))

	wnc, err := nats.Connect(url, roles.Auth(t, "worker"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	wjs, err := jetstream.New(wnc)
	if err != nil {
		t.Fatal(err)
	}
	ds := "secure"
	id := newUUID()
	stage(t, wjs, ds, id, mustMarshal(t, createTxn(id)))
	l := waitDecided(t, wjs, ds, 1, 10*time.Second)
	checkLog(t, l, []string{id})

	// The worker tries to append a forged decision: refused.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := wjs.Publish(ctx, "cg.dec."+ds+".committed", []byte("forged")); err == nil {
		t.Error("worker appended to the decision log")
	}
	if err := wjs.DeleteStream(ctx, "CG_DEC"); err == nil {
		t.Error("worker deleted the decision log")
	}
	time.Sleep(100 * time.Millisecond)
	if got := readLog(t, wjs, ds); len(got) != 1 {
		t.Errorf("decision log has %d records after the forgery attempt, want 1", len(got))
	}
}
