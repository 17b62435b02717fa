package embedded

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"cellguard/deploy"
	"cellguard/internal/credgen"
	"cellguard/internal/natsconn"
)

// Start starts the in-process JetStream server of `serve` and `demo`:
// file store under dataDir, listening on loopback only, with the same
// accounts and roles as a production cluster (deploy/nats/accounts.conf).
// Each role's nkey seed is generated on first start under dataDir/creds
// (mode 0600) and kept; an anonymous client is refused. sync is when the
// file store reaches the disk (always, unless the operator opted out).
// The server's warnings and errors go to log.
func Start(dataDir string, port int, sync SyncPolicy, log *slog.Logger) (*Server, error) {
	credsDir := filepath.Join(dataDir, "creds")
	keys, err := credgen.Nkeys(credsDir, credgen.Roles)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	pub := map[string]string{}
	for role, k := range keys {
		pub[role] = k.Public
	}
	accounts, err := deploy.Accounts(pub)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	confDir := filepath.Join(dataDir, "nats")
	if err := os.MkdirAll(confDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	conf := filepath.Join(confDir, "embedded.conf")
	if err := os.WriteFile(filepath.Join(confDir, "accounts.conf"), []byte(accounts), 0o600); err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	if err := os.WriteFile(conf, []byte("include ./accounts.conf\n"), 0o600); err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	opts.ServerName, opts.Host, opts.Port = "cellguard-embedded", "127.0.0.1", port
	opts.JetStream, opts.StoreDir = true, filepath.Join(dataDir, "jetstream")
	opts.NoSigs, opts.NoLog, opts.MaxPayload = true, true, 8<<20
	opts.JetStreamLimits = server.JSLimitOpts{DefaultMaxConsumers: -1}
	sync.Apply(opts)
	s, err := startServer(opts, log)
	if err != nil {
		return nil, err
	}
	log.Info("embedded NATS JetStream running", "url", s.ClientURL(), "store", opts.StoreDir, "sync", sync.String())
	log.Info("embedded NATS credentials: one nkey seed file per role (cellguard commands here use admin.nk)", "dir", credsDir)
	return &Server{Server: s, keys: keys}, nil
}

// Server is the embedded server and its roles' seed files.
type Server struct {
	*server.Server
	keys map[string]credgen.Nkey
}

// Creds returns the seed file of role.
func (e *Server) Creds(role string) string { return e.keys[role].SeedFile }

// Connect dials the embedded server as role.
func (e *Server) Connect(role, name string) (*nats.Conn, error) {
	return natsconn.Config{URL: e.ClientURL(), Creds: e.Creds(role)}.Connect(name)
}

// StartNoAuth starts an embedded server without accounts: only `bench`, which
// measures raw JetStream in a temporary directory, uses it. The server's
// warnings and errors go to log.
func StartNoAuth(dataDir string, port int, sync SyncPolicy, log *slog.Logger) (*server.Server, error) {
	opts := &server.Options{
		ServerName: "cellguard-bench", Host: "127.0.0.1", Port: port, JetStream: true,
		StoreDir: filepath.Join(dataDir, "jetstream"), NoSigs: true, NoLog: true, MaxPayload: 8 << 20,
		JetStreamLimits: server.JSLimitOpts{DefaultMaxConsumers: -1},
	}
	sync.Apply(opts)
	return startServer(opts, log)
}

// startServer starts a server of opts whose warnings and errors go to log.
func startServer(opts *server.Options, log *slog.Logger) (*server.Server, error) {
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	s.SetLogger(serverLog{log}, false, false)
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after 30s")
	}
	if !s.JetStreamEnabled() {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats: JetStream failed to start (store %s)", opts.StoreDir)
	}
	return s, nil
}
