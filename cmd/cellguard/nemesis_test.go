package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cellguard/internal/natstest"
	"cellguard/internal/natstest/loopback"
	"cellguard/producer"
	"cellguard/proto/lancepb"
)

var (
	nemesisOn       = flag.Bool("nemesis", false, "run the nemesis: a 3-node cluster of nats-server processes, 3 serve processes, SDK workers, faults from a seed")
	nemesisDuration = flag.Duration("nemesis.duration", 30*time.Second, "how long the nemesis injects faults")
	nemesisSeed     = flag.Uint64("nemesis.seed", 1, "seed of the fault schedule")
)

// natsNode is one nats-server process of the nemesis cluster.
type natsNode struct {
	name, bin, conf string
	cmd             *exec.Cmd
	log             *os.File
}

func (n *natsNode) start(t *testing.T) {
	t.Helper()
	n.cmd = exec.Command(n.bin, "-c", n.conf)
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

func (n *natsNode) signal(sig syscall.Signal) {
	if n.cmd != nil && n.cmd.Process != nil {
		_ = n.cmd.Process.Signal(sig)
	}
}

func (n *natsNode) kill() {
	if n.cmd != nil && n.cmd.ProcessState == nil {
		_ = n.cmd.Process.Signal(syscall.SIGCONT)
		_ = n.cmd.Process.Kill()
		_ = n.cmd.Wait()
	}
}

// committerProc is one `serve` process of the nemesis.
type committerProc struct {
	args []string
	cmd  *exec.Cmd
	out  *syncBuffer
}

// nemOutcome is what one SDK Commit returned.
type nemOutcome struct {
	id      string
	ds      string
	version uint64 // committed
	err     error
	at      time.Time // when Commit returned
}

// fault is one injected fault: its kind and when it began.
type fault struct {
	kind string
	at   time.Time
}

// TestNemesis runs a 3-node JetStream cluster of separate nats-server
// processes (built from the pinned module, sync_interval: always) on
// loopback, three `serve` processes sharing the partitions (R3 streams)
// and SDK workers committing appends to three datasets, while a schedule
// drawn from -nemesis.seed kills committers (SIGKILL, restarted), pauses
// servers and committers (SIGSTOP, SIGCONT after 1-4 s), kills a server
// (SIGKILL, restarted) and kills all three servers at once (restarted).
// The checker reads the final logs: each dataset's committed versions
// are 1..head with no gap, no transaction is committed twice, every
// Commit that returned version v has its transaction at v, and no
// transaction an SDK saw rejected is committed.
func TestNemesis(t *testing.T) {
	if !*nemesisOn {
		t.Skip("long: make test-nemesis (-nemesis)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("go build nats-server: %v\n%s", err, out)
	}
	ports, err := loopback.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	var routes, urls []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[3+i]))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	url := strings.Join(urls, ",")
	nodes := make([]*natsNode, 3)
	for i := range 3 {
		name := fmt.Sprintf("n%d", i+1)
		conf := filepath.Join(dir, name+".conf")
		body := fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:%d\nmax_payload: 8MB\n"+
			"jetstream { store_dir: %q, sync_interval: always, limits { default_max_consumers: -1 } }\n"+
			"cluster { name: nemesis, listen: 127.0.0.1:%d, routes: [%s] }\n",
			name, ports[i], filepath.Join(dir, name), ports[3+i], strings.Join(routes, ", "))
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		lf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = &natsNode{name: name, bin: bin, conf: conf, log: lf}
		nodes[i].start(t)
		n := nodes[i]
		t.Cleanup(func() { n.kill(); lf.Close() })
	}
	waitFor := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("JetStream on the cluster", 2*time.Minute, func() bool { return loopback.JetStreamReady(url) })

	committers := make([]*committerProc, 3)
	for i := range committers {
		committers[i] = &committerProc{args: []string{"serve", "--nats-url", url, "--http", "", "--replicas", "3", "--pinned-ttl", "3s",
			"--ack-wait", "2s", "--log-level", "warn", "--batch", "32", "--publish=false"}}
		committers[i].cmd, committers[i].out = process(t, committers[i].args...)
	}

	nc, _ := natstest.Connect(t, url)
	datasets := []string{"nem0", "nem1", "nem2"}
	pc, err := producer.New(nc, producer.Config{Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	for _, ds := range datasets {
		deadline := time.Now().Add(3 * time.Minute)
		for { // until the committers have created their streams
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, err := pc.Commit(ctx, producer.Create(ds, []*lancepb.Field{{Id: 0, Name: "id", ParentId: -1, LogicalType: "int64", Type: lancepb.Field_LEAF}}))
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("create %s: %v", ds, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// Workers: two per dataset, each commits appends one after another.
	var mu sync.Mutex
	var outcomes []nemOutcome
	ctx, stopWorkers := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 6 {
		ds := datasets[w%len(datasets)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			wnc, _ := natstest.Connect(t, url)
			wpc, err := producer.New(wnc, producer.Config{Timeout: 30 * time.Second})
			if err != nil {
				t.Error(err)
				return
			}
			defer wpc.Close()
			for ctx.Err() == nil {
				snap, err := wpc.Latest(ctx, ds)
				if err != nil {
					time.Sleep(200 * time.Millisecond)
					continue
				}
				txn := snap.NewTxn().Append(fragment("data/" + newUUID() + ".lance"))
				cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				v, err := wpc.Commit(cctx, txn)
				cancel()
				mu.Lock()
				outcomes = append(outcomes, nemOutcome{id: txn.ID(), ds: ds, version: v, err: err, at: time.Now()})
				mu.Unlock()
			}
		}()
	}

	// The fault schedule.
	rng := rand.New(rand.NewPCG(*nemesisSeed, 0x6e656d))
	faults := map[string]int{}
	var history []fault
	end := time.Now().Add(*nemesisDuration)
	for time.Now().Before(end) {
		time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
		k := rng.IntN(10)
		history = append(history, fault{kind: faultKind(k), at: time.Now()})
		switch {
		case k < 3: // SIGKILL a committer, restart it
			c := committers[rng.IntN(3)]
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
			c.cmd, c.out = process(t, c.args...)
			faults["kill committer"]++
		case k < 5: // pause a committer
			c := committers[rng.IntN(3)]
			_ = c.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(time.Duration(1000+rng.IntN(3000)) * time.Millisecond)
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
			faults["pause committer"]++
		case k < 7: // pause a server
			n := nodes[rng.IntN(3)]
			n.signal(syscall.SIGSTOP)
			time.Sleep(time.Duration(1000+rng.IntN(3000)) * time.Millisecond)
			n.signal(syscall.SIGCONT)
			faults["pause server"]++
		case k < 9: // SIGKILL a server, restart it
			n := nodes[rng.IntN(3)]
			n.kill()
			time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
			n.start(t)
			faults["kill server"]++
		default: // all three servers at once
			for _, n := range nodes {
				n.kill()
			}
			time.Sleep(time.Second)
			for _, n := range nodes {
				n.start(t)
			}
			faults["kill all servers"]++
		}
	}
	time.Sleep(10 * time.Second) // the workers commit after the last fault too
	stopWorkers()
	wg.Wait()
	waitFor("JetStream after the faults", 2*time.Minute, func() bool { return loopback.JetStreamReady(url) })

	// The checker.
	committed := map[string]uint64{} // txn id -> version, per the SDK
	rejected := map[string]bool{}
	var ok, rej, unknown int
	for _, o := range outcomes {
		var re *producer.RejectedError
		switch {
		case o.err == nil:
			committed[o.id] = o.version
			ok++
		case errors.As(o.err, &re):
			rejected[o.id] = true
			rej++
		default:
			unknown++
		}
	}
	var lost, dup, wrong, gaps int
	inLog := map[string]uint64{}
	for _, ds := range datasets {
		var want uint64 = 1
		for _, d := range decisions(t, nc, ds) {
			if d.GetOutcome().String() != "OUTCOME_COMMITTED" {
				continue
			}
			if d.GetVersion() != want {
				gaps++
				t.Errorf("%s: committed version %d where %d was next", ds, d.GetVersion(), want)
			}
			want = d.GetVersion() + 1
			if _, seen := inLog[d.GetTxnUuid()]; seen {
				dup++
				t.Errorf("%s: transaction %s committed twice", ds, d.GetTxnUuid())
			}
			inLog[d.GetTxnUuid()] = d.GetVersion()
		}
	}
	for id, v := range committed {
		got, found := inLog[id]
		switch {
		case !found:
			lost++
			t.Errorf("transaction %s: the SDK was told version %d, the log has no commit of it", id, v)
		case got != v:
			wrong++
			t.Errorf("transaction %s: the SDK was told version %d, the log committed it at %d", id, v, got)
		}
	}
	for id := range rejected {
		if v, found := inLog[id]; found {
			wrong++
			t.Errorf("transaction %s: the SDK saw it rejected, the log committed it at %d", id, v)
		}
	}
	t.Logf("seed %d, %v: faults %v; %d commits acknowledged, %d rejected, %d unknown; log %d commits; lost %d, duplicated %d, wrong %d, gaps %d",
		*nemesisSeed, *nemesisDuration, faults, ok, rej, unknown, len(inLog), lost, dup, wrong, gaps)
	// The longest time, per kind of fault, from a fault to every dataset's
	// next acknowledged commit.
	longest := map[string]time.Duration{}
	for _, f := range history {
		for _, ds := range datasets {
			var next time.Time
			for _, o := range outcomes {
				if o.ds == ds && o.err == nil && o.at.After(f.at) && (next.IsZero() || o.at.Before(next)) {
					next = o.at
				}
			}
			if next.IsZero() {
				t.Errorf("%s: no commit after the %s at %v", ds, f.kind, f.at.Format(time.TimeOnly))
				continue
			}
			longest[f.kind] = max(longest[f.kind], next.Sub(f.at).Round(time.Millisecond))
		}
	}
	t.Logf("longest time from a fault to a dataset's next acknowledged commit: %v", longest)
	for i, c := range committers {
		if s := c.out.String(); strings.Contains(s, "panic:") {
			t.Errorf("committer %d panicked:\n%s", i, s)
		}
	}
}

// faultKind names the fault a draw k (0-9) of the schedule injects.
func faultKind(k int) string {
	switch {
	case k < 3:
		return "kill committer"
	case k < 5:
		return "pause committer"
	case k < 7:
		return "pause server"
	case k < 9:
		return "kill server"
	}
	return "kill all servers"
}
