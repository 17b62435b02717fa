package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"sigs.k8s.io/yaml"

	"cellguard/internal/credgen"
	"cellguard/internal/natsconn"
	"cellguard/internal/synctrace"
)

// TestShippedConfigsSyncAlways checks the durability policy of every
// shipped server configuration: the nodes of deploy/nats (which compose
// runs) start with JetStream syncing every write before acknowledging it,
// as the running servers report, and the Helm values set the same.
func TestShippedConfigsSyncAlways(t *testing.T) {
	sh := startShipped(t)
	for i, s := range sh.servers {
		cfg := s.JetStreamConfig()
		if cfg == nil || !cfg.SyncAlways {
			t.Errorf("n%d: JetStream config %+v: want sync_always", i+1, cfg)
		}
	}
	b, err := os.ReadFile("compose/docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image   string   `json:"image"`
			Command []string `json:"command"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	nodes := 0
	for name, svc := range compose.Services {
		if len(svc.Command) == 2 && svc.Command[0] == "-c" {
			if want := "/etc/nats/" + name + ".conf"; svc.Command[1] != want {
				t.Errorf("compose %s runs %s, want %s (a shipped node config)", name, svc.Command[1], want)
			}
			nodes++
		}
	}
	if nodes != 3 {
		t.Errorf("compose runs %d nats nodes from deploy/nats, want 3", nodes)
	}
	vb, err := os.ReadFile("k8s/nats-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Config struct {
			Merge struct {
				JetStream map[string]any `json:"jetstream"`
			} `json:"merge"`
		} `json:"config"`
	}
	if err := yaml.Unmarshal(vb, &values); err != nil {
		t.Fatal(err)
	}
	if v := values.Config.Merge.JetStream["sync_interval"]; v != "always" {
		t.Errorf("k8s/nats-values.yaml config.merge.jetstream.sync_interval = %v, want always", v)
	}
}

// requireStrace fails the test when strace cannot trace here and
// CELLGUARD_REQUIRE_STRACE is set (make test sets it), and skips it
// otherwise.
func requireStrace(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("strace")
	if err == nil {
		err = exec.Command(path, "-o", os.DevNull, "true").Run()
	}
	if err != nil {
		if os.Getenv("CELLGUARD_REQUIRE_STRACE") != "" {
			t.Fatalf("strace cannot trace here (%v): install it (apt-get install strace) and allow ptrace", err)
		}
		t.Skipf("strace cannot trace here: %v", err)
	}
	return path
}

// TestShippedClusterSyncsBeforeAck builds nats-server from the module
// go.mod pins, runs deploy/nats/n1..n3.conf (templated for loopback, as
// startShipped does, and with plaintext client links so that the
// acknowledgements can be read in the trace; routes keep their mutual
// TLS) as three processes, each under strace, and publishes
// to an R3 stream through its leader: every acknowledgement the leader
// wrote to the client was preceded by an fsync of a block file (its Raft
// log) holding the acknowledged message.
// Without sync_interval: always the same check finds acknowledgements
// ahead of the disk.
func TestShippedClusterSyncsBeforeAck(t *testing.T) {
	strace := requireStrace(t)
	if testing.Short() {
		t.Skip("builds nats-server")
	}
	bin := filepath.Join(t.TempDir(), "nats-server")
	build := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build nats-server: %v\n%s", err, out)
	}
	t.Run("shipped", func(t *testing.T) {
		if errs := tracedClusterAcks(t, strace, bin, false); len(errs) > 0 {
			t.Fatalf("%d acknowledged messages were not on the leader's disk first, e.g. %v", len(errs), errs[0])
		}
	})
	t.Run("without-sync", func(t *testing.T) {
		errs := tracedClusterAcks(t, strace, bin, true)
		if len(errs) == 0 {
			t.Fatal("no acknowledgement ahead of the disk without sync_interval: always: the check cannot tell")
		}
		t.Logf("without sync_interval: always, %d acknowledged messages were acknowledged before an fsync", len(errs))
	})
}

// tracedClusterAcks runs the traced cluster (dropping sync_interval from
// the configs if unsynced), publishes through the stream leader and
// returns what synctrace.Verify finds in the leader's trace.
func tracedClusterAcks(t *testing.T, strace, bin string, unsynced bool) []error {
	t.Helper()
	dir := t.TempDir()
	if _, err := credgen.TLS(filepath.Join(dir, "tls"), []string{"localhost", "127.0.0.1"}, nil); err != nil {
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
	var urls []string
	traces := make([]string, 3)
	cmds := make([]*exec.Cmd, 3)
	for i := range 3 {
		conf := plainClients(t, templateNode(t, dir, i, ports), unsynced)
		traces[i] = filepath.Join(dir, fmt.Sprintf("n%d.trace", i+1))
		cmd := exec.Command(strace, append(synctrace.Args(traces[i]), bin, "-c", conf)...)
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("n%d.log", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				signalChildren(cmd.Process.Pid, syscall.SIGKILL)
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				t.Logf("n%d log:\n%s", i+1, b)
			}
			logf.Close()
		})
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	cfg := func(url string) natsconn.Config {
		return natsconn.Config{URL: url, Creds: keys["committer"].SeedFile}
	}
	var nc *nats.Conn
	waitFor(t, 60*time.Second, "the traced cluster to accept clients", func() bool {
		c, err := cfg(strings.Join(urls, ",")).Connect("durability")
		if err == nil {
			nc = c
		}
		return err == nil
	})
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var stream jetstream.Stream
	waitFor(t, 60*time.Second, "an R3 stream", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stream, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "CG_DEC", Subjects: []string{"cg.dec.*.*"}, Replicas: 3})
		return err == nil
	})
	var leader string
	waitFor(t, 60*time.Second, "a stream leader", func() bool {
		info, err := stream.Info(t.Context())
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
			leader = info.Cluster.Leader
		}
		return leader != ""
	})
	li := int(leader[1] - '1')
	lnc, err := cfg(urls[li]).Connect("durability-leader")
	if err != nil {
		t.Fatal(err)
	}
	defer lnc.Close()
	ljs, err := jetstream.New(lnc)
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	bodies := map[uint64][]byte{}
	for i := range n {
		body := []byte(fmt.Sprintf("decision %d of the traced cluster %d", i, time.Now().UnixNano()))
		ack, err := ljs.Publish(t.Context(), "cg.dec.traced.committed", body)
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		bodies[ack.Sequence] = body
	}
	lnc.Close()
	nc.Close()
	for _, cmd := range cmds {
		signalChildren(cmd.Process.Pid, syscall.SIGTERM) // the server; strace exits with it
	}
	for _, cmd := range cmds {
		_ = cmd.Wait()
	}
	f, err := os.Open(traces[li])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	calls, err := synctrace.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	var acks []synctrace.Ack
	for _, a := range synctrace.Acks(calls, ports[li]) {
		if a.Stream == "CG_DEC" {
			acks = append(acks, a)
		}
	}
	if len(acks) != n {
		t.Fatalf("%d acknowledgements of CG_DEC in the leader's trace, want %d", len(acks), n)
	}
	errs := synctrace.Verify(calls, acks, func(_ string, seq uint64) ([]byte, error) {
		if b, ok := bodies[seq]; ok {
			return b, nil
		}
		return nil, fmt.Errorf("not published by this test")
	})
	t.Logf("leader %s: %d acknowledgements, %d not preceded by an fsync of a block file holding the message (%d traced calls)", leader, n, len(errs), len(calls))
	return errs
}

// signalChildren sends sig to the children of process pid (strace's
// tracee), not to pid itself.
func signalChildren(pid int, sig syscall.Signal) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		var child int
		if _, err := fmt.Sscan(f, &child); err == nil {
			_ = syscall.Kill(child, sig)
		}
	}
}

// plainClients removes the client tls block of a node config (the one
// before its cluster block) and, if unsynced, its sync_interval.
func plainClients(t *testing.T, conf string, unsynced bool) string {
	t.Helper()
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	start := strings.Index(s, "\ntls {")
	end := strings.Index(s, "\ncluster {")
	if start < 0 || end < start {
		t.Fatalf("%s: no client tls block before the cluster block", conf)
	}
	s = s[:start] + "\n" + s[end:]
	if unsynced {
		if !strings.Contains(s, "sync_interval: always") {
			t.Fatalf("%s: no sync_interval: always", conf)
		}
		s = strings.ReplaceAll(s, "sync_interval: always", "")
	}
	if err := os.WriteFile(conf, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return conf
}
