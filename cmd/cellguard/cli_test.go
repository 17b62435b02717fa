package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"cellguard/internal/natstest"
)

// runOut runs a command and returns stdout, stderr and its error.
func runOut(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(t.Context(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

// Help and argument checks work offline: no server runs here, so any
// attempt to connect would fail the command.
func TestHelpAndUsageOffline(t *testing.T) {
	t.Setenv("NATS_URL", "nats://127.0.0.1:1") // nothing listens there
	out, _, err := runOut(t, "dataset", "-h")
	if err != nil || !strings.Contains(out, "verbs:") {
		t.Errorf("dataset -h: %v\n%s", err, out)
	}
	_, stderr, err := runOut(t, "dataset", "list", "-h")
	if !errors.Is(err, flag.ErrHelp) || strings.Contains(stderr, "-schema") || !strings.Contains(stderr, "usage: cellguard dataset list") {
		t.Errorf("dataset list -h: %v\n%s", err, stderr)
	}
	_, stderr, err = runOut(t, "dataset", "create", "-h")
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr, "-schema") || !strings.Contains(stderr, "-tlscert") {
		t.Errorf("dataset create -h: %v\n%s", err, stderr)
	}
	_, stderr, err = runOut(t, "dataset", "delete", "-h")
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr, "-force") || !strings.Contains(stderr, "-purge-data") || strings.Contains(stderr, "-schema") {
		t.Errorf("dataset delete -h: %v\n%s", err, stderr)
	}
	for _, args := range [][]string{{"dataset", "delete"}, {"dataset", "delete", "a.b"}, {"dataset", "delete", "a", "b"}} {
		var ue usageError
		if _, _, err := runOut(t, args...); !errors.As(err, &ue) {
			t.Errorf("%v: %v, want a usage error before connecting", args, err)
		}
	}
	_, stderr, err = runOut(t, "txn", "inspect", "-h")
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr, "usage: cellguard txn inspect") {
		t.Errorf("txn inspect -h: %v\n%s", err, stderr)
	}
	out, _, err = runOut(t, "--version")
	if err != nil || !strings.HasPrefix(out, "cellguard ") {
		t.Errorf("--version: %v %q", err, out)
	}
	for _, schema := range []string{"id:int65", "x:double??", "a:int64,a:double", "id", ""} {
		_, _, err := runOut(t, "dataset", "create", "ds", "--schema", schema)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("schema %q: %v, want a usage error before connecting", schema, err)
		}
	}
	_, _, err = runOut(t, "dataset", "list", "--tls-key", "k.pem")
	if err == nil || !strings.Contains(err.Error(), "needs --tls-cert") {
		t.Errorf("--tls-key alone: %v", err)
	}
	for _, args := range [][]string{{"dataset", "show"}, {"dataset", "list", "extra"}, {"dataset", "nosuchverb"}, {"events", "tail"}} {
		var ue usageError
		if _, _, err := runOut(t, args...); !errors.As(err, &ue) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// The connection conventions of the nats CLI: NATS_URL, -s, and a nats
// CLI context file with an nkey seed; `dataset log` of an unknown dataset
// fails.
func TestNATSConventions(t *testing.T) {
	roles := natstest.RunWithAccounts(t, "../../deploy/nats/accounts.conf")
	runCommitter(t, roles)
	url := roles.Server.ClientURL()
	admin := roles.Keys["admin"].SeedFile

	t.Setenv("NATS_URL", url)
	if out, _, err := runOut(t, "dataset", "create", "orders", "--schema", "id:int64,v:fixed_size_list:float:4?", "--creds", admin); err != nil {
		t.Fatalf("create with NATS_URL: %v\n%s", err, out)
	}
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	if out, _, err := runOut(t, "dataset", "list", "-s", url, "--creds", admin); err != nil || !strings.Contains(out, "orders") {
		t.Errorf("list with -s: %v\n%s", err, out)
	}
	ctxFile := filepath.Join(t.TempDir(), "cg.json")
	body, _ := json.Marshal(map[string]string{"url": url, "nkey": roles.Keys["reader"].SeedFile, "description": "test"})
	if err := os.WriteFile(ctxFile, body, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, err := runOut(t, "dataset", "show", "orders", "--context", ctxFile); err != nil || !strings.Contains(out, "version 1") {
		t.Errorf("show with --context: %v\n%s", err, out)
	}
	if _, _, err := runOut(t, "dataset", "log", "nosuch", "--context", ctxFile); err == nil {
		t.Error("dataset log nosuch succeeded")
	}
	// The context's reader may not create: refused, typed, at once.
	if _, _, err := runOut(t, "dataset", "create", "more", "--schema", "id:int64", "--context", ctxFile); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("create as the context's reader: %v", err)
	}
}

// TestNoCredsHint: a command refused by a server with accounts, given no
// --creds, says where credentials come from (--creds,
// CELLGUARD_DATA_DIR) — when it found no seed in the data directory, and
// when the seed it found is not this server's.
func TestNoCredsHint(t *testing.T) {
	roles := natstest.RunWithAccounts(t, "../../deploy/nats/accounts.conf")
	url := roles.Server.ClientURL()
	dir := t.TempDir()
	t.Setenv("CELLGUARD_DATA_DIR", dir)
	_, _, err := runOut(t, "dataset", "list", "-s", url)
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") ||
		!strings.Contains(err.Error(), "--creds") || !strings.Contains(err.Error(), "CELLGUARD_DATA_DIR") {
		t.Errorf("dataset list without credentials: %v; want the authorization violation with a hint naming --creds and CELLGUARD_DATA_DIR", err)
	}

	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	if err := os.MkdirAll(filepath.Join(dir, "creds"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "creds", "admin.nk"), seed, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = runOut(t, "dataset", "list", "-s", url)
	if err == nil || !strings.Contains(err.Error(), "which this server refused") {
		t.Errorf("dataset list with another server's seed in the data directory: %v; want a hint naming it", err)
	}
	_, _, err = runOut(t, "dataset", "list", "-s", url, "--creds", filepath.Join(dir, "creds", "admin.nk"))
	if err == nil || strings.Contains(err.Error(), "CELLGUARD_DATA_DIR") {
		t.Errorf("dataset list with --creds the server refuses: %v; want the refusal without the hint", err)
	}
}

// The flags of bench and demo reach their options, and a bad value is a
// usage error before anything starts.
func TestBenchAndDemoFlags(t *testing.T) {
	_, stderr, err := runOut(t, "bench", "-h")
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr, "usage: cellguard bench") || !strings.Contains(stderr, `(default 1,8,64,256)`) {
		t.Errorf("bench -h: %v\n%s", err, stderr)
	}
	for _, args := range [][]string{
		{"-cluster", "0"}, {"-rounds", "101"}, {"-batches", "0"}, {"-preconditions", "-1"}, {"-txns", "10", "-producers", "11"},
		{"-sync", "never"}, {"-atomic-min", "-1"},
	} {
		var ue usageError
		if _, _, err := runOut(t, append([]string{"bench"}, args...)...); !errors.As(err, &ue) {
			t.Errorf("bench %v: %v, want a usage error", args, err)
		}
	}
	if _, stderr, err := runOut(t, "bench", "-batches", "1,x"); err == nil || !strings.Contains(stderr, `bad number "x"`) {
		t.Errorf("bench -batches 1,x: %v\n%s", err, stderr)
	}
	_, stderr, err = runOut(t, "demo", "-h")
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr, "-crash-worker") || !strings.Contains(stderr, "(default 20s)") {
		t.Errorf("demo -h: %v\n%s", err, stderr)
	}
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"extra"}, {"-fragments", "0"}, {"-update-every", "0s"}, {"-data-dir", full, "-lance-root", t.TempDir()}} {
		var ue usageError
		if _, _, err := runOut(t, append([]string{"demo"}, args...)...); !errors.As(err, &ue) {
			t.Errorf("demo %v: %v, want a usage error", args, err)
		}
	}
}
