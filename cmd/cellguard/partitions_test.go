package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"cellguard/committer"
	"cellguard/internal/natstest"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

type procOut struct {
	pid int
	cmd *exec.Cmd
	out *syncBuffer
}

// owners returns, from the committers' announcements, how many
// partitions each live committer process consumes, by pid.
func owners(t *testing.T, nc *nats.Conn) map[int]int {
	t.Helper()
	cs, err := committer.Committers(t.Context(), nc, "cg", 1200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]int{}
	for _, c := range cs {
		out[c.PID] = len(c.Partitions)
	}
	return out
}

// waitOwners waits until the live committers are exactly pids and share
// all n partitions, each ⌊n/len⌋ or ⌈n/len⌉.
func waitOwners(t *testing.T, nc *nats.Conn, n int, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := owners(t, nc)
		ok := len(got) == len(pids)
		total := 0
		for _, pid := range pids {
			k, live := got[pid]
			ok = ok && live && k >= n/len(pids) && k <= (n+len(pids)-1)/len(pids)
			total += k
		}
		if ok && total == n {
			t.Logf("partitions by pid: %v", got)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("partitions by pid %v, want %d shared by %v", got, n, pids)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCommitterProcessesSharePartitions runs three `serve` processes on a
// 3-node cluster, each connected to its own node: they share the
// partitions; one is SIGKILLed mid-load and its partitions move to the
// other two; a fourth joins and takes its share. Every staged transaction
// of every dataset gets exactly one decision, committed in staging
// order.
func TestCommitterProcessesSharePartitions(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocesses on a 3-node cluster")
	}
	cl := natstest.RunCluster(t, 3)
	nc, js := natstest.Connect(t, cl.URLs())
	const parts = 8
	args := func(url string) []string {
		return []string{"serve", "--nats-url", url, "--http", "", "--replicas", "3", "--partitions", fmt.Sprint(parts),
			"--pinned-ttl", "3s", "--ack-wait", "2s", "--log-level", "warn", "--checkpoint-every", "50", "--batch", "32"}
	}
	var procs []*procOut
	for _, s := range cl.Servers {
		cmd, out := process(t, args(s.URL())...)
		procs = append(procs, &procOut{cmd.Process.Pid, cmd, out})
	}
	pids := func(ps []*procOut) []int {
		var out []int
		for _, p := range ps {
			out = append(out, p.pid)
		}
		return out
	}
	waitOwners(t, nc, parts, pids(procs)...)

	datasets := make([]string, 12)
	for i := range datasets {
		datasets[i] = fmt.Sprintf("shared%02d", i)
	}
	var mu sync.Mutex
	staged := map[string][]string{}
	for _, ds := range datasets {
		id := fmt.Sprintf("%s-create", ds)
		stageTxn(t, js, ds, &lancepb.Transaction{Uuid: id, Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{
			Fragments: []*lancepb.DataFragment{fragment("c.lance")},
			Schema:    []*lancepb.Field{{Id: 0, Name: "a", ParentId: -1, LogicalType: "int64"}},
		}}})
		staged[ds] = []string{id}
	}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, ds := range datasets {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				id := fmt.Sprintf("%s-%04d", ds, i)
				stageTxn(t, js, ds, &lancepb.Transaction{Uuid: id, ReadVersion: 1, Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{
					Fragments: []*lancepb.DataFragment{fragment(id + ".lance")},
				}}})
				mu.Lock()
				staged[ds] = append(staged[ds], id)
				mu.Unlock()
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	time.Sleep(time.Second)
	victim := procs[0]
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	_ = victim.cmd.Wait()
	t.Logf("killed committer pid %d", victim.pid)
	procs = procs[1:]
	waitOwners(t, nc, parts, pids(procs)...)
	time.Sleep(time.Second)
	cmd, out := process(t, args(cl.Servers[0].URL())...)
	procs = append(procs, &procOut{cmd.Process.Pid, cmd, out})
	waitOwners(t, nc, parts, pids(procs)...)
	time.Sleep(time.Second)
	stop()
	wg.Wait()

	var buf bytes.Buffer
	if err := runCLI(t, &buf, "partitions", "-s", cl.URLs()); err != nil {
		t.Fatalf("cellguard partitions: %v\n%s", err, buf.String())
	}
	if !strings.Contains(buf.String(), fmt.Sprintf("partitions: %d", parts)) || strings.Count(buf.String(), "\n") < 4 {
		t.Errorf("cellguard partitions printed:\n%s", buf.String())
	}
	for _, ds := range datasets {
		want := staged[ds]
		var got []*cellguardpb.Decision
		deadline := time.Now().Add(2 * time.Minute)
		for {
			got = decisions(t, nc, ds)
			if len(got) >= len(want) || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		var ids []string
		for i, d := range got {
			ids = append(ids, d.GetTxnUuid())
			if d.GetOutcome() != cellguardpb.Outcome_OUTCOME_COMMITTED || d.GetVersion() != uint64(i+1) {
				t.Errorf("%s: decision %d is %v version %d (%s), want committed version %d", ds, i, d.GetOutcome(), d.GetVersion(), d.GetMessage(), i+1)
				break
			}
		}
		if !slices.Equal(ids, want) {
			t.Errorf("%s: %d decisions, %d staged: decided uuids differ from the staging order (lost, duplicated or reordered): %s",
				ds, len(ids), len(want), diffIDs(ids, want))
		}
	}
	for _, p := range procs {
		term(t, fmt.Sprintf("committer %d", p.pid), p.cmd, p.out)
	}
}

// diffIDs describes how decided differs from staged: ids missing, ids
// decided but never staged or twice, and the first position out of order.
func diffIDs(decided, staged []string) string {
	seen := map[string]int{}
	for _, id := range decided {
		seen[id]++
	}
	var missing, extra []string
	for _, id := range staged {
		if seen[id] == 0 {
			missing = append(missing, id)
		}
	}
	want := map[string]bool{}
	for _, id := range staged {
		want[id] = true
	}
	for id, n := range seen {
		if !want[id] || n > 1 {
			extra = append(extra, fmt.Sprintf("%s×%d", id, n))
		}
	}
	first := -1
	for i := range min(len(decided), len(staged)) {
		if decided[i] != staged[i] {
			first = i
			break
		}
	}
	return fmt.Sprintf("missing %v, extra %v, first difference at %d", missing, extra, first)
}

// TestCompactPartitionsSortsNumerically: the LIST column reads 16-2
// before 16-10, counts in order, and names of another form last.
func TestCompactPartitionsSortsNumerically(t *testing.T) {
	got := compactPartitions([]string{"partition-16-10", "partition-64-1", "odd", "partition-16-2", "partition-16-0"})
	if want := "16-0 16-2 16-10 64-1 odd"; got != want {
		t.Fatalf("compactPartitions = %q, want %q", got, want)
	}
}
