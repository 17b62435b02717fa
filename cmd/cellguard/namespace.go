package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"cellguard/internal/declog"
	"cellguard/internal/namespace"
)

// namespaceFlags are serve's flags for the Lance REST namespace.
type namespaceFlags struct {
	addr       *string
	tokens     *string
	creds      *string
	adminCreds *string
}

func registerNamespaceFlags(fs *flag.FlagSet) namespaceFlags {
	return namespaceFlags{
		addr: fs.String("lance-namespace", envOr("CELLGUARD_LANCE_NAMESPACE", ""),
			"serve the Lance REST namespace (managed versioning) for LanceDB clients on HOST:PORT (needs --lance-root)"),
		tokens: fs.String("namespace-tokens", envOr("CELLGUARD_NAMESPACE_TOKENS", ""),
			"file of `<role> <token> <datasets>` lines (role admin, worker or reader; datasets * or a,b) for the namespace (empty: no authentication, and no table drops)"),
		creds: fs.String("namespace-creds", envOr("CELLGUARD_NAMESPACE_CREDS", ""),
			"NATS credentials of a worker-role user the namespace stages transactions as (default: the embedded server's worker user, else --creds)"),
		adminCreds: fs.String("namespace-admin-creds", envOr("CELLGUARD_NAMESPACE_ADMIN_CREDS", ""),
			"NATS credentials of an admin-role user the namespace drops tables as (default: the embedded server's admin user; without either, dropping a created table is refused)"),
	}
}

// startNamespace binds the namespace's address and serves it beside the
// committer until ctx ends or the returned stop is called. Bad flags and
// an address that cannot be bound are errors at start; the decision log
// (which the committer creates) is waited for in the background.
//
// The namespace stages transactions as a worker (the committer's user may
// not publish on cg.txn.*): it connects with --namespace-creds, or the
// embedded server's worker credentials (embedded.worker), or cf's. It
// drops tables as an admin (only the admin role may write a dataset's
// tombstone), on a second connection with --namespace-admin-creds or the
// embedded server's admin credentials; with neither it has no admin
// connection and refuses to drop created tables.
func startNamespace(ctx context.Context, f namespaceFlags, lanceRoot string, publishing bool, cf connFlags, embedded namespaceCreds, reg prometheus.Registerer, log *slog.Logger) (stop func(), err error) {
	if *f.addr == "" {
		if *f.tokens != "" || *f.creds != "" || *f.adminCreds != "" {
			return nil, usageError{"--namespace-tokens, --namespace-creds and --namespace-admin-creds need --lance-namespace"}
		}
		return func() {}, nil
	}
	if lanceRoot == "" {
		return nil, usageError{"--lance-namespace needs --lance-root: tables live at <lance-root>/<table>.lance"}
	}
	if !publishing {
		return nil, usageError{"--lance-namespace needs --publish: a version is answered once it is in storage"}
	}
	var tokens *namespace.Tokens
	if *f.tokens != "" {
		if tokens, err = namespace.LoadTokens(*f.tokens); err != nil {
			return nil, err
		}
	}
	conns, err := connectNamespace(f, cf, embedded)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", *f.addr)
	if err != nil {
		conns.close()
		return nil, fmt.Errorf("lance namespace: %w", err)
	}
	scope := listenScope(ln.Addr())
	log.Info("lance namespace listening", "addr", ln.Addr().String(), "on", scope, "auth", tokens != nil, "drops", conns.admin != nil && tokens != nil)
	if w := namespaceWarning(scope, tokens != nil); w != "" {
		log.Warn(w)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer ln.Close()
		defer conns.close()
		if err := runNamespace(ctx, ln, lanceRoot, tokens, conns, cf.prefix, reg, log); err != nil && ctx.Err() == nil {
			log.Error("lance namespace stopped", "err", err)
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}, nil
}

// listenScope says who can reach a listener: "loopback" (this machine
// only), "all interfaces" (an unspecified address, as `:PORT` binds) or
// "non-loopback address <ip>".
func listenScope(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	switch {
	case !ok:
		return "address " + a.String()
	case ta.IP.IsLoopback():
		return "loopback"
	case ta.IP == nil || ta.IP.IsUnspecified():
		return "all interfaces"
	}
	return "non-loopback address " + ta.IP.String()
}

// namespaceWarning is what serve warns about the namespace's exposure:
// without tokens anyone who reaches it may read and commit every table,
// which beyond loopback means anyone on the network.
func namespaceWarning(scope string, auth bool) string {
	switch {
	case !auth && scope != "loopback":
		return "the Lance namespace serves without authentication on " + scope + ": anyone who reaches it may read and commit every table; bind 127.0.0.1:PORT or give --namespace-tokens (it drops no created table without tokens)"
	case !auth:
		return "the Lance namespace serves without authentication (no --namespace-tokens), on loopback only; it drops no created table"
	case scope != "loopback":
		return "the Lance namespace listens on " + scope + " over plain HTTP: tokens cross the network unencrypted; put TLS in front of it or bind 127.0.0.1:PORT"
	}
	return ""
}

// namespaceCreds are the embedded server's seed files the namespace
// connects with ("" without the embedded server).
type namespaceCreds struct{ worker, admin string }

// namespaceConns are the namespace's NATS connections: a worker's, and an
// admin's (nil: none configured).
type namespaceConns struct{ worker, admin *nats.Conn }

func (c namespaceConns) close() {
	c.worker.Close()
	if c.admin != nil {
		c.admin.Close()
	}
}

func connectNamespace(f namespaceFlags, cf connFlags, embedded namespaceCreds) (namespaceConns, error) {
	var conns namespaceConns
	wf := cf
	switch {
	case *f.creds != "":
		wf.creds = *f.creds
	case embedded.worker != "":
		wf.creds = embedded.worker
	}
	nc, err := wf.connect("cellguard-namespace")
	if err != nil {
		return conns, fmt.Errorf("lance namespace: %w", err)
	}
	conns.worker = nc
	af := cf
	switch {
	case *f.adminCreds != "":
		af.creds = *f.adminCreds
	case embedded.admin != "":
		af.creds = embedded.admin
	default:
		return conns, nil
	}
	if conns.admin, err = af.connect("cellguard-namespace-admin"); err != nil {
		nc.Close()
		return namespaceConns{}, fmt.Errorf("lance namespace: admin connection: %w", err)
	}
	return conns, nil
}

func runNamespace(ctx context.Context, ln net.Listener, lanceRoot string, tokens *namespace.Tokens, conns namespaceConns, prefix string, reg prometheus.Registerer, log *slog.Logger) error {
	js, l, err := declog.OpenWhenReady(ctx, conns.worker, prefix)
	if err != nil {
		return err
	}
	var admin *namespace.Admin
	if conns.admin != nil {
		ajs, al, err := declog.OpenWhenReady(ctx, conns.admin, prefix)
		if err != nil {
			return err
		}
		admin = &namespace.Admin{JetStream: ajs, Log: al}
	}
	s, err := namespace.New(namespace.Config{
		Log: l, JetStream: js, LanceRoot: lanceRoot, Tokens: tokens, Admin: admin, Logger: log.With("component", "namespace"), Registerer: reg,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	return namespace.Serve(ctx, ln, s)
}
