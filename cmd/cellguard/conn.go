package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"cellguard/internal/natsconn"
)

// connFlags are the flags every command that talks to NATS shares.
type connFlags struct {
	url, creds, tlsCert, tlsKey, tlsCA, prefix string
}

func (c *connFlags) register(fs *flag.FlagSet, defaultURL string) {
	fs.StringVar(&c.url, "nats-url", envOr("CELLGUARD_NATS_URL", defaultURL), "NATS server URL(s), comma-separated (env CELLGUARD_NATS_URL); put no password in it, use --creds")
	fs.StringVar(&c.creds, "creds", os.Getenv("CELLGUARD_NATS_CREDS"), "NATS credentials: a user .creds file or an nkey seed file (env CELLGUARD_NATS_CREDS)")
	fs.StringVar(&c.tlsCert, "tls-cert", os.Getenv("CELLGUARD_TLS_CERT"), "client TLS certificate, with --tls-key (env CELLGUARD_TLS_CERT)")
	fs.StringVar(&c.tlsKey, "tls-key", os.Getenv("CELLGUARD_TLS_KEY"), "client TLS key, with --tls-cert (env CELLGUARD_TLS_KEY)")
	fs.StringVar(&c.tlsCA, "tls-ca", os.Getenv("CELLGUARD_TLS_CA"), "CA bundle to verify the server (env CELLGUARD_TLS_CA)")
	fs.StringVar(&c.prefix, "prefix", envOr("CELLGUARD_PREFIX", "cg"), "subject prefix (env CELLGUARD_PREFIX)")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func (c *connFlags) config() natsconn.Config {
	return natsconn.Config{URL: c.url, Creds: c.creds, TLSCert: c.tlsCert, TLSKey: c.tlsKey, TLSCA: c.tlsCA}
}

// redactedURL is the server list as it may appear in logs and messages.
func (c *connFlags) redactedURL() string { return natsconn.Redact(c.url) }

// connect dials the configured server with endless reconnects.
func (c *connFlags) connect(name string) (*nats.Conn, error) {
	return c.config().Connect(name)
}

// embedded starts the in-process JetStream server of `serve`: file store
// under dataDir, listening on loopback only.
func embedded(dataDir string, port int, log *slog.Logger) (*server.Server, error) {
	opts := &server.Options{
		ServerName:      "cellguard-embedded",
		Host:            "127.0.0.1",
		Port:            port,
		JetStream:       true,
		StoreDir:        filepath.Join(dataDir, "jetstream"),
		NoSigs:          true,
		NoLog:           true,
		MaxPayload:      8 << 20,
		JetStreamLimits: server.JSLimitOpts{DefaultMaxConsumers: -1},
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready after 30s")
	}
	if !s.JetStreamEnabled() {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats: JetStream failed to start (store %s)", opts.StoreDir)
	}
	log.Info("embedded NATS JetStream running", "url", s.ClientURL(), "store", opts.StoreDir)
	return s, nil
}
