package natstest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"cellguard/internal/credgen"
	"cellguard/internal/natsconn"
)

// Roles is a server started with a NATS accounts file whose users are the
// cellguard roles' nkeys (deploy/nats/accounts.conf): Connect dials as
// one of them.
type Roles struct {
	Server *server.Server
	Keys   map[string]credgen.Nkey
}

// RunWithAccounts starts a single JetStream node on loopback that includes
// the accounts file at accountsPath, with a fresh nkey per role in the
// environment (CELLGUARD_ROLE_NKEY), as the shipped cluster configs do.
func RunWithAccounts(t *testing.T, accountsPath string) *Roles {
	t.Helper()
	dir := t.TempDir()
	keys, err := credgen.Nkeys(filepath.Join(dir, "nkeys"), credgen.Roles)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	for role, k := range keys {
		t.Setenv("CELLGUARD_"+strings.ToUpper(role)+"_NKEY", k.Public)
		t.Setenv("CELLGUARD_"+strings.ToUpper(role)+"_INBOX", k.Inbox())
	}
	return &Roles{Server: serveAccounts(t, dir, accountsPath), Keys: keys}
}

// RunWithTenants starts a single JetStream node on loopback that includes
// the accounts file at accountsPath, whose accounts are tenants (see
// deploy/nats/tenants.conf): the nkey of role R of tenant T comes from
// the environment as T_R_NKEY (upper case), the system user's as
// CELLGUARD_SYSTEM_NKEY. It returns each tenant's roles on the one server.
func RunWithTenants(t *testing.T, accountsPath string, tenants ...string) map[string]*Roles {
	t.Helper()
	dir := t.TempDir()
	sys, err := credgen.Nkeys(filepath.Join(dir, "nkeys"), []string{"system"})
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Setenv("CELLGUARD_SYSTEM_NKEY", sys["system"].Public)
	out := map[string]*Roles{}
	for _, tenant := range tenants {
		keys, err := credgen.Nkeys(filepath.Join(dir, "nkeys", tenant), []string{"committer", "worker", "reader", "admin"})
		if err != nil {
			t.Fatalf("natstest: %v", err)
		}
		for role, k := range keys {
			t.Setenv(strings.ToUpper(tenant+"_"+role)+"_NKEY", k.Public)
			t.Setenv(strings.ToUpper(tenant+"_"+role)+"_INBOX", k.Inbox())
		}
		out[tenant] = &Roles{Keys: keys}
	}
	srv := serveAccounts(t, dir, accountsPath)
	for _, r := range out {
		r.Server = srv
	}
	return out
}

// serveAccounts starts a node in dir that includes a copy of the
// accounts file at accountsPath; the nkeys it names must be in the
// environment.
func serveAccounts(t *testing.T, dir, accountsPath string) *server.Server {
	t.Helper()
	accounts, err := os.ReadFile(accountsPath)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), accounts, 0o600); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	conf := filepath.Join(dir, "n.conf")
	body := "listen: 127.0.0.1:-1\nmax_payload: 8MB\njetstream { store_dir: \"" + filepath.Join(dir, "js") +
		"\", limits { default_max_consumers: -1 } }\ninclude ./accounts.conf\n"
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("natstest: %s: %v", accountsPath, err)
	}
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("natstest: server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv
}

// Auth returns the option that authenticates as role, with the role's
// own inbox prefix (the only inbox its permissions allow).
func (r *Roles) Auth(t testing.TB, role string) nats.Option {
	t.Helper()
	k, ok := r.Keys[role]
	if !ok {
		t.Fatalf("natstest: no role %q", role)
	}
	o, err := nats.NkeyOptionFromSeed(k.SeedFile)
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	inbox := nats.CustomInboxPrefix(natsconn.InboxPrefix(k.Public))
	return func(opts *nats.Options) error {
		if err := o(opts); err != nil {
			return err
		}
		return inbox(opts)
	}
}

// Connect dials the server as role; the connection closes at cleanup.
// Asynchronous errors (permission violations) are not printed.
func (r *Roles) Connect(t testing.TB, role string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{r.Auth(t, role), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})}, opts...)
	nc, err := nats.Connect(r.Server.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("natstest: connect as %s: %v", role, err)
	}
	t.Cleanup(nc.Close)
	return nc
}
