package deploy

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/credgen"
	"cellguard/internal/natsconn"
)

// shipped is the shipped cluster started on loopback: the node configs of
// deploy/nats with ports, paths and host names templated, nothing else.
// natsconfig is the CLI's connection settings.
type natsconfig = natsconn.Config

type shipped struct {
	servers   []*server.Server
	logs      []*logLines
	routes    []string // route URLs of the nodes
	certs     *credgen.Certs
	keys      map[string]credgen.Nkey
	clientURL string
}

// logLines records a server's log so a test can wait for what it says.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func (l *logLines) Noticef(format string, v ...any) { l.add(format, v...) }
func (l *logLines) Warnf(format string, v ...any)   { l.add(format, v...) }
func (l *logLines) Fatalf(format string, v ...any)  { l.add(format, v...) }
func (l *logLines) Errorf(format string, v ...any)  { l.add(format, v...) }
func (l *logLines) Debugf(format string, v ...any)  { l.add(format, v...) }
func (l *logLines) Tracef(format string, v ...any)  {}

// startShipped writes credentials, templates n1..n3.conf and starts them.
func startShipped(t *testing.T) *shipped {
	t.Helper()
	dir := t.TempDir()
	certs, err := credgen.TLS(filepath.Join(dir, "tls"), []string{"localhost", "127.0.0.1"}, []string{"committer", "worker", "reader", "admin"})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := credgen.Nkeys(filepath.Join(dir, "nkeys"), credgen.Roles)
	if err != nil {
		t.Fatal(err)
	}
	for role, k := range keys {
		t.Setenv("CELLGUARD_"+strings.ToUpper(role)+"_NKEY", k.Public)
		t.Setenv("CELLGUARD_"+strings.ToUpper(role)+"_INBOX", k.Inbox())
	}
	accounts, err := os.ReadFile("nats/accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), accounts, 0o600); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, 6)
	sh := &shipped{certs: certs, keys: keys}
	for i := range 3 {
		sh.routes = append(sh.routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3+i]))
	}
	for i := range 3 {
		conf := templateNode(t, dir, i, ports)
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatalf("n%d.conf: %v", i+1, err)
		}
		opts.NoSigs = true
		srv, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("n%d: %v", i+1, err)
		}
		logs := &logLines{}
		srv.SetLogger(logs, true, false)
		go srv.Start()
		t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
		sh.servers = append(sh.servers, srv)
		sh.logs = append(sh.logs, logs)
	}
	var urls []string
	for _, s := range sh.servers {
		if !s.ReadyForConnections(30 * time.Second) {
			t.Fatal("shipped node not ready")
		}
		urls = append(urls, fmt.Sprintf("tls://127.0.0.1:%d", s.Addr().(*net.TCPAddr).Port))
	}
	sh.clientURL = strings.Join(urls, ",")
	waitFor(t, 60*time.Second, "a full mesh of routes", func() bool {
		for _, s := range sh.servers {
			if s.NumRoutes() < 2 {
				return false
			}
		}
		return true
	})
	sh.waitJetStream(t)
	return sh
}

// waitJetStream waits until the meta group has formed over the routes: an
// R3 stream can be created (a request sent while the three bootstrap
// leaders merge gets no answer, so each try has a short deadline).
func (sh *shipped) waitJetStream(t *testing.T) {
	t.Helper()
	js, err := jetstream.New(sh.connect(t, "committer"))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 120*time.Second, "an R3 stream to be created", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe.>"}, Replicas: 3})
		return err == nil && js.DeleteStream(ctx, "PROBE") == nil
	})
}

// templateNode rewrites deploy/nats/nI.conf for loopback: each edit must
// apply, so a change of the shipped file's shape fails here loudly.
func templateNode(t *testing.T, dir string, i int, ports []int) string {
	t.Helper()
	name := fmt.Sprintf("n%d", i+1)
	b, err := os.ReadFile(filepath.Join("nats", name+".conf"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	edits := [][2]string{
		{"listen: 0.0.0.0:4222", fmt.Sprintf("listen: 127.0.0.1:%d", ports[i])},
		{"http: 127.0.0.1:8222", "http: 127.0.0.1:-1"},
		{"listen: 0.0.0.0:6222", fmt.Sprintf("listen: 127.0.0.1:%d", ports[3+i])},
		{"store_dir: /data/jetstream", fmt.Sprintf("store_dir: %q", filepath.Join(dir, name, "js"))},
		{"/etc/nats/tls/", filepath.Join(dir, "tls") + "/"},
	}
	for j := range 3 {
		edits = append(edits, [2]string{fmt.Sprintf("nats-route://n%d:6222", j+1), fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3+j])})
	}
	for _, e := range edits {
		if !strings.Contains(s, e[0]) {
			t.Fatalf("%s.conf: %q not found; keep the test's template in step with the file", name, e[0])
		}
		s = strings.ReplaceAll(s, e[0], e[1])
	}
	path := filepath.Join(dir, name+".conf")
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// connect dials the cluster as role, with the role's client certificate
// and nkey seed, through the same code as the cellguard CLI.
func (sh *shipped) connect(t *testing.T, role string, extra ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := sh.config(role).Connect("test-"+role, extra...)
	if err != nil {
		t.Fatalf("connect as %s: %v", role, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (sh *shipped) config(role string) natsconn.Config {
	return natsconn.Config{
		URL: sh.clientURL, Creds: sh.keys[role].SeedFile, TLSCA: sh.certs.CA,
		TLSCert: sh.certs.Client[role], TLSKey: sh.certs.ClientKey[role],
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
