package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestEmbeddedDefaultHasAuth runs `serve` with its embedded server: role
// seeds appear under the data directory (0600, logged by path only), an
// anonymous client is refused, and CLI commands on the same machine find
// the admin seed by themselves.
func TestEmbeddedDefaultHasAuth(t *testing.T) {
	dir := t.TempDir()
	_, out := process(t, "serve", "--data-dir", dir, "--nats-port", "-1", "--http", "127.0.0.1:0", "--log-level", "info")
	waitOutput(t, out, "committer running")
	m := regexp.MustCompile(`url=(nats://127\.0\.0\.1:\d+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no embedded server URL in the log:\n%s", out)
	}
	url := m[1]

	if nc, err := nats.Connect(url, nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("an anonymous client connected to the embedded server")
	}
	for _, role := range []string{"committer", "worker", "reader", "admin"} {
		path := filepath.Join(dir, "creds", role+".nk")
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v (mode %v), want a 0600 seed file", path, err, fi)
		}
		seed, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out.String(), strings.TrimSpace(string(seed))) {
			t.Errorf("the log shows %s's seed", role)
		}
	}
	if !strings.Contains(out.String(), filepath.Join(dir, "creds")) {
		t.Errorf("the log does not say where the credentials are:\n%s", out)
	}

	t.Setenv("CELLGUARD_DATA_DIR", dir)
	if err := cli(t, t.Context(), "dataset", "create", "orders", "--schema", "id:int64", "--nats-url", url); err != nil {
		t.Fatalf("dataset create with the local admin seed: %v", err)
	}
	// The metrics name the build and the owner of orders.
	addr := regexp.MustCompile(`"http listening" addr=(\S+)`).FindStringSubmatch(out.String())
	if addr == nil {
		t.Fatalf("no http address in the log:\n%s", out)
	}
	metrics := func() string {
		resp, err := http.Get("http://" + addr[1] + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	want := []string{"cellguard_build_info{", `cellguard_committer_dataset_owner{dataset="orders"} 1`}
	deadline := time.Now().Add(30 * time.Second)
	for m := metrics(); !strings.Contains(m, want[0]) || !strings.Contains(m, want[1]); m = metrics() {
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %q:\n%s", want, m)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Anonymous again, now that streams exist: still nothing gets in.
	if nc, err := nats.Connect(url, nats.NoReconnect(), nats.Timeout(5*time.Second)); err == nil {
		nc.Close()
		t.Fatal("an anonymous client connected to the embedded server")
	}
}
