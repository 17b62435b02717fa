package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natstest"
	"cellguard/internal/natstest/loopback"
	"cellguard/internal/nemesis"
	"cellguard/producer"
	"cellguard/proto/lancepb"
)

var (
	nemesisOn       = flag.Bool("nemesis", false, "run the long nemesis: faults drawn from -nemesis.seed for -nemesis.duration (without it, a short run of one fault of each kind)")
	nemesisDuration = flag.Duration("nemesis.duration", 30*time.Second, "how long the long nemesis injects faults")
	nemesisSeed     = flag.Uint64("nemesis.seed", 1, "seed of the fault schedule")
)

// natsNode is one nats-server process of the nemesis cluster.
type natsNode struct {
	name, bin, conf, store string
	cmd                    *exec.Cmd
	log                    *os.File
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

// nemCluster is three nats-server processes whose every link goes
// through a nemesis.Proxy: clients dial a proxy in front of each node's
// client port, and node i reaches node j's route port through its own
// proxy (i→j), so a partition cuts exactly the links it names. Each node
// advertises a route address that refuses connections, and no client
// URLs, so neither gossip nor a client bypasses the proxies.
type nemCluster struct {
	nodes   []*natsNode
	clients []*nemesis.Proxy          // in front of node i's client port
	routes  map[[2]int]*nemesis.Proxy // node i's link to node j's route port
	direct  []string                  // the nodes' own client URLs, for the observer
	url     string                    // the proxied client URLs, for every client under test
}

func startNemCluster(t *testing.T, dir string) *nemCluster {
	t.Helper()
	bin := filepath.Join(dir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("go build nats-server: %v\n%s", err, out)
	}
	ports, err := loopback.FreePorts(7)
	if err != nil {
		t.Fatal(err)
	}
	proxy := func(upstream string) *nemesis.Proxy {
		p, err := nemesis.NewProxy("127.0.0.1:0", upstream)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	addr := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	// A route address nothing listens on (ports[6] was released): a node
	// told of another by gossip fails to dial it and keeps its proxied route.
	sink := proxy(addr(ports[6]))
	c := &nemCluster{routes: map[[2]int]*nemesis.Proxy{}}
	var urls []string
	for i := range 3 {
		c.clients = append(c.clients, proxy(addr(ports[i])))
		urls = append(urls, "nats://"+c.clients[i].Addr())
		c.direct = append(c.direct, "nats://"+addr(ports[i]))
		for j := range 3 {
			if i != j {
				c.routes[[2]int{i, j}] = proxy(addr(ports[3+j]))
			}
		}
	}
	c.url = strings.Join(urls, ",")
	for i := range 3 {
		name := fmt.Sprintf("n%d", i+1)
		var routes []string
		for j := range 3 {
			if i != j {
				routes = append(routes, "nats-route://"+c.routes[[2]int{i, j}].Addr())
			}
		}
		store := filepath.Join(dir, name)
		conf := filepath.Join(dir, name+".conf")
		body := fmt.Sprintf("server_name: %s\nlisten: %s\nmax_payload: 8MB\n"+
			"jetstream { store_dir: %q, sync_interval: always, limits { default_max_consumers: -1 } }\n"+
			"cluster { name: nemesis, listen: %s, advertise: %q, no_advertise: true, routes: [%s] }\n",
			name, addr(ports[i]), store, addr(ports[3+i]), sink.Addr(), strings.Join(routes, ", "))
		if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		lf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		n := &natsNode{name: name, bin: bin, conf: conf, store: store, log: lf}
		c.nodes = append(c.nodes, n)
		n.start(t)
		t.Cleanup(func() { n.kill(); lf.Close() })
	}
	return c
}

// partition cuts node i's routes to and from the other nodes, and its
// client link too when clients is set (its clients then reconnect to
// the majority; otherwise they stay attached to the minority).
func (c *nemCluster) partition(i int, clients bool) {
	for j := range 3 {
		if j != i {
			c.routes[[2]int{i, j}].Cut()
			c.routes[[2]int{j, i}].Cut()
		}
	}
	if clients {
		c.clients[i].Cut()
	}
}

func (c *nemCluster) heal() {
	for _, p := range c.routes {
		p.Heal()
	}
	for _, p := range c.clients {
		p.Heal()
	}
}

// leader asks the nodes directly, one after another, which node leads
// stream, for up to 10 s (an election may be under way); -1 when none
// answers.
func (c *nemCluster) leader(stream string) int {
	for range 10 {
		if l := c.leaderNow(stream); l >= 0 {
			return l
		}
		time.Sleep(time.Second)
	}
	return -1
}

func (c *nemCluster) leaderNow(stream string) int {
	for _, u := range c.direct {
		nc, err := nats.Connect(u, nats.Timeout(time.Second), nats.NoReconnect())
		if err != nil {
			continue
		}
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s, err := js.Stream(ctx, stream)
		var si *jetstream.StreamInfo
		if err == nil {
			si, err = s.Info(ctx)
		}
		cancel()
		nc.Close()
		if err == nil && si.Cluster != nil {
			for i, n := range c.nodes {
				if n.name == si.Cluster.Leader {
					return i
				}
			}
		}
	}
	return -1
}

// replicaStates makes each node in turn the leader of stream (a
// stepdown with that node preferred) and returns the stream's state as
// each leader reports it: what each replica holds.
func (c *nemCluster) replicaStates(stream string) map[string]string {
	out := map[string]string{}
	for i, n := range c.nodes {
		out[n.name] = "never led"
		for range 20 {
			if c.leaderNow(stream) == i {
				break
			}
			nc, err := nats.Connect(c.direct[i], nats.Timeout(time.Second), nats.NoReconnect())
			if err == nil {
				_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, []byte(fmt.Sprintf(`{"placement":{"preferred":%q}}`, n.name)), 2*time.Second)
				nc.Close()
			}
			time.Sleep(500 * time.Millisecond)
		}
		if c.leaderNow(stream) != i {
			continue
		}
		nc, err := nats.Connect(c.direct[i], nats.Timeout(time.Second), nats.NoReconnect())
		if err != nil {
			continue
		}
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if s, err := js.Stream(ctx, stream); err == nil {
			if si, err := s.Info(ctx); err == nil {
				out[n.name] = fmt.Sprintf("msgs %d, first %d, last %d, deleted %d", si.State.Msgs, si.State.FirstSeq, si.State.LastSeq, si.State.NumDeleted)
			}
		}
		cancel()
		nc.Close()
	}
	return out
}

// corruptNewestBlock damages the newest block file of the decision
// stream's store on n (stopped): truncated to half its size, or one bit
// flipped in its second half. It returns what it did.
func corruptNewestBlock(n *natsNode, rng *rand.Rand) (string, error) {
	blks, err := filepath.Glob(filepath.Join(n.store, "jetstream", "*", "streams", "CG_DEC", "msgs", "*.blk"))
	if err != nil || len(blks) == 0 {
		return "", fmt.Errorf("%s: no CG_DEC block file (%v)", n.name, err)
	}
	num := func(p string) int { v, _ := strconv.Atoi(strings.TrimSuffix(filepath.Base(p), ".blk")); return v }
	slices.SortFunc(blks, func(a, b string) int { return num(a) - num(b) })
	blk := blks[len(blks)-1]
	b, err := os.ReadFile(blk)
	if err != nil {
		return "", err
	}
	if len(b) < 2 {
		return "", fmt.Errorf("%s: %s holds %d bytes", n.name, blk, len(b))
	}
	var what string
	if rng.IntN(2) == 0 {
		b = b[:len(b)/2]
		what = fmt.Sprintf("truncated %s/%s to %d bytes", n.name, filepath.Base(blk), len(b))
	} else {
		off := len(b)/2 + rng.IntN(len(b)-len(b)/2)
		bit := rng.IntN(8)
		b[off] ^= 1 << bit
		what = fmt.Sprintf("flipped bit %d of byte %d of %d in %s/%s", bit, off, len(b), n.name, filepath.Base(blk))
	}
	return what, os.WriteFile(blk, b, 0o644)
}

// committerProc is one `serve` process of the nemesis.
type committerProc struct {
	args []string
	cmd  *exec.Cmd
	out  *syncBuffer
}

// fault is one injected fault: its kind, what it did, when it began and
// how long it lasted.
type fault struct {
	kind, detail string
	at           time.Time
	lasted       time.Duration
}

// The kinds of fault, in the order the short run injects them.
const (
	faultKillCommitter  = "kill committer"
	faultPauseCommitter = "pause committer"
	faultPauseServer    = "pause server"
	faultKillServer     = "kill server"
	faultPartitionNode  = "partition node"
	faultPartitionLead  = "partition leader"
	faultKillAll        = "kill all servers"
	faultCorruptBlock   = "corrupt block"
)

var faultKinds = []string{faultKillCommitter, faultPauseCommitter, faultPauseServer, faultKillServer,
	faultPartitionNode, faultPartitionLead, faultKillAll, faultCorruptBlock}

// TestNemesis runs a 3-node JetStream cluster of separate nats-server
// processes (built from the pinned module, sync_interval: always) behind
// TCP proxies on loopback, three `serve` processes sharing the partitions
// (R3 streams) and SDK workers committing appends to three datasets,
// while faults are injected: committer SIGKILL (restarted) and SIGSTOP
// (1-4 s), server SIGSTOP (1-4 s) and SIGKILL (restarted), a partition of
// one node and of the decision stream's leader (routes cut, and its
// client link half the time; healed after 2-8 s), all three servers
// killed at once (restarted), and a node stopped, the newest block file
// of its decision stream truncated or bit-flipped, and restarted. Without
// -nemesis it injects each kind once, in a short run; with it, kinds drawn
// from -nemesis.seed for -nemesis.duration.
//
// The checker (nemesis.Check) reads the final logs: each dataset's
// committed versions are 1..head with no gap, no transaction is committed
// twice, every Commit that returned version v has its transaction at v,
// and no transaction an SDK saw rejected is committed; every dataset
// commits again after each fault; no committer panicked.
func TestNemesis(t *testing.T) {
	dir := t.TempDir()
	cl := startNemCluster(t, dir)
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
	waitFor("JetStream on the cluster", 2*time.Minute, func() bool { return loopback.JetStreamReady(cl.url) })

	committers := make([]*committerProc, 3)
	for i := range committers {
		committers[i] = &committerProc{args: []string{"serve", "--nats-url", cl.url, "--http", "", "--replicas", "3", "--pinned-ttl", "3s",
			"--ack-wait", "2s", "--log-level", "warn", "--batch", "32", "--publish=false"}}
		committers[i].cmd, committers[i].out = process(t, committers[i].args...)
	}

	nc, _ := natstest.Connect(t, cl.url)
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

	// Workers: two per dataset, each reads the latest version and commits
	// an append read at it, one after another.
	var mu sync.Mutex
	var ops []nemesis.Op
	record := func(o nemesis.Op) {
		mu.Lock()
		ops = append(ops, o)
		mu.Unlock()
	}
	ctx, stopWorkers := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 6 {
		ds := datasets[w%len(datasets)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			wnc, _ := natstest.Connect(t, cl.url)
			wpc, err := producer.New(wnc, producer.Config{Timeout: 30 * time.Second})
			if err != nil {
				t.Error(err)
				return
			}
			defer wpc.Close()
			for ctx.Err() == nil {
				call := time.Now()
				snap, err := wpc.Latest(ctx, ds)
				if err != nil {
					time.Sleep(200 * time.Millisecond)
					continue
				}
				record(nemesis.Op{Client: w, Dataset: ds, Kind: nemesis.Read, Version: snap.Version(), Call: call, Return: time.Now()})
				txn := snap.NewTxn().Append(fragment("data/" + newUUID() + ".lance"))
				cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				call = time.Now()
				v, err := wpc.Commit(cctx, txn)
				ret := time.Now()
				cancel()
				o := nemesis.Op{Client: w, Dataset: ds, Txn: txn.ID(), Read: snap.Version(), Version: v, Call: call, Return: ret}
				var re *producer.RejectedError
				switch {
				case err == nil:
					o.Result = nemesis.Committed
				case errors.As(err, &re), errors.Is(err, producer.ErrNotStaged):
					o.Result = nemesis.Rejected
				default:
					o.Result = nemesis.Unknown
				}
				record(o)
			}
		}()
	}

	// The fault schedule.
	rng := rand.New(rand.NewPCG(*nemesisSeed, 0x6e656d))
	var schedule func() (string, bool)
	if *nemesisOn {
		end := time.Now().Add(*nemesisDuration)
		schedule = func() (string, bool) {
			return faultKinds[rng.IntN(len(faultKinds))], time.Now().Before(end)
		}
	} else {
		next := 0
		schedule = func() (string, bool) {
			if next == len(faultKinds) {
				return "", false
			}
			next++
			return faultKinds[next-1], true
		}
	}
	faults := map[string]int{}
	var history []fault
	gap := func() time.Duration { return time.Duration(1000+rng.IntN(2000)) * time.Millisecond }
	pause := func() time.Duration { return time.Duration(1000+rng.IntN(3000)) * time.Millisecond }
	for {
		kind, more := schedule()
		if !more {
			break
		}
		time.Sleep(gap())
		f := fault{kind: kind, at: time.Now()}
		switch kind {
		case faultKillCommitter:
			i := rng.IntN(3)
			c := committers[i]
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
			c.cmd, c.out = process(t, c.args...)
			f.detail = fmt.Sprintf("committer %d", i)
		case faultPauseCommitter:
			i := rng.IntN(3)
			c := committers[i]
			_ = c.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(pause())
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
			f.detail = fmt.Sprintf("committer %d", i)
		case faultPauseServer:
			n := cl.nodes[rng.IntN(3)]
			n.signal(syscall.SIGSTOP)
			time.Sleep(pause())
			n.signal(syscall.SIGCONT)
			f.detail = n.name
		case faultKillServer:
			n := cl.nodes[rng.IntN(3)]
			n.kill()
			time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
			n.start(t)
			f.detail = n.name
		case faultPartitionNode, faultPartitionLead:
			i := rng.IntN(3)
			if kind == faultPartitionLead {
				if l := cl.leader("CG_DEC"); l >= 0 {
					i = l
				} else {
					f.detail = "no leader known, "
				}
			}
			clients := rng.IntN(2) == 0
			cl.partition(i, clients)
			time.Sleep(time.Duration(2000+rng.IntN(6000)) * time.Millisecond)
			cl.heal()
			f.detail += fmt.Sprintf("%s, client link cut %v", cl.nodes[i].name, clients)
		case faultKillAll:
			for _, n := range cl.nodes {
				n.kill()
			}
			time.Sleep(time.Second)
			for _, n := range cl.nodes {
				n.start(t)
			}
		case faultCorruptBlock:
			n := cl.nodes[rng.IntN(3)]
			n.kill()
			what, err := corruptNewestBlock(n, rng)
			if err != nil {
				t.Errorf("corrupt a block: %v", err)
			}
			n.start(t)
			f.detail = what
		}
		f.lasted = time.Since(f.at)
		faults[kind]++
		history = append(history, f)
		t.Logf("%s %s: %s (%v)", f.at.Format("15:04:05.000"), kind, f.detail, f.lasted.Round(time.Millisecond))
	}
	// The workers go on until every dataset has committed after the last
	// fault (at most 3 minutes), and for 5 s more.
	if len(history) > 0 {
		last := history[len(history)-1].at
		deadline := time.Now().Add(3 * time.Minute)
		for time.Now().Before(deadline) {
			mu.Lock()
			done := map[string]bool{}
			for _, o := range ops {
				if o.Kind == nemesis.Commit && o.Result == nemesis.Committed && o.Return.After(last) {
					done[o.Dataset] = true
				}
			}
			mu.Unlock()
			if len(done) == len(datasets) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	time.Sleep(5 * time.Second)
	stopWorkers()
	wg.Wait()
	cl.heal()
	waitFor("JetStream after the faults", 2*time.Minute, func() bool { return loopback.JetStreamReady(cl.url) })

	// What the servers said about the damaged block files.
	for _, n := range cl.nodes {
		b, _ := os.ReadFile(n.log.Name())
		for _, line := range bytes.Split(b, []byte("\n")) {
			s := string(line)
			if strings.Contains(s, "CG_DEC") && (strings.Contains(s, "[ERR]") || strings.Contains(s, "[WRN]") ||
				strings.Contains(strings.ToLower(s), "corrupt") || strings.Contains(strings.ToLower(s), "rebuil")) {
				t.Logf("%s: %s", n.name, s)
			}
		}
	}

	t.Logf("CG_DEC as each node reports it when it leads: %v", cl.replicaStates("CG_DEC"))

	// The checker.
	logs := map[string][]nemesis.Decided{}
	for _, ds := range datasets {
		for _, d := range decisions(t, nc, ds) {
			if d.GetOutcome().String() == "OUTCOME_COMMITTED" {
				logs[ds] = append(logs[ds], nemesis.Decided{Txn: d.GetTxnUuid(), Version: d.GetVersion()})
			}
		}
	}
	rep := nemesis.Check(ops, logs)
	for _, p := range rep.Problems {
		t.Error(p)
	}
	t.Logf("seed %d, long %v %v: faults %v; %v", *nemesisSeed, *nemesisOn, *nemesisDuration, faults, rep)
	// The longest time, per kind of fault, from a fault's start to every
	// dataset's next acknowledged commit.
	longest := map[string]time.Duration{}
	for _, f := range history {
		for _, ds := range datasets {
			var next time.Time
			for _, o := range ops {
				if o.Dataset == ds && o.Kind == nemesis.Commit && o.Result == nemesis.Committed && o.Return.After(f.at) && (next.IsZero() || o.Return.Before(next)) {
					next = o.Return
				}
			}
			if next.IsZero() {
				t.Errorf("%s: no commit after the %s at %v (within 3 minutes of the last fault)", ds, f.kind, f.at.Format(time.TimeOnly))
				continue
			}
			longest[f.kind] = max(longest[f.kind], next.Sub(f.at).Round(time.Millisecond))
		}
	}
	t.Logf("longest time from a fault's start to a dataset's next acknowledged commit: %v", longest)
	for i, c := range committers {
		if s := c.out.String(); strings.Contains(s, "panic:") {
			t.Errorf("committer %d panicked:\n%s", i, s)
		}
		if t.Failed() {
			s := c.out.String()
			t.Logf("committer %d, the last 4 kB of its output:\n%s", i, s[max(0, len(s)-4096):])
		}
	}
}
