package deploy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/committer"
	"cellguard/internal/credgen"
	"cellguard/producer"
	"cellguard/proto/lancepb"
)

// TestShippedClusterRefusesRogue starts n1..n3.conf as a cluster, runs a
// committer and a worker on it, and points rogue nats-servers at its
// routes: one without TLS and one with a certificate of another CA that
// trusts anything. Both are refused at the TLS handshake, so what a client
// of theirs publishes on cg.dec.zzrogue.committed never reaches the
// decision log. A node with a certificate of the deployment's CA joins
// (the control: the test sees a join when there is one).
func TestShippedClusterRefusesRogue(t *testing.T) {
	sh := startShipped(t)
	runCommitter(t, sh)
	createDataset(t, sh.connect(t, "worker"), "orders")

	foreign, err := credgen.TLS(filepath.Join(t.TempDir(), "rogue"), []string{"127.0.0.1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rogues := map[string]*tls.Config{
		"plaintext":  nil,
		"foreign-ca": rogueTLS(t, foreign.Server, foreign.ServerKey),
	}
	for name, tc := range rogues {
		before := handshakeErrors(sh)
		rogue := startRogue(t, sh, tc)
		// The refusal is logged by the cluster's nodes: wait for it.
		waitFor(t, 60*time.Second, name+" rogue's route handshake to fail", func() bool {
			return handshakeErrors(sh) > before
		})
		if n := rogue.NumRoutes(); n != 0 {
			t.Fatalf("%s rogue has %d routes into the cluster", name, n)
		}
		publishOn(t, rogue, "cg.dec.zzrogue.committed")
		rogue.Shutdown()
	}
	for i, s := range sh.servers {
		if n := s.NumRoutes(); n < 2 {
			t.Errorf("n%d lost its routes: %d", i+1, n)
		}
	}
	js, err := jetstream.New(sh.connect(t, "committer"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, "CG_DEC")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.GetLastMsgForSubject(ctx, "cg.dec.zzrogue.>"); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("decision log holds a rogue record (err %v)", err)
	}

	// Control: a server with a certificate of our CA is let in.
	legit := startRogue(t, sh, rogueTLS(t, sh.certs.Server, sh.certs.ServerKey))
	waitFor(t, 60*time.Second, "a node with the deployment's certificate to join", func() bool {
		return legit.NumRoutes() > 0
	})
}

// TestShippedClientAuth checks the client side of the shipped config: no
// client certificate, a certificate of another CA, or no nkey: refused.
func TestShippedClientAuth(t *testing.T) {
	sh := startShipped(t)
	foreign, err := credgen.TLS(filepath.Join(t.TempDir(), "foreign"), []string{"127.0.0.1"}, []string{"worker"})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]func(*natsconfig){
		"no client certificate": func(c *natsconfig) { c.TLSCert, c.TLSKey = "", "" },
		"foreign certificate": func(c *natsconfig) {
			c.TLSCert, c.TLSKey = foreign.Client["worker"], foreign.ClientKey["worker"]
		},
		"no nkey": func(c *natsconfig) { c.Creds = "" },
	}
	for name, edit := range cases {
		c := sh.config("worker")
		edit(&c)
		nc, err := c.Connect("test", nats.NoReconnect(), nats.MaxReconnects(0), nats.RetryOnFailedConnect(false))
		if err == nil {
			nc.Close()
			t.Errorf("%s: connected", name)
		}
	}
	// And the complete set connects.
	sh.connect(t, "reader")
}

func rogueTLS(t *testing.T, cert, key string) *tls.Config {
	t.Helper()
	kp, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	// The rogue trusts anything: any refusal comes from the cluster.
	return &tls.Config{Certificates: []tls.Certificate{kp}, InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}
}

// startRogue starts an open server (no auth, no JetStream) whose routes
// point at the cluster's.
func startRogue(t *testing.T, sh *shipped, tc *tls.Config) *server.Server {
	t.Helper()
	opts := &server.Options{
		ServerName: "zzrogue", Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		Cluster: server.ClusterOpts{Name: "cellguard", Host: "127.0.0.1", Port: -1, TLSConfig: tc, TLSTimeout: 2},
		Routes:  server.RoutesFromStr(strings.Join(sh.routes, ",")),
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("rogue not ready")
	}
	return srv
}

func handshakeErrors(sh *shipped) int {
	n := 0
	for _, l := range sh.logs {
		n += l.count("TLS route handshake error")
	}
	return n
}

func publishOn(t *testing.T, srv *server.Server, subj string) {
	t.Helper()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish(subj, []byte("forged")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// runCommitter runs a committer (R3 streams) as the committer role.
func runCommitter(t *testing.T, sh *shipped) {
	t.Helper()
	nc := sh.connect(t, "committer")
	c, err := committer.New(nc, committer.Config{
		Replicas: 3, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		TakeoverOnStart: true, PinnedTTL: 3 * time.Second, AckWait: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, 120*time.Second, "the committer to be ready", func() bool {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("committer stopped: %v", err)
		default:
		}
		rec := httptest.NewRecorder()
		c.Readyz().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		return rec.Code == 200
	})
}

// createDataset commits a creating transaction through the producer SDK.
func createDataset(t *testing.T, nc *nats.Conn, name string) {
	t.Helper()
	pc, err := producer.New(nc, producer.Config{Timeout: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := pc.Commit(ctx, producer.Create(name, idFields())); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
}

func idFields() []*lancepb.Field {
	return []*lancepb.Field{{Id: 0, Name: "id", ParentId: -1, LogicalType: "int64", Type: lancepb.Field_LEAF}}
}
