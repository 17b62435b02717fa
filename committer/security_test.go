package committer

import (
	"context"
	"strings"
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

// TestWrongRoleNamesTheRefusal: a committer started with a worker's
// credentials cannot set up its streams. Each attempt ends as soon as
// the server refuses a request, and its health detail names the refused
// subject instead of a timeout.
func TestWrongRoleNamesTheRefusal(t *testing.T) {
	roles := natstest.RunWithAccounts(t, "../deploy/nats/accounts.conf")
	nc, err := nats.Connect(roles.Server.ClientURL(), roles.Auth(t, "worker"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, err := New(nc, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		h, _ := c.healthz()
		if strings.Contains(h.Detail, "refused by the server") {
			t.Logf("health: %+v", h)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("health never named the refusal: %+v", h)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
