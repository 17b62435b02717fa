// Package loopback starts in-process JetStream servers on loopback: one
// node, or an n-node cluster whose client and route ports are drawn at
// start-up. It returns errors rather than failing a test, so that both
// natstest (for tests) and `cellguard bench -cluster 3` (a command) start
// servers the same way.
//
//	c, err := loopback.StartCluster(dir, 3)
//	if err != nil { ... }
//	defer c.Shutdown()
//	if err := c.WaitReady(ctx); err != nil { ... }
//	nc, err := nats.Connect(c.URLs())
package loopback

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrNotReady reports a server or cluster that did not become ready in time.
var ErrNotReady = errors.New("loopback: not ready")

// Options returns the options of one JetStream node on loopback with its
// file store in storeDir and a client port drawn at start.
func Options(storeDir string) *server.Options {
	return &server.Options{
		ServerName:         "n1",
		Host:               "127.0.0.1",
		Port:               -1,
		JetStream:          true,
		StoreDir:           storeDir,
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  8 << 30,
		NoLog:              true,
		NoSigs:             true,
		MaxPayload:         8 << 20,
		JetStreamLimits:    server.JSLimitOpts{DefaultMaxConsumers: -1},
	}
}

// Start starts a server with opts and waits until it accepts clients with
// JetStream enabled.
func Start(opts *server.Options) (*server.Server, error) {
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("loopback: new server %s: %w", opts.ServerName, err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return nil, fmt.Errorf("%w: server %s accepts no clients", ErrNotReady, opts.ServerName)
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		return nil, fmt.Errorf("%w: server %s started without JetStream", ErrNotReady, opts.ServerName)
	}
	return srv, nil
}

// ClusterOptions returns the options of the n nodes of a cluster named
// name, node i storing in storeDir(i), with client and route ports drawn
// now (held until all are drawn, so none is handed out twice).
func ClusterOptions(name string, n int, storeDir func(i int) string) ([]*server.Options, error) {
	if n < 1 {
		return nil, fmt.Errorf("loopback: cluster of %d nodes", n)
	}
	ports, err := FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := 0; i < n; i++ {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
	}
	var all []*server.Options
	for i := 0; i < n; i++ {
		o := Options(storeDir(i))
		o.ServerName = fmt.Sprintf("n%d", i+1)
		o.Port = ports[i]
		o.Cluster = server.ClusterOpts{Name: name, Host: "127.0.0.1", Port: ports[n+i]}
		o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		all = append(all, o)
	}
	return all, nil
}

// Cluster is an n-node cluster started by StartCluster.
type Cluster struct {
	Servers []*server.Server
}

// StartCluster starts an n-node cluster with node i's store in
// dir/n<i+1>, and returns once every node accepts clients (the cluster
// may still be electing its JetStream meta leader: see WaitReady).
func StartCluster(dir string, n int) (*Cluster, error) {
	opts, err := ClusterOptions("loopback", n, func(i int) string { return filepath.Join(dir, fmt.Sprintf("n%d", i+1)) })
	if err != nil {
		return nil, err
	}
	c := &Cluster{}
	for _, o := range opts {
		s, err := Start(o)
		if err != nil {
			c.Shutdown()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
	}
	return c, nil
}

// URLs returns the comma-separated client URLs of all nodes.
func (c *Cluster) URLs() string {
	var u []string
	for _, s := range c.Servers {
		u = append(u, s.ClientURL())
	}
	return strings.Join(u, ",")
}

// Shutdown stops every node and waits for their stores to flush.
func (c *Cluster) Shutdown() {
	for _, s := range c.Servers {
		s.Shutdown()
	}
	for _, s := range c.Servers {
		s.WaitForShutdown()
	}
}

// WaitReady waits until the JetStream API answers through some node (the
// cluster has a meta leader), or ctx ends.
func (c *Cluster) WaitReady(ctx context.Context) error {
	for {
		for _, s := range c.Servers {
			if s.Running() && JetStreamReady(s.ClientURL()) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: cluster has no JetStream meta leader: %w", ErrNotReady, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// JetStreamReady reports whether the JetStream API answers at url.
func JetStreamReady(url string) bool {
	nc, err := nats.Connect(url, nats.Timeout(time.Second))
	if err != nil {
		return false
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err == nil
}

// FreePorts draws n distinct loopback ports, holding every listener until
// all are drawn so none is handed out twice.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("loopback: draw port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
