package main

import (
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/natstest"
	"cellguard/proto/lancepb"
)

// stageMany publishes n appends to ds asynchronously and waits for the
// acks. The i-th reads version head+i, the head it is decided at (they
// are decided in stream order): no read lag.
func stageMany(t *testing.T, js jetstream.JetStream, ds string, n int, head uint64) {
	t.Helper()
	var futs []jetstream.PubAckFuture
	for i := range n {
		id := newUUID()
		body, err := proto.Marshal(&lancepb.Transaction{Uuid: id, ReadVersion: head + uint64(i), Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{
			Fragments: []*lancepb.DataFragment{fragment("data/" + id + ".lance")},
		}}})
		if err != nil {
			t.Fatal(err)
		}
		f, err := js.PublishAsync("cg.txn."+ds, body, jetstream.WithMsgID(id))
		if err != nil {
			t.Fatal(err)
		}
		futs = append(futs, f)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(60 * time.Second):
		t.Fatal("staging did not complete")
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatalf("stage: %v", err)
		}
	}
}

// waitOutput waits until the process output contains s.
func waitOutput(t *testing.T, out *syncBuffer, s string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output:\n%s", s, out)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSIGTERMAnyState sends SIGTERM to a real `serve` process at several
// points of its life: while it loads a long log with no checkpoint, while
// it decides a deep backlog, and idle. Each time the process exits
// cleanly (status 0) within the 2 s budget (main's watchdog would exit 1
// past it); the elapsed time is logged.
func TestSIGTERMAnyState(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess")
	}
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv.URL())
	ds := "term"
	args := func() []string {
		a := serveArgs(srv.URL())
		for i, v := range a {
			if v == "--log-level" {
				a[i+1] = "info"
			}
			if v == "--checkpoint-every" {
				a[i+1] = "90000" // no checkpoint: every start replays the whole log
			}
		}
		return a
	}
	first, out := process(t, args()...)
	waitOutput(t, out, "committer running")
	create := newUUID()
	schema := []*lancepb.Field{{Id: 0, Name: "id", ParentId: -1, LogicalType: "int64", Type: lancepb.Field_LEAF}}
	stageTxn(t, js, ds, &lancepb.Transaction{Uuid: create, Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{Schema: schema}}})
	const logLen = 4000
	stageMany(t, js, ds, logLen, 1)
	deadline := time.Now().Add(4 * time.Minute) // a bound on liveness, far above the seconds it takes
	for len(decisions(t, nc, ds)) < logLen+1 {
		if time.Now().After(deadline) {
			t.Fatalf("first committer decided %d of %d:\n%s", len(decisions(t, nc, ds)), logLen+1, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	term(t, "idle", first, out)

	for i, delay := range []time.Duration{0, 20 * time.Millisecond, 100 * time.Millisecond} {
		// A backlog to decide once loaded; the previous one is decided
		// (or handed back) by now: stage on top of what is in the log.
		stageMany(t, js, ds, 1000, uint64(len(decisions(t, nc, ds))))
		p, out := process(t, args()...)
		waitOutput(t, out, "msg=serving")
		time.Sleep(delay)
		term(t, fmt.Sprintf("start %d, +%v (loading %d records, then a backlog)", i, delay, logLen), p, out)
	}
}

// term sends SIGTERM to cmd and checks that it exits with status 0
// (main's watchdog exits 1 when the 2 s budget is exceeded). The elapsed
// time is logged; the bound checked here adds generous slack for a loaded
// test machine, the 2 s itself is enforced by the watchdog.
func term(t *testing.T, what string, cmd *exec.Cmd, out *syncBuffer) {
	t.Helper()
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		elapsed := time.Since(sent)
		t.Logf("%s: exited %v after SIGTERM", what, elapsed.Round(time.Millisecond))
		if err != nil {
			t.Errorf("%s: exit after SIGTERM: %v\n%s", what, err, out)
		}
		if strings.Contains(out.String(), "after the signal; exiting") {
			t.Errorf("%s: the watchdog had to end the process:\n%s", what, out)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: still running 15 s after SIGTERM:\n%s", what, out)
	}
}
