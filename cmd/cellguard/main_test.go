package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"cellguard/committer"
	"cellguard/internal/natstest"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// TestMain lets the test binary run as the cellguard binary: with
// CELLGUARD_TEST_MAIN=1 it is `cellguard` itself, so tests can run, kill
// and restart a real committer process.
func TestMain(m *testing.M) {
	if os.Getenv("CELLGUARD_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// syncBuffer is a bytes.Buffer safe to read while a process writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// process runs `cellguard args...` as a subprocess.
func process(t *testing.T, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "CELLGUARD_TEST_MAIN=1")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, out
}

func serveArgs(url string) []string {
	return []string{"serve", "--nats-url", url, "--http", "", "--takeover", "--pinned-ttl", "3s",
		"--ack-wait", "2s", "--log-level", "warn", "--checkpoint-every", "20", "--batch", "32"}
}

func stageTxn(t *testing.T, js jetstream.JetStream, ds string, txn *lancepb.Transaction) {
	body, err := proto.Marshal(txn)
	if err != nil {
		t.Error(err)
		return
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := js.Publish(ctx, "cg.txn."+ds, body, jetstream.WithMsgID(txn.GetUuid()))
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("stage %s: %v", txn.GetUuid(), err)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func fragment(path string) *lancepb.DataFragment { return fragmentOf(path, "2.1") }

// fragmentOf is a fragment of one data file (not written) of the given
// data storage version ("2.2").
func fragmentOf(path, version string) *lancepb.DataFragment {
	var major, minor uint32
	fmt.Sscanf(version, "%d.%d", &major, &minor)
	return &lancepb.DataFragment{PhysicalRows: 10, Files: []*lancepb.DataFile{{Path: path, Fields: []int32{0}, ColumnIndices: []int32{0}, FileMajorVersion: major, FileMinorVersion: minor}}}
}

// decisions reads the whole decision log of ds.
func decisions(t *testing.T, nc *nats.Conn, ds string) []*cellguardpb.Decision {
	t.Helper()
	r, err := committer.NewReader(t.Context(), nc, "cg")
	if err != nil {
		t.Fatal(err)
	}
	var out []*cellguardpb.Decision
	if err := r.Log(t.Context(), ds, 1, func(_ uint64, rec *cellguardpb.Decision) error {
		out = append(out, rec)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSIGKILLDuringLoad kills a real committer process with SIGKILL while
// transactions are staged, restarts it, and checks the log: one decision
// per uuid, versions contiguous, replay equal to the reloaded head. The
// restarted process then stops gracefully on SIGTERM.
func TestSIGKILLDuringLoad(t *testing.T) {
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv.URL())
	ds := "killed"
	first, firstOut := process(t, serveArgs(srv.URL())...)
	// Wait for the committer to create both streams (CG_DEC comes second).
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, errTxn := js.Stream(t.Context(), "CG_TXN")
		_, errDec := js.Stream(t.Context(), "CG_DEC")
		if errTxn == nil && errDec == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("committer never created its streams:\n%s", firstOut)
		}
		time.Sleep(20 * time.Millisecond)
	}
	schema := []*lancepb.Field{{Id: 0, Name: "id", ParentId: -1, LogicalType: "int64", Type: lancepb.Field_LEAF}}
	ids := []string{newUUID()}
	stageTxn(t, js, ds, &lancepb.Transaction{Uuid: ids[0], Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{Schema: schema}}})
	const n = 400
	var mu sync.Mutex
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			id := newUUID()
			stageTxn(t, js, ds, &lancepb.Transaction{Uuid: id, ReadVersion: 1, Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{
				Fragments: []*lancepb.DataFragment{fragment("data/" + id + ".lance")},
			}}})
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	for len(decisions(t, nc, ds)) < 50 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	second, out := process(t, serveArgs(srv.URL())...)
	wg.Wait()
	deadline = time.Now().Add(60 * time.Second)
	var log []*cellguardpb.Decision
	for {
		log = decisions(t, nc, ds)
		if len(log) >= len(ids) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	seen := map[string]int{}
	var head *table.Manifest
	for i, rec := range log {
		seen[rec.TxnUuid]++
		if rec.Outcome != cellguardpb.Outcome_OUTCOME_COMMITTED {
			t.Errorf("record %d: %v %s", i, rec.Reason, rec.Message)
			continue
		}
		if want := uint64(1); head != nil {
			want = head.Version() + 1
			if rec.Version != want {
				t.Fatalf("record %d: version %d, want %d", i, rec.Version, want)
			}
		}
		txn := &lancepb.Transaction{}
		if err := proto.Unmarshal(rec.Transaction, txn); err != nil {
			t.Fatal(err)
		}
		next, err := table.Apply(t.Context(), head, txn, nil)
		if err != nil {
			t.Fatalf("replay record %d: %v", i, err)
		}
		head = next
	}
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("txn %s has %d decisions, want 1", id, seen[id])
		}
	}
	if len(log) != len(ids) {
		t.Errorf("log has %d decisions for %d staged txns", len(log), len(ids))
	}
	r, err := committer.NewReader(t.Context(), nc, "cg")
	if err != nil {
		t.Fatal(err)
	}
	reloaded, err := r.Head(t.Context(), ds)
	if err != nil {
		t.Fatal(err)
	}
	if head == nil || reloaded == nil || !proto.Equal(head.Proto(), reloaded.Proto()) {
		t.Error("head reloaded from checkpoint + log differs from the replayed head")
	}
	// Graceful stop.
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Errorf("committer after SIGTERM: %v\n%s", err, out)
	}
}

// TestCommands runs the operator commands against an embedded `serve`.
func TestCommands(t *testing.T) {
	dir := t.TempDir()
	srvCmd, out := process(t, "serve", "--data-dir", filepath.Join(dir, "data"), "--nats-port", "-1", "--http", "127.0.0.1:0", "--log-level", "info")
	// The embedded server's URL is logged at start.
	var url string
	deadline := time.Now().Add(20 * time.Second)
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
	run := func(args ...string) string {
		t.Helper()
		var b bytes.Buffer
		// The embedded server has the production roles: the CLI acts as admin.
		if err := runCLI(t, &b, append(args, "--nats-url", url, "--creds", filepath.Join(dir, "data", "creds", "admin.nk"))...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, b.String())
		}
		return b.String()
	}
	// Give the committer a moment to create its streams.
	time.Sleep(300 * time.Millisecond)
	if got := run("dataset", "create", "cities", "--schema", "id:int64,name:string?"); !strings.Contains(got, "created at version 1") {
		t.Errorf("create: %s", got)
	}
	if got := run("dataset", "list"); !strings.Contains(got, "cities") {
		t.Errorf("list: %s", got)
	}
	if got := run("dataset", "show", "cities"); !strings.Contains(got, "version 1") || !strings.Contains(got, "name") {
		t.Errorf("show: %s", got)
	}
	if got := run("dataset", "log", "cities"); !strings.Contains(got, "committed v1") {
		t.Errorf("log: %s", got)
	}
	var b bytes.Buffer
	if err := runCLI(t, &b, "dataset", "create", "cities", "--schema", "id:int64", "--nats-url", url, "--creds", filepath.Join(dir, "data", "creds", "admin.nk")); err == nil || !strings.Contains(err.Error(), "DATASET_EXISTS") {
		t.Errorf("second create: %v\n%s", err, out)
	}
	_ = srvCmd.Process.Signal(syscall.SIGTERM)
	if err := srvCmd.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v\n%s", err, out)
	}
}

func runCLI(t *testing.T, w *bytes.Buffer, args ...string) error {
	return run(t.Context(), args, w, w)
}

func TestTxnInspect(t *testing.T) {
	files, _ := filepath.Glob("../../table/testdata/lance/mixed/_transactions/*.txn")
	if len(files) == 0 {
		t.Skip("no fixtures")
	}
	var b bytes.Buffer
	if err := run(t.Context(), []string{"txn", "inspect", files[0]}, &b, &b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"uuid:", "operation:", "message:"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("txn inspect output lacks %q:\n%s", want, b.String())
		}
	}
}

// TestTxnInspectOpaqueAny: a CreateIndex transaction carries index details
// as an Any of a Lance type cellguard does not link; inspect prints its
// type URL and size instead of failing.
func TestTxnInspectOpaqueAny(t *testing.T) {
	details := &anypb.Any{TypeUrl: "/lance.table.BTreeIndexDetails", Value: []byte{0x0a, 0x03, 'a', 'b', 'c'}}
	txn := &lancepb.Transaction{
		ReadVersion: 3,
		Uuid:        "4c1d7f0e-2b8a-4e55-9f3e-0d6a1b2c3d4e",
		Operation: &lancepb.Transaction_CreateIndex_{CreateIndex: &lancepb.Transaction_CreateIndex{
			NewIndices: []*lancepb.IndexMetadata{{Name: "x_idx", Fields: []int32{0}, IndexDetails: details}},
		}},
	}
	body, err := proto.Marshal(txn)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "3-index.txn")
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := run(t.Context(), []string{"txn", "inspect", path}, &b, &b); err != nil {
		t.Fatalf("txn inspect: %v\n%s", err, b.String())
	}
	for _, want := range []string{
		"opaque:        /lance.table.BTreeIndexDetails (5 bytes",
		`"@type": "/lance.table.BTreeIndexDetails"`,
		`"value": "5 bytes"`,
		`"name": "x_idx"`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}
