package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"cellguard/internal/natstest"
)

// TestNoSecretInLogs runs a committer, creates datasets, lists and reads
// them, all with passwords in the URLs and debug logging on, plus the
// error paths (a wrong password, a server that is not there), and checks
// that no password appears in any output.
func TestNoSecretInLogs(t *testing.T) {
	const (
		committerPW = "Committer-Pw-7f3a9c"
		workerPW    = "Worker-Pw-51be02"
		wrongPW     = "Wrong-Pw-9e7d11"
		absentPW    = "Absent-Pw-c0ffee"
	)
	srv := natstest.RunServer(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "committer", Password: committerPW}, {Username: "worker", Password: workerPW}}
	})
	host := strings.TrimPrefix(srv.ClientURL(), "nats://")
	committerURL := fmt.Sprintf("nats://committer:%s@%s", committerPW, host)
	workerURL := fmt.Sprintf("nats://worker:%s@%s", workerPW, host)

	args := append(serveArgs(committerURL), "--log-level", "debug")
	_, serveOut := process(t, args...)
	waitOutput(t, serveOut, "committer running")
	var outs []*syncBuffer
	runCLI := func(wantOK bool, args ...string) {
		t.Helper()
		cmd, out := process(t, args...)
		err := cmd.Wait()
		outs = append(outs, out)
		if (err == nil) != wantOK {
			t.Errorf("cellguard %s: err %v, want ok=%v:\n%s", strings.Join(args, " "), err, wantOK, out)
		}
	}
	for _, ds := range []string{"orders", "users"} {
		runCLI(true, "dataset", "create", ds, "--schema", "id:int64,x:double?", "--nats-url", workerURL)
	}
	runCLI(true, "dataset", "list", "--nats-url", committerURL)
	runCLI(true, "dataset", "log", "orders", "--nats-url", committerURL)
	runCLI(false, "dataset", "list", "--nats-url", fmt.Sprintf("nats://worker:%s@%s", wrongPW, host))
	runCLI(false, "dataset", "list", "--nats-url", fmt.Sprintf("nats://worker:%s@127.0.0.1:1", absentPW))
	runCLI(false, "dataset", "create", "x", "--schema", "id:int64", "--nats-url", fmt.Sprintf("nats://worker:%s@%s", wrongPW, host), "--tls-key", "k.pem")

	outs = append(outs, serveOut) // debug-level logs of the whole run
	for _, out := range outs {
		text := out.String()
		for _, secret := range []string{committerPW, workerPW, wrongPW, absentPW} {
			if strings.Contains(text, secret) {
				t.Errorf("output contains a password:\n%s", text)
			}
		}
	}
}
