package producer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/natsperm"
	"cellguard/internal/subject"
)

// Defaults of Config.
const (
	DefaultTimeout = 30 * time.Second
	DefaultWindow  = 64
	DefaultMaxScan = 10000
)

// Config configures a Client. The zero value of every field means its
// default.
type Config struct {
	// Prefix is the subject prefix of the deployment (default "cg").
	Prefix string
	// Timeout bounds every call whose ctx has no deadline: reads, Commit's
	// wait for the decision, Outcome (default 30 s).
	Timeout time.Duration
	// Window is how many recent versions of each dataset the client keeps
	// in memory (default 64); older versions are rebuilt from a checkpoint
	// and the decision log on demand.
	Window int
	// MaxScan bounds how many staged messages Outcome inspects to tell a
	// pending transaction from one never staged (default 10000).
	MaxScan int
}

func (c Config) withDefaults() Config {
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.MaxScan <= 0 {
		c.MaxScan = DefaultMaxScan
	}
	return c
}

// Client stages transactions and reads datasets for a worker. It is safe
// for concurrent use by many goroutines.
//
// Every dataset the client has touched has one background goroutine that
// follows its decision log (to hand each Commit its decision and keep the
// latest manifest current); it exits when Close is called.
type Client struct {
	cfg Config
	sc  subject.Scheme
	nc  *nats.Conn
	js  jetstream.JetStream

	mu        sync.Mutex
	dec, txn  jetstream.Stream
	dl        *declog.Log // the decision log over dec, once found
	followers map[string]*follower
	// known is, per dataset, the highest decision-log sequence this
	// client has been told of (a decision Commit or Outcome returned): a
	// later Latest waits until it reads at least that far, so the client
	// never reads a version older than one it committed, even from a
	// leader that lost its quorum and has not noticed yet.
	known    map[string]uint64
	closed   chan struct{}
	isClosed bool
}

// New returns a client that talks to JetStream over nc. It does no I/O;
// the streams are looked up on first use (a committer creates them).
func New(nc *nats.Conn, cfg Config) (*Client, error) {
	sc, err := subject.NewScheme(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	return &Client{cfg: cfg.withDefaults(), sc: sc, nc: nc, js: js, followers: map[string]*follower{}, known: map[string]uint64{}, closed: make(chan struct{})}, nil
}

// Close stops the client's background followers. It does not close the
// connection. Calls in progress end with ErrClosed.
func (c *Client) Close() {
	c.mu.Lock()
	if c.isClosed {
		c.mu.Unlock()
		return
	}
	c.isClosed = true
	close(c.closed)
	fs := c.followers
	c.followers = map[string]*follower{}
	c.mu.Unlock()
	for _, f := range fs {
		f.stop()
	}
}

// Prefix returns the subject prefix of the deployment the client uses.
func (c *Client) Prefix() string { return c.sc.Prefix() }

// Conn returns the client's connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// JetStream returns the client's JetStream context.
func (c *Client) JetStream() jetstream.JetStream { return c.js }

// withTimeout applies the default timeout to a ctx without a deadline.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.cfg.Timeout)
}

// guard makes the server's refusal of a subject the call uses (staging
// to ds, the JetStream API, checkpoints, ds's decisions) end the call at
// once with a *natsperm.Error. A refusal of another call on the same
// connection to the JetStream API can end this one too: the server does
// not say which request it refused, only the subject.
func (c *Client) guard(ctx context.Context, ds string) (context.Context, func(error) error) {
	return natsperm.For(c.nc).Guard(ctx, append([]string{c.sc.Txn(ds), c.sc.DecOf(ds)}, natsperm.JetStream...)...)
}

// streams returns the decision log and staging streams.
func (c *Client) streams(ctx context.Context) (dec, txn jetstream.Stream, err error) {
	c.mu.Lock()
	dec, txn = c.dec, c.txn
	c.mu.Unlock()
	if dec != nil && txn != nil {
		return dec, txn, nil
	}
	if dec, err = c.js.Stream(ctx, c.sc.DecStream()); err != nil {
		return nil, nil, fmt.Errorf("producer: stream %s (is a committer running?): %w", c.sc.DecStream(), err)
	}
	if txn, err = c.js.Stream(ctx, c.sc.TxnStream()); err != nil {
		return nil, nil, fmt.Errorf("producer: stream %s (is a committer running?): %w", c.sc.TxnStream(), err)
	}
	c.mu.Lock()
	if c.dl == nil {
		c.dec, c.txn = dec, txn
		c.dl = declog.New(c.js, c.sc, dec, nil, declog.Options{RequestTimeout: readRequestTimeout})
	}
	dec, txn = c.dec, c.txn
	c.mu.Unlock()
	return dec, txn, nil
}

// follow returns the running follower of ds, starting it if needed.
func (c *Client) follow(ctx context.Context, ds string) (*follower, error) {
	if err := subject.Validate(ds); err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	c.mu.Lock()
	if c.isClosed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	f, ok := c.followers[ds]
	var failed *follower
	if ok && f.failed() {
		// The log could not be followed (undecodable record, lost
		// consumer): start over from the latest version.
		failed, ok = f, false
	}
	if !ok {
		f = newFollower(c, ds)
		c.followers[ds] = f
	}
	c.mu.Unlock()
	if failed != nil {
		failed.stop()
	}
	if err := f.started(ctx); err != nil {
		c.mu.Lock()
		if c.followers[ds] == f {
			delete(c.followers, ds)
		}
		c.mu.Unlock()
		f.stop()
		return nil, err
	}
	return f, nil
}

// done reports ErrClosed once the client is closed.
func (c *Client) done() <-chan struct{} { return c.closed }

// connErr returns an error when the connection can no longer deliver.
func (c *Client) connErr() error {
	if c.nc.IsClosed() {
		return nats.ErrConnectionClosed
	}
	return nil
}

var errStop = errors.New("stop")

// learned records that decision-log sequence seq of ds exists.
func (c *Client) learned(ds string, seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if seq > c.known[ds] {
		c.known[ds] = seq
	}
}

// knownSeq is the highest decision-log sequence of ds this client has
// been told of.
func (c *Client) knownSeq(ds string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.known[ds]
}
