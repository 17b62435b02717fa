package deploy

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"cellguard/committer"
	"cellguard/internal/credgen"
	"cellguard/internal/natsconn"
	"cellguard/internal/natsperm"
	"cellguard/internal/natstest"
)

// secondWorker writes accounts.conf with a second worker user, a copy of
// the worker block with its own nkey and inbox (CELLGUARD_WORKER2_*), as
// the file's header says to add a worker, and returns the path and the
// second worker's key.
func secondWorker(t *testing.T) (string, credgen.Nkey) {
	t.Helper()
	b, err := os.ReadFile("nats/accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "      {\n        nkey: $CELLGUARD_WORKER_NKEY")
	end := strings.Index(s, "      {\n        nkey: $CELLGUARD_READER_NKEY")
	if start < 0 || end < start {
		t.Fatal("accounts.conf: no worker block")
	}
	block := strings.ReplaceAll(s[start:end], "$CELLGUARD_WORKER_", "$CELLGUARD_WORKER2_")
	dir := t.TempDir()
	keys, err := credgen.Nkeys(filepath.Join(dir, "nkeys2"), []string{"worker2"})
	if err != nil {
		t.Fatal(err)
	}
	k := keys["worker2"]
	t.Setenv("CELLGUARD_WORKER2_NKEY", k.Public)
	t.Setenv("CELLGUARD_WORKER2_INBOX", k.Inbox())
	out := filepath.Join(dir, "accounts.conf")
	if err := os.WriteFile(out, []byte(s[:end]+block+s[end:]), 0o600); err != nil {
		t.Fatal(err)
	}
	return out, k
}

// sniffer is a connection trying to read other users' replies: every
// subscription refused is recorded, every message received too.
type sniffer struct {
	nc      *nats.Conn
	mu      sync.Mutex
	refused map[string]bool
	got     map[string]int
}

func newSniffer(t *testing.T, cfg natsconn.Config) *sniffer {
	t.Helper()
	s := &sniffer{refused: map[string]bool{}, got: map[string]int{}}
	nc, err := cfg.Connect("sniffer", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if e, ok := natsperm.Parse(err); ok && e.Op == "subscribe" {
			s.mu.Lock()
			s.refused[e.Subject] = true
			s.mu.Unlock()
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s.nc = nc
	return s
}

func (s *sniffer) listen(t *testing.T, subjects ...string) {
	t.Helper()
	for _, subj := range subjects {
		if _, err := s.nc.Subscribe(subj, func(*nats.Msg) {
			s.mu.Lock()
			s.got[subj]++
			s.mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func (s *sniffer) state(subj string) (refused bool, got int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused[subj], s.got[subj]
}

// TestInboxesArePrivate runs a committer and a worker on the shipped
// accounts (with a second worker user added) and has the second worker,
// the reader and the first worker try to read other users' replies: the
// nats.go default inbox _INBOX.>, the committer's inbox and the first
// worker's. Every such subscription is refused by the server and receives
// nothing, while the same subscriptions by the inboxes' owners see the
// replies the committer's and the worker's requests got.
func TestInboxesArePrivate(t *testing.T) {
	accounts, w2 := secondWorker(t)
	roles := natstest.RunWithAccounts(t, accounts)
	cfg := func(seed string) natsconn.Config {
		return natsconn.Config{URL: roles.Server.ClientURL(), Creds: seed}
	}
	inbox := func(role string) string { return roles.Keys[role].Inbox() }

	// The owners listen to their own inboxes: allowed, and they see replies.
	ownCommitter := newSniffer(t, cfg(roles.Keys["committer"].SeedFile))
	ownCommitter.listen(t, inbox("committer"))
	ownWorker := newSniffer(t, cfg(roles.Keys["worker"].SeedFile))
	ownWorker.listen(t, inbox("worker"))

	others := map[string]*sniffer{
		"worker2": newSniffer(t, cfg(w2.SeedFile)),
		"reader":  newSniffer(t, cfg(roles.Keys["reader"].SeedFile)),
		"worker":  newSniffer(t, cfg(roles.Keys["worker"].SeedFile)),
	}
	targets := map[string][]string{
		"worker2": {"_INBOX.>", inbox("committer"), inbox("worker"), ">"},
		"reader":  {"_INBOX.>", inbox("committer"), inbox("worker")},
		"worker":  {"_INBOX.>", inbox("committer"), w2.Inbox()},
	}
	for who, s := range others {
		s.listen(t, targets[who]...)
	}

	cnc, err := cfg(roles.Keys["committer"].SeedFile).Connect("committer")
	if err != nil {
		t.Fatal(err)
	}
	defer cnc.Close()
	if p := cnc.Opts.InboxPrefix; p != natsconn.InboxPrefix(roles.Keys["committer"].Public) {
		t.Fatalf("committer connection inbox prefix %q", p)
	}
	cm, err := committer.New(cnc, committer.Config{
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

	wnc, err := cfg(roles.Keys["worker"].SeedFile).Connect("worker")
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	createDataset(t, wnc, "orders") // the SDK, with the worker's prefix, commits
	w2nc, err := cfg(w2.SeedFile).Connect("worker2")
	if err != nil {
		t.Fatal(err)
	}
	defer w2nc.Close()
	createDataset(t, w2nc, "users") // so does the second worker

	waitFor(t, 30*time.Second, "the owners to see their replies", func() bool {
		_, c := ownCommitter.state(inbox("committer"))
		_, w := ownWorker.state(inbox("worker"))
		return c > 0 && w > 0
	})
	for who, subjects := range targets {
		for _, subj := range subjects {
			waitFor(t, 30*time.Second, who+"'s subscription to "+subj+" to be refused", func() bool {
				r, _ := others[who].state(subj)
				return r
			})
			if _, got := others[who].state(subj); got != 0 {
				t.Errorf("%s read %d replies on %s", who, got, subj)
			}
		}
	}
	if r, _ := ownCommitter.state(inbox("committer")); r {
		t.Error("the committer's own inbox was refused")
	}
	_, c := ownCommitter.state(inbox("committer"))
	_, w := ownWorker.state(inbox("worker"))
	t.Logf("owners saw %d committer and %d worker replies; no other user's subscription was allowed", c, w)
}
