package committer

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/credgen"
)

// TestDeployPermissions loads deploy/nats/accounts.conf into a real server
// and proves the role split: the committer runs, a worker can stage and
// read decisions but cannot append to the decision log.
func TestDeployPermissions(t *testing.T) {
	keys, err := credgen.Nkeys(t.TempDir(), credgen.Roles)
	if err != nil {
		t.Fatal(err)
	}
	for role, k := range keys {
		t.Setenv("CELLGUARD_"+strings.ToUpper(role)+"_NKEY", k.Public)
	}
	accounts, err := os.ReadFile("../deploy/nats/accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), accounts, 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "n.conf")
	body := "listen: 127.0.0.1:-1\nmax_payload: 8MB\njetstream { store_dir: \"" + filepath.Join(dir, "js") + "\" }\ninclude ./accounts.conf\n"
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	url := srv.ClientURL()

	cfg := testConfig()
	start(t, url, cfg, nkeyOpt(t, keys["committer"].SeedFile))

	wnc, err := nats.Connect(url, nkeyOpt(t, keys["worker"].SeedFile), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
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

func nkeyOpt(t *testing.T, seedFile string) nats.Option {
	t.Helper()
	o, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
