package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/natsconn"
	"cellguard/internal/natstest/loopback"
	"cellguard/internal/synctrace"
	"cellguard/proto/lancepb"
)

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

// tracedServe runs `cellguard serve` with its embedded server under
// strace until stop is called; stop returns the parsed trace.
type tracedServe struct {
	t        *testing.T
	cmd      *exec.Cmd
	out      *syncBuffer
	dir      string
	port     int
	url      string
	metrics  string
	traceOut string
}

func startTracedServe(t *testing.T, extra ...string) *tracedServe {
	t.Helper()
	strace := requireStrace(t)
	dir := t.TempDir()
	ports, err := loopback.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	ts := &tracedServe{t: t, dir: filepath.Join(dir, "data"), port: ports[0], traceOut: filepath.Join(dir, "trace")}
	args := append(synctrace.Args(ts.traceOut), os.Args[0], "serve", "--data-dir", ts.dir, "--nats-port", strconv.Itoa(ts.port),
		"--http", "127.0.0.1:0", "--log-level", "info", "--publish=false")
	ts.cmd = exec.Command(strace, append(args, extra...)...)
	ts.cmd.Env = append(os.Environ(), "CELLGUARD_TEST_MAIN=1")
	ts.out = &syncBuffer{}
	ts.cmd.Stdout, ts.cmd.Stderr = ts.out, ts.out
	if err := ts.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if ts.cmd.ProcessState == nil {
			ts.signal(syscall.SIGKILL)
			_ = ts.cmd.Process.Kill()
			_ = ts.cmd.Wait()
		}
	})
	waitOutput(t, ts.out, "committer running")
	ts.url = fmt.Sprintf("nats://127.0.0.1:%d", ts.port)
	addr := regexp.MustCompile(`"http listening" addr=(\S+)`).FindStringSubmatch(ts.out.String())
	if addr == nil {
		t.Fatalf("no http address in the log:\n%s", ts.out)
	}
	ts.metrics = "http://" + addr[1] + "/metrics"
	return ts
}

// signal sends sig to the traced serve (strace's child), not to strace.
func (ts *tracedServe) signal(sig syscall.Signal) {
	pid := ts.cmd.Process.Pid
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		if child, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(child, sig)
		}
	}
}

// metric returns the value of a gauge without labels on /metrics.
func (ts *tracedServe) metric(name string) string {
	ts.t.Helper()
	resp, err := http.Get(ts.metrics)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		ts.t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(string(b))
	if m == nil {
		return ""
	}
	return m[1]
}

// stop ends serve with SIGTERM, waits for strace, and parses the trace.
func (ts *tracedServe) stop() []synctrace.Call {
	ts.t.Helper()
	ts.signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- ts.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		ts.t.Fatalf("traced serve did not stop:\n%s", ts.out)
	}
	f, err := os.Open(ts.traceOut)
	if err != nil {
		ts.t.Fatal(err)
	}
	defer f.Close()
	calls, err := synctrace.Parse(f)
	if err != nil {
		ts.t.Fatal(err)
	}
	return calls
}

// durabilityRun creates a dataset on a traced serve and commits n appends
// as a worker; it returns the trace, its acknowledgements and how to find
// each acknowledged message's bytes in a block file.
func durabilityRun(t *testing.T, ts *tracedServe, n int) ([]synctrace.Call, []synctrace.Ack, synctrace.Message, map[string]int) {
	t.Helper()
	ds := "durable"
	t.Setenv("CELLGUARD_DATA_DIR", ts.dir)
	stdout, _, err := runOut(t, "dataset", "create", ds, "--schema", "id:int64", "--nats-url", ts.url)
	if err != nil {
		t.Fatalf("dataset create: %v", err)
	}
	created := regexp.MustCompile(`\(txn ([0-9a-f-]{36})\)`).FindStringSubmatch(stdout)
	if created == nil {
		t.Fatalf("no creation txn in %q", stdout)
	}
	// staged: CG_TXN sequence -> the transaction id its record carries in
	// its Nats-Msg-Id header (the stream is a work queue: a decided
	// transaction is gone from it by the time the trace is read).
	staged := map[uint64]string{1: created[1]}
	wnc, err := natsconn.Config{URL: ts.url, Creds: filepath.Join(ts.dir, "creds", "worker.nk")}.Connect("durability-worker")
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	wjs, err := jetstream.New(wnc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		id := newUUID()
		body, err := proto.Marshal(&lancepb.Transaction{Uuid: id, ReadVersion: 1 + uint64(i), Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{
			Fragments: []*lancepb.DataFragment{fragment("data/" + id + ".lance")},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		ack, err := wjs.Publish(t.Context(), "cg.txn."+ds, body, jetstream.WithMsgID(id))
		if err != nil {
			t.Fatalf("stage %d: %v", i, err)
		}
		staged[ack.Sequence] = id
	}
	anc, err := natsconn.Config{URL: ts.url, Creds: filepath.Join(ts.dir, "creds", "admin.nk")}.Connect("durability-admin")
	if err != nil {
		t.Fatal(err)
	}
	defer anc.Close()
	deadline := time.Now().Add(60 * time.Second)
	for len(decisions(t, anc, ds)) < n+1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d decisions", len(decisions(t, anc, ds)), n+1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ajs, err := jetstream.New(anc)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := ajs.Stream(t.Context(), "CG_DEC")
	if err != nil {
		t.Fatal(err)
	}
	info, err := dec.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int{"CG_DEC": int(info.State.LastSeq), "CG_TXN": len(staged)}
	bodies := map[uint64][]byte{}
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		m, err := dec.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatal(err)
		}
		bodies[seq] = m.Data
	}
	msg := func(stream string, seq uint64) ([]byte, error) {
		switch stream {
		case "CG_TXN":
			if id, ok := staged[seq]; ok {
				return []byte("Nats-Msg-Id: " + id), nil
			}
		case "CG_DEC":
			if b, ok := bodies[seq]; ok {
				return b, nil
			}
		default:
			s, err := ajs.Stream(context.Background(), stream)
			if err != nil {
				return nil, err
			}
			m, err := s.GetMsg(context.Background(), seq)
			if err != nil {
				return nil, err
			}
			return m.Data, nil
		}
		return nil, fmt.Errorf("not a message of this run")
	}
	calls := ts.stop()
	return calls, synctrace.Acks(calls, ts.port), msg, last
}

// covered checks that the acknowledgements cover every sequence 1..last
// of each stream in last.
func covered(t *testing.T, acks []synctrace.Ack, last map[string]int) {
	t.Helper()
	seen := map[string]map[uint64]bool{}
	for _, a := range acks {
		if seen[a.Stream] == nil {
			seen[a.Stream] = map[uint64]bool{}
		}
		for s := a.Seq + 1 - uint64(a.Count); s <= a.Seq; s++ {
			seen[a.Stream][s] = true
		}
	}
	for stream, n := range last {
		for s := 1; s <= n; s++ {
			if !seen[stream][uint64(s)] {
				t.Errorf("%s seq %d: no acknowledgement in the trace", stream, s)
			}
		}
	}
}

// TestEmbeddedSyncsBeforeAck traces the system calls of a real `serve`
// (its embedded server, default policy) while a worker stages appends and
// the committer decides them, and checks every acknowledgement the server
// sent, staged transactions and decisions alike: each acknowledged
// message was written to a block file and that file fsynced before the
// acknowledgement left. With --nats-sync 2m the same check finds
// acknowledgements ahead of the disk.
func TestEmbeddedSyncsBeforeAck(t *testing.T) {
	const n = 40
	t.Run("always", func(t *testing.T) {
		ts := startTracedServe(t)
		if v := ts.metric("cellguard_nats_sync_always"); v != "1" {
			t.Errorf("cellguard_nats_sync_always = %q, want 1", v)
		}
		calls, acks, msg, last := durabilityRun(t, ts, n)
		covered(t, acks, last)
		if errs := synctrace.Verify(calls, acks, msg); len(errs) > 0 {
			t.Fatalf("%d acknowledged messages were not on disk first, e.g. %v", len(errs), errs[0])
		}
		t.Logf("%d acknowledgements (%d CG_DEC messages, %d CG_TXN), each after an fsync of the block file holding it; %d traced calls", len(acks), last["CG_DEC"], last["CG_TXN"], len(calls))
	})
	t.Run("opted-out", func(t *testing.T) {
		ts := startTracedServe(t, "--nats-sync", "2m")
		if !strings.Contains(ts.out.String(), "UNSAFE: --nats-sync") {
			t.Errorf("no warning in the log:\n%s", ts.out)
		}
		if v := ts.metric("cellguard_nats_sync_always"); v != "0" {
			t.Errorf("cellguard_nats_sync_always = %q, want 0", v)
		}
		calls, acks, msg, last := durabilityRun(t, ts, n)
		covered(t, acks, last)
		errs := synctrace.Verify(calls, acks, msg)
		if len(errs) == 0 {
			t.Fatal("no acknowledgement ahead of the disk with a 2m sync interval: the check cannot tell")
		}
		t.Logf("opted out: %d of %d acknowledged messages were acknowledged before an fsync", len(errs), last["CG_DEC"]+last["CG_TXN"])
	})
}
