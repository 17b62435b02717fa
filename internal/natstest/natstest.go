// Package natstest starts real, in-process JetStream servers for tests: a
// single node (RunServer) or a 3-node cluster (RunCluster). Servers listen
// on loopback only, on ports drawn at start-up, with their file stores in
// t.TempDir(); t.Cleanup shuts them down. The servers are started by
// the subpackage loopback, which returns errors instead of failing a test,
// for commands (`cellguard bench -cluster 3`) that start them too.
//
// Typical use:
//
//	srv := natstest.RunServer(t)
//	nc, js := natstest.Connect(t, srv.ClientURL())
package natstest

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest/loopback"
)

// Server is one embedded JetStream server. Restart keeps its store
// directory and ports.
type Server struct {
	*server.Server
	opts *server.Options
	log  *serverLog
}

// Option adjusts the server options before start.
type Option func(*server.Options)

// Options returns the options RunServer starts from.
func Options(storeDir string) *server.Options { return loopback.Options(storeDir) }

// RunServer starts a single-node JetStream server with its store in a
// fresh temporary directory.
func RunServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	o := Options(t.TempDir())
	for _, fn := range opts {
		fn(o)
	}
	s := &Server{opts: o, log: newServerLog(t)}
	if err := s.start(); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() error {
	srv, err := loopback.Start(s.opts)
	if err != nil {
		return err
	}
	// Pin the drawn port so a restart comes back at the same address.
	if addr, ok := srv.Addr().(*net.TCPAddr); ok {
		s.opts.Port = addr.Port
	}
	srv.SetLoggerV2(s.log, false, false, false)
	s.Server = srv
	return nil
}

// Stop shuts the server down and waits for its stores to flush. It is safe
// to call on a stopped server.
func (s *Server) Stop() {
	if s.Server == nil {
		return
	}
	s.Shutdown()
	s.WaitForShutdown()
	s.Server = nil
}

// Restart stops the server, if running, and starts it again with the same
// store directory and ports.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	var err error
	for i := 0; i < 20; i++ { // the port may linger briefly
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("natstest: restart: %v", err)
}

// StoreDir returns the JetStream store directory.
func (s *Server) StoreDir() string { return s.opts.StoreDir }

// URL returns the client URL, also while the server is stopped.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.opts.Port) }

// Connect dials url (a comma-separated list for clusters) with endless
// reconnects and returns the connection and its JetStream context; both are
// closed at cleanup.
func Connect(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond), nats.Timeout(2 * time.Second)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("natstest: connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return nc, js
}

// Cluster is an in-process JetStream cluster on loopback.
type Cluster struct {
	Servers []*Server
}

// RunCluster starts an n-node cluster and waits until JetStream has a meta
// leader. Route ports are drawn by holding listeners until all are known.
func RunCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	c := StartCluster(t, n, opts...)
	c.WaitReady(t)
	return c
}

// StartCluster starts an n-node cluster and returns at once, while the
// nodes are still forming it (no meta leader yet): clients that start
// together with the cluster, as in a fresh deployment, see it this way.
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	all, err := loopback.ClusterOptions("cgtest", n, func(int) string { return t.TempDir() })
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	c := &Cluster{}
	log := newServerLog(t)
	for _, o := range all {
		for _, fn := range opts {
			fn(o)
		}
		c.Servers = append(c.Servers, &Server{opts: o, log: log})
	}
	for _, s := range c.Servers {
		if err := s.start(); err != nil {
			t.Fatalf("natstest: %v", err)
		}
		t.Cleanup(s.Stop)
	}
	return c
}

// URLs returns the comma-separated client URLs of all nodes.
func (c *Cluster) URLs() string {
	var u []string
	for _, s := range c.Servers {
		u = append(u, s.URL())
	}
	return strings.Join(u, ",")
}

// WaitReady waits until the JetStream API answers through a running node.
func (c *Cluster) WaitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range c.Servers {
			if s.Server == nil {
				continue
			}
			if loopback.JetStreamReady(s.URL()) {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("natstest: cluster has no JetStream meta leader after 30s")
}

// StreamLeader returns the running node that leads stream (in the global
// account), or nil.
func (c *Cluster) StreamLeader(stream string) *Server {
	for _, s := range c.Servers {
		if s.Server != nil && s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return s
		}
	}
	return nil
}

// WaitStreamLeader waits until some running node leads stream.
func (c *Cluster) WaitStreamLeader(t testing.TB, stream string) *Server {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if s := c.StreamLeader(stream); s != nil {
			return s
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("natstest: stream %s has no leader", stream)
	return nil
}
