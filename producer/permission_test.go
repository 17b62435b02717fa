package producer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"cellguard/committer"
	"cellguard/internal/natsperm"
	"cellguard/internal/natstest"
	"cellguard/producer"
	"cellguard/proto/lancepb"
)

// rolesEnv runs the deploy accounts (deploy/nats/accounts.conf) with a
// committer connected as the committer role.
func rolesEnv(t *testing.T) *natstest.Roles {
	t.Helper()
	roles := natstest.RunWithAccounts(t, "../deploy/nats/accounts.conf")
	c, err := committer.New(roles.Connect(t, "committer"), committerConfig(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	for !c.Ready() {
		select {
		case err := <-done:
			t.Fatalf("committer: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return roles
}

func idField() []*lancepb.Field {
	return []*lancepb.Field{{Id: 0, Name: "id", ParentId: -1, LogicalType: "int64", Type: lancepb.Field_LEAF}}
}

// A stage the server refuses (the reader role may not stage) fails at
// once with ErrPermission naming the subject, long before the call's
// deadline, and not as "outcome unknown".
func TestRefusedStageIsATypedErrorAtOnce(t *testing.T) {
	roles := rolesEnv(t)
	w, err := producer.New(roles.Connect(t, "worker"), producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Commit(t.Context(), producer.Create("orders", idField())); err != nil {
		t.Fatal(err)
	}
	r, err := producer.New(roles.Connect(t, "reader"), producer.Config{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for name, call := range map[string]func(context.Context) error{
		"Commit": func(ctx context.Context) error {
			_, err := r.Commit(ctx, producer.Create("orders", idField()))
			return err
		},
		"Stage": func(ctx context.Context) error { return r.Stage(ctx, producer.Create("orders", idField())) },
	} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		start := time.Now()
		err := call(ctx)
		t.Logf("%s refused after %v: %v", name, time.Since(start), err)
		if ctx.Err() != nil {
			t.Errorf("%s: waited for its deadline (%v)", name, err)
		}
		cancel()
		var perr *natsperm.Error
		if !errors.Is(err, producer.ErrPermission) || !errors.As(err, &perr) || perr.Subject != "cg.txn.orders" {
			t.Errorf("%s: err %v, want ErrPermission for cg.txn.orders", name, err)
		}
		if errors.Is(err, producer.ErrOutcomeUnknown) {
			t.Errorf("%s: a refused stage reported as outcome unknown: %v", name, err)
		}
	}
}

// A transaction over the staging stream's message size is an
// ErrInvalidTxn at once (no retry can stage it), not an untyped NATS
// error a worker cannot tell from a transient one.
func TestOversizedTransactionIsInvalid(t *testing.T) {
	e := newEnv(t)
	defer e.startCommitter(t)()
	c, _ := e.client(t)
	huge := &lancepb.DataFragment{PhysicalRows: 1, Files: []*lancepb.DataFile{{Path: strings.Repeat("a", 2<<20), Fields: []int32{0}}}}
	_, err := c.Commit(t.Context(), producer.Create("big", idField(), huge))
	if !errors.Is(err, producer.ErrInvalidTxn) || errors.Is(err, producer.ErrOutcomeUnknown) {
		t.Fatalf("err %v, want ErrInvalidTxn", err)
	}
	t.Log(err)
}
