package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"cellguard/internal/natsconn"
)

// defaultClientURL is where client commands look for a server when
// neither a flag, NATS_URL nor a context names one.
const defaultClientURL = "nats://127.0.0.1:4222"

// connFlags are the flags every command that talks to NATS shares. They
// follow the nats CLI: -s/--server (env NATS_URL), --creds, --context,
// --tlscert/--tlskey/--tlsca; cellguard's older spellings (--nats-url,
// --tls-cert, …, env CELLGUARD_*) still work.
type connFlags struct {
	url, creds, tlsCert, tlsKey, tlsCA, prefix string
	context, inbox                             string
	defaultURL                                 string
}

func (c *connFlags) register(fs *flag.FlagSet, defaultURL string) {
	c.defaultURL = envOr("CELLGUARD_NATS_URL", envOr("NATS_URL", defaultURL))
	const urlHelp = "NATS server URL(s), comma-separated (env NATS_URL or CELLGUARD_NATS_URL); put no password in it, use --creds"
	for _, name := range []string{"s", "server", "nats-url"} {
		fs.StringVar(&c.url, name, c.defaultURL, urlHelp)
	}
	fs.StringVar(&c.creds, "creds", os.Getenv("CELLGUARD_NATS_CREDS"), "NATS credentials: a user .creds file or an nkey seed file (env CELLGUARD_NATS_CREDS)")
	fs.StringVar(&c.context, "context", "", "a nats CLI context: a name in ~/.config/nats/context/ or a .json path (flags given override it)")
	for _, name := range []string{"tlscert", "tls-cert"} {
		fs.StringVar(&c.tlsCert, name, os.Getenv("CELLGUARD_TLS_CERT"), "client TLS certificate, with --tlskey (env CELLGUARD_TLS_CERT)")
	}
	for _, name := range []string{"tlskey", "tls-key"} {
		fs.StringVar(&c.tlsKey, name, os.Getenv("CELLGUARD_TLS_KEY"), "client TLS key, with --tlscert (env CELLGUARD_TLS_KEY)")
	}
	for _, name := range []string{"tlsca", "tls-ca"} {
		fs.StringVar(&c.tlsCA, name, os.Getenv("CELLGUARD_TLS_CA"), "CA bundle to verify the server (env CELLGUARD_TLS_CA)")
	}
	fs.StringVar(&c.prefix, "prefix", envOr("CELLGUARD_PREFIX", "cg"), "subject prefix (env CELLGUARD_PREFIX)")
	fs.StringVar(&c.inbox, "inbox-prefix", os.Getenv("CELLGUARD_INBOX_PREFIX"), "inbox prefix of this user's replies (default: _INBOX_<public nkey of --creds>, the one the shipped accounts allow; env CELLGUARD_INBOX_PREFIX)")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// config returns the connection settings: the flags, then the context
// file for whatever the flags leave unset.
func (c *connFlags) config() (natsconn.Config, error) {
	cfg := natsconn.Config{URL: c.url, Creds: c.creds, TLSCert: c.tlsCert, TLSKey: c.tlsKey, TLSCA: c.tlsCA, InboxPrefix: c.inbox}
	if c.context == "" {
		return cfg, nil
	}
	nc, err := natsconn.LoadContext(c.context)
	if err != nil {
		return cfg, err
	}
	if c.url == c.defaultURL && nc.URL != "" {
		cfg.URL = nc.URL
	}
	fill := func(dst *string, v string) {
		if *dst == "" {
			*dst = v
		}
	}
	fill(&cfg.Creds, nc.Creds)
	fill(&cfg.TLSCert, nc.TLSCert)
	fill(&cfg.TLSKey, nc.TLSKey)
	fill(&cfg.TLSCA, nc.TLSCA)
	fill(&cfg.InboxPrefix, nc.InboxPrefix)
	cfg.User, cfg.Password, cfg.Token = nc.User, nc.Password, nc.Token
	return cfg, nil
}

// redactedURL is the server list as it may appear in logs and messages.
func (c *connFlags) redactedURL() string { return natsconn.Redact(c.url) }

// connect dials the configured server with endless reconnects. Without
// --creds it uses the admin seed of the local embedded server's data
// directory (CELLGUARD_DATA_DIR, default ./cellguard-data) when there is
// one, so that commands on the machine that runs `serve` just work.
func (c *connFlags) connect(name string) (*nats.Conn, error) {
	cfg, err := c.config()
	if err != nil {
		return nil, err
	}
	var local bool // cfg.Creds is the data directory's seed, not given
	if cfg.Creds == "" && cfg.User == "" && cfg.Token == "" && natsconn.Loopback(cfg.URL) {
		cfg.Creds = localCreds("admin")
		local = cfg.Creds != ""
	}
	nc, err := cfg.Connect(name)
	if errors.Is(err, natsconn.ErrAuthorization) && cfg.User == "" && cfg.Token == "" && (cfg.Creds == "" || local) {
		return nil, fmt.Errorf("%w (%s)", err, credsHint(cfg.Creds))
	}
	return nc, err
}

// credsHint says where a command's credentials come from, for a refused
// connection that was given none: creds is the data directory's seed it
// tried, or "".
func credsHint(creds string) string {
	dir := envOr("CELLGUARD_DATA_DIR", "./cellguard-data")
	if creds != "" {
		return fmt.Sprintf("no --creds given; tried %s from CELLGUARD_DATA_DIR (%s), which this server refused: pass --creds with a seed or .creds file this server knows", creds, dir)
	}
	return fmt.Sprintf("no --creds given and no %s: pass --creds <serve's data dir>/creds/admin.nk (or another role's seed), or set CELLGUARD_DATA_DIR to serve's --data-dir", filepath.Join(dir, "creds", "admin.nk"))
}

// localCreds returns role's seed file under the default data directory,
// or "" if there is none.
func localCreds(role string) string {
	path := filepath.Join(envOr("CELLGUARD_DATA_DIR", "./cellguard-data"), "creds", role+".nk")
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}
