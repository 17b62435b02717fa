package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDatasetPublishingCommands runs `serve --lance-root` and the dataset
// verbs of publishing: a dataset created without a location is published
// under the lance root, one with --location there, `dataset show` reports
// location and lag, and bad locations are refused with clear errors.
func TestDatasetPublishingCommands(t *testing.T) {
	dir := t.TempDir()
	lanceRoot := filepath.Join(dir, "lance")
	srvCmd, out := process(t, "serve", "--data-dir", filepath.Join(dir, "data"), "--nats-port", "-1", "--http", "",
		"--log-level", "info", "--lance-root", lanceRoot)
	var url string
	deadline := time.Now().Add(2 * time.Minute)
	for url == "" {
		for _, line := range strings.Split(out.String(), "\n") {
			if i := strings.Index(line, "url=nats://"); i >= 0 && strings.Contains(line, "embedded") {
				url = strings.Fields(line[i+4:])[0]
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not report its URL:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cli := func(args ...string) (string, error) {
		var b bytes.Buffer
		err := runCLI(t, &b, append(args, "--nats-url", url, "--creds", filepath.Join(dir, "data", "creds", "admin.nk"))...)
		return b.String(), err
	}
	// until retries a command until its output has want (the committer
	// creates its streams, the publisher follows the log).
	until := func(want string, args ...string) string {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			got, err := cli(args...)
			if err == nil && strings.Contains(got, want) {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v: %v\n%s\nwant %q; serve said:\n%s", args, err, got, want, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	until("created at version 1", "dataset", "create", "rooted", "--schema", "id:int64")
	until("published: version 1, lag 0", "dataset", "show", "rooted")
	got := until("location:", "dataset", "show", "rooted")
	if !strings.Contains(got, filepath.Join(lanceRoot, "rooted.lance")) || !strings.Contains(got, "readers lance8") {
		t.Errorf("show rooted:\n%s", got)
	}

	own := filepath.Join(dir, "own.lance")
	until("created at version 1", "dataset", "create", "own", "--schema", "id:int64", "--location", own, "--readers", "cellguard")
	until("published: version 1, lag 0", "dataset", "show", "own")
	if _, err := os.Stat(filepath.Join(own, "_versions", "18446744073709551614.manifest")); err != nil {
		t.Error(err)
	}
	// verify: clean; a copy without its manifest differs (exit non-zero);
	// repair: nothing to do on a log that is not behind.
	if got, err := cli("dataset", "verify", "own"); err != nil || !strings.Contains(got, "ok: every version") {
		t.Errorf("verify own: %v\n%s", err, got)
	}
	tampered := filepath.Join(dir, "tampered.lance")
	if out, err := exec.Command("cp", "-a", own, tampered).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	if err := os.Remove(filepath.Join(tampered, "_versions", "18446744073709551614.manifest")); err != nil {
		t.Fatal(err)
	}
	got, err := cli("dataset", "verify", "own", "--location", tampered)
	if !errors.Is(err, errDiverged) || !strings.Contains(got, "DIFF version 1: manifest missing") {
		t.Errorf("verify a copy without its manifest: %v\n%s", err, got)
	}
	if got, err := cli("dataset", "repair", "own"); err != nil || !strings.Contains(got, "nothing to repair") {
		t.Errorf("repair own: %v\n%s", err, got)
	}

	// A location that already holds a Lance table, one that is a file, and
	// adopting something that is not a Lance table.
	if _, err := cli("dataset", "create", "again", "--schema", "id:int64", "--location", own); err == nil || !strings.Contains(err.Error(), "already holds a Lance table") {
		t.Errorf("create over a Lance table: %v", err)
	}
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := cli("dataset", "create", "onfile", "--schema", "id:int64", "--location", file); err == nil || !strings.Contains(err.Error(), "location unusable") {
		t.Errorf("create on a file: %v", err)
	}
	if _, err := cli("dataset", "adopt", "notlance", "--location", dir); err == nil || !strings.Contains(err.Error(), "not a Lance table") {
		t.Errorf("adopt a non-Lance directory: %v", err)
	}
	_ = srvCmd.Process.Signal(syscall.SIGTERM)
	if err := srvCmd.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v\n%s", err, out)
	}
}
