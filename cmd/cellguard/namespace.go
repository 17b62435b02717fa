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

	"cellguard/internal/namespace"
)

// namespaceFlags are serve's flags for the Lance REST namespace (issue 11).
type namespaceFlags struct {
	addr   *string
	tokens *string
	creds  *string
}

func registerNamespaceFlags(fs *flag.FlagSet) namespaceFlags {
	return namespaceFlags{
		addr: fs.String("lance-namespace", envOr("CELLGUARD_LANCE_NAMESPACE", ""),
			"serve the Lance REST namespace (managed versioning) for LanceDB clients on HOST:PORT (needs --lance-root)"),
		tokens: fs.String("namespace-tokens", envOr("CELLGUARD_NAMESPACE_TOKENS", ""),
			"file of `<role> <token> <datasets>` lines (role worker or reader; datasets * or a,b) for the namespace (empty: no authentication)"),
		creds: fs.String("namespace-creds", envOr("CELLGUARD_NAMESPACE_CREDS", ""),
			"NATS credentials of a worker-role user the namespace stages transactions as (default: the embedded server's worker user, else --creds)"),
	}
}

// startNamespace binds the namespace's address and serves it beside the
// committer until ctx ends or the returned stop is called. Bad flags and
// an address that cannot be bound are errors at start; the decision log
// (which the committer creates) is waited for in the background.
//
// The namespace stages transactions as a worker (the committer's user may
// not publish on cg.txn.*): it connects with --namespace-creds, or the
// embedded server's worker credentials (workerCreds), or cf's.
func startNamespace(ctx context.Context, f namespaceFlags, lanceRoot string, publishing bool, cf connFlags, workerCreds string, reg prometheus.Registerer, log *slog.Logger) (stop func(), err error) {
	if *f.addr == "" {
		if *f.tokens != "" || *f.creds != "" {
			return nil, usageError{"--namespace-tokens and --namespace-creds need --lance-namespace"}
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
	} else {
		log.Warn("the Lance namespace serves without authentication (no --namespace-tokens)")
	}
	switch {
	case *f.creds != "":
		cf.creds = *f.creds
	case workerCreds != "":
		cf.creds = workerCreds
	}
	nc, err := cf.connect("cellguard-namespace")
	if err != nil {
		return nil, fmt.Errorf("lance namespace: %w", err)
	}
	ln, err := net.Listen("tcp", *f.addr)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("lance namespace: %w", err)
	}
	log.Info("lance namespace listening", "addr", ln.Addr().String(), "auth", tokens != nil)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer ln.Close()
		defer nc.Close()
		if err := runNamespace(ctx, ln, lanceRoot, tokens, nc, cf.prefix, reg, log); err != nil && ctx.Err() == nil {
			log.Error("lance namespace stopped", "err", err)
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}, nil
}

func runNamespace(ctx context.Context, ln net.Listener, lanceRoot string, tokens *namespace.Tokens, nc *nats.Conn, prefix string, reg prometheus.Registerer, log *slog.Logger) error {
	js, l, err := openLogWhenReady(ctx, nc, prefix)
	if err != nil {
		return err
	}
	s, err := namespace.New(namespace.Config{
		Log: l, JetStream: js, LanceRoot: lanceRoot, Tokens: tokens, Logger: log.With("component", "namespace"), Registerer: reg,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	return namespace.Serve(ctx, ln, s)
}
