package deploy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/committer"
	"cellguard/events"
	"cellguard/internal/natsperm"
	"cellguard/internal/natstest"
	"cellguard/producer"
)

// narrowWorker narrows the worker of accounts.conf to dataset ds the way
// the file's header says: each dataset wildcard on a line marked "DS:".
func narrowWorker(t *testing.T, ds string) string {
	t.Helper()
	b, err := os.ReadFile("nats/accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "# worker")
	end := strings.Index(s, "# reader")
	if start < 0 || end < start {
		t.Fatal("accounts.conf: no worker block")
	}
	lines := strings.Split(s[start:end], "\n")
	n := 0
	for i, l := range lines {
		if !strings.Contains(l, "# DS:") {
			continue
		}
		l = strings.ReplaceAll(l, `cg.txn.*"`, `cg.txn.`+ds+`"`)
		l = strings.ReplaceAll(l, "cg.dec.*.", "cg.dec."+ds+".")
		lines[i] = l
		n++
	}
	if n == 0 {
		t.Fatal("accounts.conf: no DS-marked subject in the worker block")
	}
	out := filepath.Join(t.TempDir(), "accounts.conf")
	if err := os.WriteFile(out, []byte(s[:start]+strings.Join(lines, "\n")+s[end:]), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestNarrowedWorkerIsolation narrows the worker to "orders" and checks
// that it works there and is refused, at once and typed, everything of
// "users" that subject permissions scope, and cannot delete the durable
// consumer a reader keeps on "users".
func TestNarrowedWorkerIsolation(t *testing.T) {
	roles := natstest.RunWithAccounts(t, narrowWorker(t, "orders"))
	cm, err := committer.New(roles.Connect(t, "committer"), committer.Config{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DiscoverEvery: 20 * time.Millisecond, TakeoverOnStart: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	cctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cm.Run(cctx) }()
	t.Cleanup(func() { stop(); <-done })
	waitFor(t, 60*time.Second, "the committer", cm.Ready)

	createDataset(t, roles.Connect(t, "admin"), "users")
	createDataset(t, roles.Connect(t, "worker"), "orders") // its own dataset: fine

	// A reader keeps a durable subscriber on users.
	rnc := roles.Connect(t, "reader")
	sub, err := events.NewSubscriber(rnc, events.Config{Dataset: "users", Durable: "audit", From: 1})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(t.Context())
	err = sub.Run(sctx, func(context.Context, *events.Committed) error { scancel(); return nil })
	if err != nil {
		t.Fatal(err)
	}

	wnc := roles.Connect(t, "worker")
	w, err := producer.New(wnc, producer.Config{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	refused := func(what string, err error, ctx context.Context) {
		t.Helper()
		if !errors.Is(err, natsperm.ErrPermission) || ctx.Err() != nil {
			t.Errorf("narrowed worker, %s: %v, want ErrPermission at once", what, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err = w.Commit(ctx, producer.Create("users", idFields()))
	refused("commit to users", err, ctx)
	_, err = w.Latest(ctx, "users")
	refused("read users", err, ctx)
	wsub, err := events.NewSubscriber(wnc, events.Config{Dataset: "users", From: 1})
	if err != nil {
		t.Fatal(err)
	}
	refused("follow users", wsub.Run(ctx, func(context.Context, *events.Committed) error { return nil }), ctx)

	js, err := jetstream.New(wnc)
	if err != nil {
		t.Fatal(err)
	}
	gctx, gdone := natsperm.For(wnc).Guard(ctx)
	refused("delete the reader's durable", gdone(js.DeleteConsumer(gctx, "CG_DEC", "audit")), ctx)
	ajs, err := jetstream.New(roles.Connect(t, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ajs.Consumer(ctx, "CG_DEC", "audit"); err != nil {
		t.Errorf("the reader's durable is gone: %v", err)
	}
}
