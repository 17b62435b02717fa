package main

import (
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/anishathalye/porcupine"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/lancedbtest"
	"cellguard/internal/natstest"
	"cellguard/internal/natstest/loopback"
	"cellguard/internal/nemesis"
	lancepub "cellguard/internal/publish"
	"cellguard/internal/subject"
	"cellguard/producer"
	"cellguard/proto/lancepb"
)

var (
	nemesisOn       = flag.Bool("nemesis", false, "run the long nemesis: faults drawn from -nemesis.seed for -nemesis.duration (without it, a short run of one fault of each kind)")
	nemesisDuration = flag.Duration("nemesis.duration", 30*time.Second, "how long the long nemesis injects faults")
	nemesisSeed     = flag.Uint64("nemesis.seed", 1, "seed of the fault schedule")
	nemesisLanceDB  = flag.Bool("nemesis.lancedb", false, "the short nemesis runs the LanceDB writers too (the long one always does)")
	nemesisFaults   = flag.String("nemesis.faults", "", "the long nemesis draws only these kinds of fault (comma-separated, e.g. \"corrupt block,kill server\"; default all)")
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

// replicaLogs makes each node in turn the leader of CG_DEC (a stepdown
// with that node preferred) and reads, from that leader (STREAM.MSG.GET,
// never a direct get), every record of the stream: what each replica
// holds. held[node][seq] is the committed record at seq (its dataset,
// transaction and version); state[node] the stream's state as that
// leader reports it.
func (c *nemCluster) replicaLogs(t *testing.T) (held map[string]map[uint64]nemRecord, state map[string]string) {
	held, state = map[string]map[uint64]nemRecord{}, map[string]string{}
	for i, n := range c.nodes {
		state[n.name] = "never led"
		for range 30 {
			if c.leaderNow("CG_DEC") == i {
				break
			}
			nc, err := nats.Connect(c.direct[i], nats.Timeout(time.Second), nats.NoReconnect())
			if err == nil {
				_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN.CG_DEC", []byte(fmt.Sprintf(`{"placement":{"preferred":%q}}`, n.name)), 2*time.Second)
				nc.Close()
			}
			time.Sleep(500 * time.Millisecond)
		}
		if c.leaderNow("CG_DEC") != i {
			continue
		}
		nc, err := nats.Connect(c.direct[i], nats.Timeout(time.Second), nats.NoReconnect())
		if err != nil {
			continue
		}
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		si, err := func() (*jetstream.StreamInfo, error) {
			s, err := js.Stream(ctx, "CG_DEC")
			if err != nil {
				return nil, err
			}
			return s.Info(ctx)
		}()
		cancel()
		if err != nil {
			nc.Close()
			continue
		}
		state[n.name] = fmt.Sprintf("msgs %d, first %d, last %d, deleted %d", si.State.Msgs, si.State.FirstSeq, si.State.LastSeq, si.State.NumDeleted)
		recs := map[uint64]nemRecord{}
		for seq := si.State.FirstSeq; seq <= si.State.LastSeq; seq++ {
			resp, err := nc.Request("$JS.API.STREAM.MSG.GET.CG_DEC", []byte(fmt.Sprintf(`{"seq":%d}`, seq)), 2*time.Second)
			if err != nil {
				t.Logf("%s: record %d: %v", n.name, seq, err)
				continue
			}
			var r struct {
				Message *struct {
					Subject string `json:"subject"`
					Header  []byte `json:"hdrs"`
				} `json:"message"`
			}
			if json.Unmarshal(resp.Data, &r) != nil || r.Message == nil {
				continue // not held
			}
			parts := strings.Split(r.Message.Subject, ".")
			if len(parts) != 4 || parts[3] != "committed" {
				continue
			}
			hdr, err := nats.DecodeHeadersMsg(r.Message.Header)
			if err != nil {
				continue
			}
			v, _ := strconv.ParseUint(hdr.Get(subject.HdrVersion), 10, 64)
			recs[seq] = nemRecord{ds: parts[2], txn: hdr.Get(subject.HdrTxnID), version: v}
		}
		held[n.name] = recs
		nc.Close()
	}
	return held, state
}

// nemRecord is a committed record of CG_DEC.
type nemRecord struct {
	ds, txn string
	version uint64
}

// quorumLogs is, per dataset, the committed records held by at least two
// of the three replicas, in stream order: the log a majority keeps.
func quorumLogs(held map[string]map[uint64]nemRecord) map[string][]nemesis.Decided {
	count := map[uint64]int{}
	rec := map[uint64]nemRecord{}
	for _, recs := range held {
		for seq, r := range recs {
			count[seq]++
			rec[seq] = r
		}
	}
	var seqs []uint64
	for seq, n := range count {
		if n >= 2 {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)
	out := map[string][]nemesis.Decided{}
	for _, seq := range seqs {
		r := rec[seq]
		out[r.ds] = append(out[r.ds], nemesis.Decided{Txn: r.txn, Version: r.version})
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
// processes (built from the pinned module, sync_interval: always) whose
// every client and route link goes through a nemesis.Proxy on loopback,
// three `serve` processes sharing the partitions (R3 streams), publishing
// to one lance root and each serving the Lance namespace, six SDK workers
// (read the latest version, commit an append read at it) on three
// datasets, and one LanceDB writer per judge (0.31, 0.39) appending rows
// through the namespaces to a table of its own, while faults are
// injected: committer SIGKILL (restarted) and SIGSTOP, server SIGSTOP and
// SIGKILL (restarted), a partition of one node and of the decision log's
// leader (routes cut, and its client link half the time; then healed),
// all three servers killed at once (restarted), and a node stopped, the
// newest block file of its CG_DEC store truncated or bit-flipped, and
// restarted. Without -nemesis it injects each kind once with short
// durations and without the LanceDB writers unless -nemesis.lancedb (the
// run of `make test`); with it, kinds drawn from -nemesis.seed for
// -nemesis.duration.
//
// The checkers: each replica of CG_DEC is read from itself as the leader;
// against the records a majority holds, nemesis.Check (versions 1..head
// in order without a gap, no transaction committed twice, every Commit
// that returned v has its transaction at v, no transaction an SDK saw
// rejected is committed); each dataset's reads and commits, with their
// call and return times, are linearizable as a register of the head
// version (nemesis.Linearizable, porcupine; an unknown outcome may take
// effect); every published table follows its log (publish.Verify, and
// `dataset verify` for the LanceDB tables) and holds every row LanceDB
// was told it appended; every dataset commits again after each fault; no
// committer panicked.
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

	// Three committers, each publishing to one lance root and serving the
	// Lance namespace on a port of its own (the same after a restart).
	lanceRoot := filepath.Join(dir, "lance")
	nsPorts, err := loopback.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	var nsURIs []string
	committers := make([]*committerProc, 3)
	for i := range committers {
		ns := fmt.Sprintf("127.0.0.1:%d", nsPorts[i])
		nsURIs = append(nsURIs, "http://"+ns)
		committers[i] = &committerProc{args: []string{"serve", "--nats-url", cl.url, "--http", "", "--replicas", "3", "--pinned-ttl", "3s",
			"--ack-wait", "2s", "--log-level", "warn", "--batch", "32", "--lance-root", lanceRoot, "--lance-namespace", ns}}
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

	// LanceDB writers: one per judge, each appending one row at a time to
	// its own table through the namespaces (the next one after an error).
	stop := filepath.Join(dir, "lancedb-stop")
	var lanceTables, lanceLogs []string
	lanceTimeout := 30 * time.Second // an append without an answer by then counts as failed (unknown)
	if !*nemesisOn {
		lanceTimeout = 10 * time.Second
	}
	var lwg sync.WaitGroup
	judges := lancedbtest.Versions
	if !*nemesisOn && !*nemesisLanceDB {
		judges = nil // the short run's budget: LanceDB writers stall for 25-35 s after a fault
	}
	for j, judge := range judges {
		table := "lw" + strings.TrimPrefix(judge.Name, "lance")
		log := filepath.Join(dir, table+".calls")
		lanceTables = append(lanceTables, table)
		lanceLogs = append(lanceLogs, log)
		var created struct{ OK bool }
		judge.Run(t, lancedbtest.Prelude+lanceCreateScript, map[string]any{"uris": nsURIs, "table": table}, &created)
		lwg.Add(1)
		go func() {
			defer lwg.Done()
			if _, err := judge.RunErr(t, lancedbtest.Prelude+lanceWriterScript, map[string]any{"uris": nsURIs, "table": table,
				"base": (j + 1) * 1_000_000, "stop": stop, "log": log, "timeoutMs": lanceTimeout.Milliseconds()}); err != nil {
				t.Errorf("LanceDB writer %s: %v", judge.Name, err)
			}
		}()
	}

	// The fault schedule.
	rng := rand.New(rand.NewPCG(*nemesisSeed, 0x6e656d))
	var schedule func() (string, bool)
	if *nemesisOn {
		kinds := faultKinds
		if *nemesisFaults != "" {
			kinds = strings.Split(*nemesisFaults, ",")
			for _, k := range kinds {
				if !slices.Contains(faultKinds, k) {
					t.Fatalf("-nemesis.faults: no fault %q (kinds: %s)", k, strings.Join(faultKinds, ", "))
				}
			}
		}
		end := time.Now().Add(*nemesisDuration)
		schedule = func() (string, bool) {
			return kinds[rng.IntN(len(kinds))], time.Now().Before(end)
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
	// Durations in ms: between faults, of a pause, of a server's downtime,
	// of a partition (each drawn from [lo, lo+span)); the short run keeps
	// them at their low ends.
	gapMS, pauseMS, downMS, cutMS := [2]int{1000, 2000}, [2]int{1000, 3000}, [2]int{500, 1500}, [2]int{2000, 6000}
	if !*nemesisOn {
		gapMS, pauseMS, downMS, cutMS = [2]int{300, 200}, [2]int{1000, 500}, [2]int{300, 200}, [2]int{2000, 1000}
	}
	draw := func(r [2]int) time.Duration { return time.Duration(r[0]+rng.IntN(r[1])) * time.Millisecond }
	gap := func() time.Duration { return draw(gapMS) }
	pause := func() time.Duration { return draw(pauseMS) }
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
			time.Sleep(draw(downMS))
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
			time.Sleep(draw(cutMS))
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
			for j, table := range lanceTables {
				for _, c := range readLanceCalls(t, lanceLogs[j], table) {
					if c.OK && c.end().After(last) {
						done[table] = true
					}
				}
			}
			for ds := range refusals(committers) {
				done[ds] = true // stopped loudly: it commits no more
			}
			if len(done) >= len(datasets)+len(lanceTables) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if *nemesisOn {
		time.Sleep(5 * time.Second)
	}
	stopWorkers()
	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	lwg.Wait()
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

	// The checker: the clients' outcomes against the log a majority of
	// replicas holds (each replica read from itself as the leader), and
	// against each replica's own log (JetStream's handling of a damaged
	// block shows there). A dataset a committer stopped because its log
	// did not replay is listed: that is cellguard refusing, loudly, to
	// decide from a log that disagrees with what it decided before.
	held, state := cl.replicaLogs(t)
	t.Logf("CG_DEC as each node holds it (leading): %v", state)
	rep := nemesis.Check(ops, quorumLogs(held))
	for _, p := range rep.Problems {
		t.Error(p)
	}
	t.Logf("seed %d, long %v %v: faults %v; %v", *nemesisSeed, *nemesisOn, *nemesisDuration, faults, rep)
	// Each dataset's history, every worker's reads and commits with their
	// call and return times, against the register model (porcupine).
	for _, ds := range datasets {
		start := time.Now()
		res, desc := nemesis.Linearizable(ops, ds, 1, time.Minute)
		t.Logf("%s: linearizable: %s (checked in %v)", ds, res, time.Since(start).Round(time.Millisecond))
		if res != porcupine.Ok {
			t.Errorf("%s: the clients' history is %s: %s", ds, res, desc)
		}
	}
	for _, n := range cl.nodes {
		if _, ok := held[n.name]; !ok {
			t.Errorf("%s never led CG_DEC after the faults: its replica was not read", n.name)
			continue
		}
		one := map[string]map[uint64]nemRecord{n.name: held[n.name], "copy": held[n.name]}
		if r := nemesis.Check(ops, quorumLogs(one)); !r.OK() {
			t.Logf("%s's replica alone: %v (first: %s)", n.name, r, r.Problems[0])
		}
	}
	rereads := 0
	for i, c := range committers {
		for _, line := range strings.Split(c.out.String(), "\n") {
			switch {
			case strings.Contains(line, "dataset stopped"):
				t.Logf("committer %d refused: %s", i, line)
			case strings.Contains(line, "at the stream leader"), strings.Contains(line, "another replica of the decision log to lead"):
				rereads++
				t.Logf("committer %d read again at the leader: %s", i, line)
			}
		}
	}
	t.Logf("committers' reads done again at the stream leader: %d", rereads)
	// A dataset stopped because its log did not replay is cellguard
	// refusing to decide from a log that disagrees with what it decided:
	// allowed after a damaged block (a replica that lost records serves
	// reads that skip them), an error otherwise.
	refused := refusals(committers)
	var firstCorrupt time.Time
	for _, f := range history {
		if f.kind == faultCorruptBlock {
			firstCorrupt = f.at
			break
		}
	}
	for ds, at := range refused {
		if firstCorrupt.IsZero() || at.Before(firstCorrupt) {
			t.Errorf("%s: stopped as untrusted at %v, with no damaged block before", ds, at.Format("15:04:05.000"))
		} else {
			t.Logf("%s: stopped loudly at %v (its log did not replay after a damaged block); it commits no more", ds, at.Format("15:04:05.000"))
		}
	}
	// The published tables: each follows its log (publish.Verify; the SDK
	// workers' fragments name data files nobody wrote, so those alone are
	// allowed missing there), and every row LanceDB was told it appended is
	// in its table, read by that LanceDB from the lance root.
	lanceCalls := make([][]lanceCall, len(lanceTables))
	for j, judge := range judges {
		table := lanceTables[j]
		calls := readLanceCalls(t, lanceLogs[j], table)
		lanceCalls[j] = calls
		if len(calls) == 0 {
			t.Errorf("LanceDB writer %s recorded no call", judge.Name)
			continue
		}
		pv := waitPublished(t, nc, table)
		var b bytes.Buffer
		verifyErr := runCLI(t, &b, "dataset", "verify", table, "--nats-url", cl.url)
		t.Logf("dataset verify %s: %v\n%s", table, verifyErr, strings.TrimSpace(b.String()))
		var rows struct{ IDs []int64 }
		judge.Run(t, lancedbtest.Prelude+lanceReadScript, map[string]any{"root": lanceRoot, "table": table}, &rows)
		count := map[int64]int{}
		for _, id := range rows.IDs {
			count[id]++
		}
		var okCalls, failed, failedIn, twice int
		attempted := map[int64]bool{}
		for _, c := range calls {
			attempted[c.ID] = true
			switch {
			case c.OK && count[c.ID] == 0:
				t.Errorf("%s: LanceDB appended row %d (OK at %v), the published table lacks it", table, c.ID, c.end().Format("15:04:05.000"))
			case c.OK:
				okCalls++
			case count[c.ID] > 0:
				failed++
				failedIn++
			default:
				failed++
			}
			if count[c.ID] > 1 {
				twice++
			}
		}
		for id := range count {
			if id >= 0 && !attempted[id] {
				t.Errorf("%s: row %d is in the table, no writer appended it", table, id)
			}
		}
		t.Logf("%s (LanceDB %s): %d appends OK, %d failed (%d of them in the table anyway), %d rows in the table twice; %d rows",
			table, judge.LanceDB, okCalls, failed, failedIn, twice, len(rows.IDs))
		// The published table must be what the log says. One difference
		// comes from the client: a LanceDB client writes the transaction
		// file itself before its version/create call, and when that call
		// fails although the commit landed, the file the published version
		// names is gone afterwards (seen with LanceDB 0.31; Lance cleans up
		// what a commit it believes failed wrote). It is reported (here and
		// by dataset verify), and allowed only when some failed append is
		// in the table.
		for _, d := range pv.Diffs {
			if d.Kind == lancepub.DiffTransactionMissing && failedIn > 0 {
				t.Logf("%s: %s (an append LanceDB saw fail is in the table)", table, d)
				continue
			}
			t.Errorf("%s: published table differs from the log: %s", table, d)
		}
		if verifyErr != nil && len(pv.Diffs) == 0 {
			if _, stopped := refused[table]; stopped && strings.Contains(verifyErr.Error(), "has version") {
				// dataset verify read across the damaged replica's hole
				// too, and refused (loud), as the namespace had.
				t.Logf("dataset verify %s refused: %v", table, verifyErr)
			} else {
				t.Errorf("dataset verify %s: %v", table, verifyErr)
			}
		}
		for _, c := range calls {
			if !c.OK {
				t.Logf("%s: append of %d failed [%s, %s]: %s", table, c.ID, time.UnixMilli(c.T0).Format("15:04:05.000"), c.end().Format("15:04:05.000"), c.Err)
			}
		}
	}
	for _, ds := range datasets {
		v := waitPublished(t, nc, ds)
		for _, d := range v.Diffs {
			if d.Kind != lancepub.DiffDataMissing {
				t.Errorf("%s: published table differs from the log: %s", ds, d)
			}
		}
	}

	// The longest time, per kind of fault, from a fault's start to every
	// dataset's next acknowledged commit (LanceDB's tables: its next
	// append that returned OK).
	for j := range judges {
		for _, c := range lanceCalls[j] {
			if c.OK {
				ops = append(ops, nemesis.Op{Dataset: c.table, Kind: nemesis.Commit, Result: nemesis.Committed, Return: c.end()})
			}
		}
	}
	longest := map[string]time.Duration{}
	for _, f := range history {
		for _, ds := range append(slices.Clone(datasets), lanceTables...) {
			var next time.Time
			for _, o := range ops {
				if o.Dataset == ds && o.Kind == nemesis.Commit && o.Result == nemesis.Committed && o.Return.After(f.at) && (next.IsZero() || o.Return.Before(next)) {
					next = o.Return
				}
			}
			if at, ok := refused[ds]; ok && !firstCorrupt.IsZero() && !at.Before(firstCorrupt) && (next.IsZero() || next.After(at)) {
				continue // stopped loudly before it could commit again
			}
			if next.IsZero() {
				t.Errorf("%s: no commit after the %s at %v (within 3 minutes of the last fault)", ds, f.kind, f.at.Format(time.TimeOnly))
				continue
			}
			key := f.kind
			if slices.Contains(lanceTables, ds) {
				key += " (LanceDB)"
			}
			longest[key] = max(longest[key], next.Sub(f.at).Round(time.Millisecond))
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

// lanceCall is one append a LanceDB writer made: the row's id, whether
// LanceDB reported it appended, and when (ms since the epoch).
type lanceCall struct {
	ID     int64  `json:"id"`
	OK     bool   `json:"ok"`
	Err    string `json:"err"`
	T0, T1 int64
	table  string
}

func (c lanceCall) end() time.Time { return time.UnixMilli(c.T1) }

// lanceCreateScript creates input.table through the first namespace that
// answers (within two minutes).
const lanceCreateScript = `
const input = JSON.parse(await readStdin());
const deadline = Date.now() + 120000;
for (let k = 0; ; k++) {
  try {
    const db = await lancedb.connectNamespace("rest", { uri: input.uris[k % input.uris.length] });
    await db.createTable(input.table, [{ id: -1 }]);
    break;
  } catch (e) {
    if (Date.now() > deadline) throw e;
    await new Promise((r) => setTimeout(r, 500));
  }
}
process.stdout.write(JSON.stringify({ OK: true }));
`

// readLanceCalls reads the calls a LanceDB writer has recorded so far
// (one JSON object a line; a line being written is skipped).
func readLanceCalls(t *testing.T, path, table string) []lanceCall {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Error(err)
	}
	var out []lanceCall
	for _, line := range bytes.Split(b, []byte("\n")) {
		var c lanceCall
		if json.Unmarshal(line, &c) == nil {
			c.table = table
			out = append(out, c)
		}
	}
	return out
}

// lanceWriterScript appends rows {id: base+n} to input.table one at a
// time until the file input.stop exists, moving to the next namespace
// after an error or a call without an answer in input.timeoutMs; it appends every call,
// as a line of JSON, to the file input.log.
const lanceWriterScript = `
import * as fs from "node:fs";
const input = JSON.parse(await readStdin());
const calls = { push: (c) => fs.appendFileSync(input.log, JSON.stringify(c) + "\n") };
let k = 0, tbl = null, n = 0;
const timeout = (ms) => new Promise((_, rej) => setTimeout(() => rej(new Error("no answer in " + ms + " ms")), ms));
while (!fs.existsSync(input.stop)) {
  if (tbl === null) {
    try {
      const db = await lancedb.connectNamespace("rest", { uri: input.uris[k % input.uris.length] });
      tbl = await Promise.race([db.openTable(input.table), timeout(10000)]);
    } catch (e) {
      k++;
      await new Promise((r) => setTimeout(r, 200));
      continue;
    }
  }
  const id = input.base + n++;
  const T0 = Date.now();
  try {
    await Promise.race([tbl.add([{ id }]), timeout(input.timeoutMs)]);
    calls.push({ id, ok: true, T0, T1: Date.now() });
  } catch (e) {
    calls.push({ id, ok: false, err: String(e && e.message ? e.message : e).slice(0, 300), T0, T1: Date.now() });
    tbl = null;
    k++;
  }
}
process.stdout.write("{}");
process.exit(0);
`

// lanceReadScript reads every id of input.table under input.root.
const lanceReadScript = `
const input = JSON.parse(await readStdin());
const tbl = await (await lancedb.connect(input.root)).openTable(input.table);
const IDs = (await tbl.query().toArray()).map((r) => Number(r.id));
process.stdout.write(JSON.stringify({ IDs }));
`

// waitPublished waits (up to 2 minutes) until ds's newest published
// version is its log's head, and returns the verification then.
func waitPublished(t *testing.T, nc *nats.Conn, ds string) *lancepub.Verification {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		v, err := func() (*lancepub.Verification, error) {
			l, loc, err := openPublished(t.Context(), nc, "cg", ds, "")
			if err != nil {
				return nil, err
			}
			defer loc.Close()
			return lancepub.Verify(t.Context(), l, ds, loc)
		}()
		if err == nil && len(v.Published) > 0 && v.Published[len(v.Published)-1] == v.LogHead {
			return v
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("log head %d, published %d versions", v.LogHead, len(v.Published))
			}
			t.Fatalf("%s: not published within 2 minutes of the faults' end: %v", ds, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// refusals returns, per dataset, when a committer first stopped it
// because its log did not replay ("dataset stopped"), or the namespace
// first refused a table's commit because its log did not replay.
func refusals(committers []*committerProc) map[string]time.Time {
	out := map[string]time.Time{}
	field := func(line, key string) string {
		i := strings.Index(line, key+"=")
		if i < 0 {
			return ""
		}
		return strings.Fields(line[i+len(key)+1:])[0]
	}
	for _, c := range committers {
		for _, line := range strings.Split(c.out.String(), "\n") {
			var ds string
			switch {
			case strings.Contains(line, "dataset stopped"):
				ds = field(line, "dataset")
			case strings.Contains(line, "namespace request refused") && strings.Contains(line, "has version"):
				if p := strings.Split(field(line, "path"), "/"); len(p) > 3 {
					ds = p[3]
				}
			}
			at, err := time.Parse(time.RFC3339Nano, field(line, "time"))
			if ds == "" || err != nil {
				continue
			}
			if prev, ok := out[ds]; !ok || at.Before(prev) {
				out[ds] = at
			}
		}
	}
	return out
}
