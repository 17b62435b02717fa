package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"cellguard/internal/natstest/loopback"
)

const benchHelp = `usage: cellguard bench [flags]

Measures a real committer on embedded JetStream (in this process) beside
raw JetStream doing the same I/O with nothing decided, in the same run:
for each batch size a raw and a committer run at full speed (closed-loop
producers), and with -latency both again at half the committer's rate
(open loop); committer runs with preconditions; and for each -datasets
count a raw and a committer run over that many datasets, each with
-datasets-txns appends: in a closed loop of -producers producers (at most
one per dataset, which gets its appends one after another), and with
-latency both again in an open loop at half the committer's rate; with
-datasets-burst instead every append staged at once (schema 1's mode: it
measures how fast a backlog drains, and its latencies are mostly the wait
in the backlog).

Every run has streams of its own (its own subject prefix), deleted once
it is measured (-keep-streams keeps them), so that no run carries what an
earlier one left in the server.

A table goes to stdout; stderr shows each run as it starts and ends, and
every -progress an "n/m decided" line while a run waits.

-rounds N makes the whole plan N times over, one round after another (so
raw and committer runs alternate through the session, and a noisy minute
falls on both), and ends with a second table: each run's median over the
rounds, its vs_raw the median of the rounds' own ratios (each committer
run against the raw run of its round).

-cluster 3 starts a 3-node JetStream cluster on loopback in this process
(clients connect to any node) and runs everything with 3 replicas per
stream.

-atomic-min N appends groups of N decisions or more as one atomic batch
and smaller ones as chains of single fenced appends, in the committer
(its AtomicBatchMin) and the raw loop alike; 0 keeps the committer's
default for the decision log's stream (32 on a single-replica file
stream, 2 on a replicated or memory one).

-json FILE writes one document: {"schema": 2, "started", "go_version",
"goos", "goarch", "cpus", "gomaxprocs", "cluster_nodes", "producers",
"rounds", "runs": [...], "summary": [...]}, one record per run in "runs"
and, with -rounds above 1, one per distinct run in "summary" (its
medians over the rounds; "round" 0):
  kind                 "raw" (raw JetStream) or "committer"
  load                 "max" (full speed), "half" (half the committer's max
                       rate, offered open loop), "preconditions" (full speed,
                       each transaction protects fragments), "datasets"
                       (many datasets)
  loop                 "closed" (each producer stages, awaits its decision,
                       then stages its next), "open" (staged at
                       offered_per_sec whatever is decided) or "burst"
                       (every transaction staged at once, then awaited;
                       in schema 1 every "datasets" run was a burst)
  producers            concurrent producers of a closed loop (0 otherwise)
  name                 the run's row in the table
  batch                group-commit batch size
  datasets             datasets served in the run
  txns                 transactions measured (all datasets)
  protected_fragments  fragments each precondition protects
  offered_per_sec      offered rate (0: as fast as possible)
  commits_per_sec      decisions per second, first staging to last decision
  p50_ms, p99_ms       end-to-end latency, staged to decision received
  rejected             decisions that rejected (the bench's transactions
                       should all commit)
  rejected_by          rejections by reason, e.g. {"READ_VERSION_TOO_OLD": 3}
                       (absent when none)
  rejected_examples    the committer's message for the first rejection of
                       each reason (absent when none)
  duplicates           decisions of a transaction already decided (should
                       be 0)
  out_of_order         decisions of a dataset's append before an earlier
                       one of the same dataset (many datasets; should be 0)
  setup_s              seconds to set the run up: streams, consumers,
                       committer start and every dataset's creation decided
  run_s                seconds of the whole run, set-up included
  rss_bytes            resident memory of this process at the end of the run
                       (servers, committer and producers together)
  replicas             replicas of the decision stream, as the server reports
  vs_raw               commits_per_sec over the raw run of the same batch
                       size, dataset count and loop (committer runs at max
                       load and many-datasets runs in a closed loop or a
                       burst; 0 otherwise)
  groups               groups of decisions appended to the decision log
                       after the set-up (an atomic batch, or a chain of
                       single appends below 32 on R1); the table's "group"
                       column is txns/groups, the group commit's reach
  cpu_us_per_txn       CPU time of the whole process (servers, committer or
                       raw loop, producers) after the set-up, per
                       transaction, in µs: a cost other work on the machine
                       changes far less than it changes the rate
  append_ms            mean time one group took to append (an atomic batch,
                       or a whole chain of single appends), in ms: a
                       dataset's decision cycle, the floor under its latency
  alloc_bytes_per_txn  heap bytes the whole process allocated after the
                       set-up, per transaction
  gc_cycles            garbage collections finished after the set-up (on
                       two cores each one's mark phase slows everything for
                       tens of ms: much of a half-load tail)
  round                the round the run belongs to (1 to -rounds)
  rounds, vs_raw_rounds (summary records only) how many rounds the
                       medians are over, and each round's vs_raw

-plot FILE.svg draws throughput and p50/p99 against batch size and against
the number of datasets, committer beside raw JetStream (the medians, with
-rounds above 1).

-timeline DIR writes one file per run, NN-<run name>.tsv: a "# <run name>"
line, a header line "sent_ms<TAB>latency_ms", then one line per decision in
staging order: when its transaction was staged (ms since the run's first
staging) and how long its decision took (ms). It shows when a tail happens.

flags:
`

// bench drives a real committer on an embedded server with concurrent
// producers and, in the same run, a raw JetStream loop doing the same I/O
// without evaluation (publish staged, consume, publish decisions as an
// atomic batch, ack).
func bench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, benchHelp); fs.PrintDefaults() }
	n := fs.Int("txns", 20000, "transactions per throughput run")
	producers := fs.Int("producers", 256, "concurrent producers (each stages, then awaits its decision)")
	batches := fs.String("batches", "1,8,64,256", "group-commit batch sizes to measure")
	pres := fs.String("preconditions", "0,1,16,128", "precondition sizes (fragments protected per transaction) to measure, at the largest batch size")
	many := fs.String("datasets", "1000", "dataset counts of the many-datasets runs, comma-separated (empty or 0: skip)")
	manyTxns := fs.Int("datasets-txns", 5, "transactions per dataset in the many-datasets runs")
	burst := fs.Bool("datasets-burst", false, "many-datasets runs stage every transaction at once (schema 1's mode) instead of a closed loop of -producers")
	cacheBytes := fs.Int("cache-bytes", 0, "the committer's cache budget for all datasets (0: its default)")
	partitions := fs.Int("partitions", 0, "the committer's partition count, one consumer each on the staging stream (0: its default, 64)")
	atomicMin := fs.Int("atomic-min", 0, "the smallest group appended as one atomic batch, by the committer and raw JetStream alike (0: the committer's default for the decision log)")
	memoryLimit := memoryLimitFlag(fs)
	latency := fs.Bool("latency", true, "also measure latency at half the measured throughput")
	dir := fs.String("data-dir", "", "embedded server store (default: a temp dir, removed after)")
	syncFlag := fs.String("sync", syncAlways, "the servers' file store policy: 'always' syncs every write before acknowledging it (serve's default), a duration (e.g. 2m, JetStream's default) flushes in the background")
	nodes := fs.Int("cluster", 1, "JetStream nodes, 1 to 5: 1 is one embedded server with R1 streams, n > 1 an n-node loopback cluster in this process with Rn streams")
	jsonPath := fs.String("json", "", "write the results to `FILE` as JSON (schema above)")
	plotPath := fs.String("plot", "", "write a plot of the results to `FILE` as SVG")
	every := fs.Duration("progress", 10*time.Second, "interval of the \"n/m decided\" lines on stderr")
	rounds := fs.Int("rounds", 1, "make the whole plan this many times, one round after another, and end with each run's median over the rounds")
	keepStreams := fs.Bool("keep-streams", false, "leave each run's streams on the server (default: deleted once the run is measured, so that no later run carries them)")
	timelineDir := fs.String("timeline", "", "write every decision of each run (staged when, decided how long after) to a tab-separated file in `DIR`")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole process (servers, committer, producers) to `FILE`, for go tool pprof")
	if err := fs.Parse(args); err != nil {
		return err
	}
	plan, err := parseBenchPlan(*batches, *pres, *many)
	if err != nil {
		return err
	}
	plan.burst = *burst
	if err := checkBenchFlags(*n, *producers, *manyTxns, *nodes, *every); err != nil {
		return err
	}
	sync, err := parseSync(*syncFlag)
	if err != nil {
		return usageError{"bench: " + err.Error()}
	}
	if *rounds < 1 || *rounds > 100 {
		return usageError{fmt.Sprintf("bench: -rounds %d: want 1 to 100", *rounds)}
	}
	if *atomicMin < 0 {
		return usageError{fmt.Sprintf("bench: -atomic-min %d: want 0 (the default) or more", *atomicMin)}
	}
	restoreLimit, err := setMemoryLimit(*memoryLimit)
	if err != nil {
		return err
	}
	defer restoreLimit()
	if *cpuProfile != "" {
		if os.Getenv("CELLGUARD_BENCH_CPU_PROFILE") != "" {
			return usageError{"bench: -cpuprofile and CELLGUARD_BENCH_CPU_PROFILE both profile the CPU: set one"}
		}
		stopProfile, err := profileCPU(*cpuProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "cellguard-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	if *timelineDir != "" {
		if err := os.MkdirAll(*timelineDir, 0o755); err != nil {
			return err
		}
	}
	quiet := slog.New(slog.DiscardHandler)
	if os.Getenv("CELLGUARD_BENCH_LOG") != "" {
		quiet = slog.New(slog.NewTextHandler(stderr, nil))
	}
	url, stop, err := startBenchServers(ctx, *dir, *nodes, sync)
	if err != nil {
		return err
	}
	defer stop()
	b := &bencher{
		url: url, replicas: *nodes, n: *n, producers: *producers, manyTxns: *manyTxns, log: quiet, cacheBytes: *cacheBytes, partitions: *partitions, atomicMin: *atomicMin,
		timelineDir: *timelineDir, keepStreams: *keepStreams, out: stdout, rep: newBenchReport(*nodes, *producers, *rounds),
		prog: &benchProgress{w: stderr, start: time.Now(), total: *rounds * plan.runs(*latency)},
	}
	stopTicker := b.prog.tick(*every)
	defer stopTicker()
	fmt.Fprintf(stdout, "cellguard bench: %d txns per run, %d producers, %s, sync %s, GOMAXPROCS=%d\n\n",
		*n, *producers, serversLabel(*nodes), sync, runtime.GOMAXPROCS(0))
	printBenchHeader(stdout)
	// The runs made so far are written even when one fails.
	err = b.runRounds(ctx, plan, *latency, *rounds)
	return errors.Join(err, b.rep.write(*jsonPath, *plotPath))
}

// benchPlan is what a bench run measures.
type benchPlan struct {
	batches, pres, datasets []int
	burst                   bool // many-datasets runs stage everything at once
}

func parseBenchPlan(batches, pres, datasets string) (benchPlan, error) {
	var p benchPlan
	var err error
	if p.batches, err = parseInts(batches); err != nil {
		return p, usageError{"bench: -batches: " + err.Error()}
	}
	if p.pres, err = parseInts(pres); err != nil {
		return p, usageError{"bench: -preconditions: " + err.Error()}
	}
	all, err := parseInts(datasets)
	if err != nil {
		return p, usageError{"bench: -datasets: " + err.Error()}
	}
	for _, d := range all {
		if d > 0 {
			p.datasets = append(p.datasets, d)
		}
	}
	for _, v := range p.batches {
		if v < 1 {
			return p, usageError{fmt.Sprintf("bench: -batches: %d is no batch size", v)}
		}
	}
	for _, v := range p.pres {
		if v < 0 {
			return p, usageError{fmt.Sprintf("bench: -preconditions: %d is no number of fragments", v)}
		}
	}
	return p, nil
}

// runs is the number of runs the plan makes.
func (p benchPlan) runs(latency bool) int {
	per, perDatasets := 2, 2
	if latency {
		per = 4
		if !p.burst {
			perDatasets = 4
		}
	}
	return per*len(p.batches) + len(p.pres) + perDatasets*len(p.datasets)
}

func checkBenchFlags(txns, producers, manyTxns, nodes int, every time.Duration) error {
	switch {
	case txns < 1:
		return usageError{fmt.Sprintf("bench: -txns %d: want at least 1", txns)}
	case producers < 1 || producers > txns:
		return usageError{fmt.Sprintf("bench: -producers %d: want 1 to -txns (%d)", producers, txns)}
	case manyTxns < 1:
		return usageError{fmt.Sprintf("bench: -datasets-txns %d: want at least 1", manyTxns)}
	case nodes < 1 || nodes > 5:
		return usageError{fmt.Sprintf("bench: -cluster %d: want 1 to 5 nodes", nodes)}
	case every <= 0:
		return usageError{fmt.Sprintf("bench: -progress %v: want a positive interval", every)}
	}
	return nil
}

func serversLabel(nodes int) string {
	if nodes == 1 {
		return "embedded JetStream (file store, R1)"
	}
	return fmt.Sprintf("%d-node loopback JetStream cluster in process (file store, R%d)", nodes, nodes)
}

// startBenchServers starts one embedded server, or a loopback cluster of
// nodes, with their stores under dir, and returns the client URLs and a
// function that stops them. sync is every server's file store policy.
func startBenchServers(ctx context.Context, dir string, nodes int, sync syncPolicy) (string, func(), error) {
	if nodes == 1 {
		srv, err := open(dir, -1, sync)
		if err != nil {
			return "", nil, err
		}
		return srv.ClientURL(), func() { srv.Shutdown(); srv.WaitForShutdown() }, nil
	}
	opts, err := loopback.ClusterOptions("loopback", nodes, func(i int) string { return filepath.Join(dir, "cluster", fmt.Sprintf("n%d", i+1)) })
	if err != nil {
		return "", nil, err
	}
	c := &loopback.Cluster{}
	for _, o := range opts {
		sync.apply(o)
		s, err := loopback.Start(o)
		if err != nil {
			c.Shutdown()
			return "", nil, err
		}
		c.Servers = append(c.Servers, s)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.WaitReady(wctx); err != nil {
		c.Shutdown()
		return "", nil, err
	}
	return c.URLs(), c.Shutdown, nil
}

// runPlan makes the plan's runs in order, each recorded in b.rep.
func (b *bencher) runPlan(ctx context.Context, plan benchPlan, latency bool) error {
	for _, bsz := range plan.batches {
		if _, err := b.measure(ctx, benchRecord{Kind: kindRaw, Load: loadMax, Loop: loopClosed, Batch: bsz, Name: fmt.Sprintf("raw JetStream batch=%d", bsz)}); err != nil {
			return err
		}
		got, err := b.measure(ctx, benchRecord{Kind: kindCommitter, Load: loadMax, Loop: loopClosed, Batch: bsz, Name: fmt.Sprintf("committer batch=%d", bsz)})
		if err != nil {
			return err
		}
		if !latency {
			continue
		}
		half := got.CommitsPerSec / 2
		if _, err := b.measure(ctx, benchRecord{Kind: kindRaw, Load: loadHalf, Loop: loopOpen, Batch: bsz, OfferedPerSec: half, Name: fmt.Sprintf("raw JetStream batch=%d at %.0f/s", bsz, half)}); err != nil {
			return err
		}
		if _, err := b.measure(ctx, benchRecord{Kind: kindCommitter, Load: loadHalf, Loop: loopOpen, Batch: bsz, OfferedPerSec: half, Name: fmt.Sprintf("committer batch=%d at %.0f/s", bsz, half)}); err != nil {
			return err
		}
	}
	top := 256
	if len(plan.batches) > 0 {
		top = plan.batches[len(plan.batches)-1]
	}
	for _, p := range plan.pres {
		if _, err := b.measure(ctx, benchRecord{Kind: kindCommitter, Load: loadPreconditions, Loop: loopClosed, Batch: top, Protected: p, Name: fmt.Sprintf("committer batch=%d protects %d frags", top, p)}); err != nil {
			return err
		}
	}
	for _, d := range plan.datasets {
		if err := b.runDatasets(ctx, d, plan.burst, latency); err != nil {
			return err
		}
	}
	return nil
}

// runDatasets makes the runs over d datasets: raw and committer in a
// closed loop (or a burst) and, with latency (not after a burst), both
// again in an open loop at half the committer's rate.
func (b *bencher) runDatasets(ctx context.Context, d int, burst, latency bool) error {
	loop, suffix := loopClosed, ""
	if burst {
		loop, suffix = loopBurst, ", burst"
	}
	var got benchRecord
	for _, kind := range []string{kindRaw, kindCommitter} {
		name := fmt.Sprintf("%s %d datasets × %d txns%s", kindLabel[kind], d, b.manyTxns, suffix)
		rec, err := b.measure(ctx, benchRecord{Kind: kind, Load: loadDatasets, Loop: loop, Batch: manyBatch, Datasets: d, Name: name})
		if err != nil {
			return err
		}
		got = rec
	}
	if burst || !latency {
		return nil
	}
	half := got.CommitsPerSec / 2
	for _, kind := range []string{kindRaw, kindCommitter} {
		name := fmt.Sprintf("%s %d datasets × %d txns at %.0f/s", kindLabel[kind], d, b.manyTxns, half)
		if _, err := b.measure(ctx, benchRecord{Kind: kind, Load: loadDatasets, Loop: loopOpen, Batch: manyBatch, Datasets: d, OfferedPerSec: half, Name: name}); err != nil {
			return err
		}
	}
	return nil
}

// profileCPU profiles the CPU into path until the function it returns is
// called.
func profileCPU(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: -cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: -cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeHeapProfile writes the live heap to path and the goroutines (whose
// stacks are memory too) to path.goroutines, for `go tool pprof`.
func writeHeapProfile(path string) error {
	if err := writeProfile("heap", path); err != nil {
		return err
	}
	return writeProfile("goroutine", path+".goroutines")
}

func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// memReport is the process's memory at one point.
type memReport struct {
	live, heap, rss, rssReleased uint64
	stacks, runtime              uint64 // goroutine stacks; the runtime's other memory (GC metadata, spans, buffers)
	goroutines                   int
}

func (m memReport) String() string {
	mib := func(n uint64) float64 { return float64(n) / (1 << 20) }
	return fmt.Sprintf("Go heap %.0f MiB (live %.0f MiB), stacks %.0f MiB (%d goroutines), runtime %.0f MiB, RSS %.0f MiB; RSS %.0f MiB once free heap is returned to the OS",
		mib(m.heap), mib(m.live), mib(m.stacks), m.goroutines, mib(m.runtime), mib(m.rss), mib(m.rssReleased))
}

// measureMemory reports the heap after a collection and the RSS, then the
// RSS again after returning free memory to the OS, as Go's scavenger does
// over time in a long-running process; CELLGUARD_BENCH_HEAP_PROFILE names
// a file for the heap profile.
func measureMemory() (memReport, error) {
	var m memReport
	m.heap, m.rss = memoryInUse()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.live = ms.HeapAlloc
	m.stacks, m.goroutines = ms.StackInuse, runtime.NumGoroutine()
	m.runtime = ms.MSpanInuse + ms.MCacheInuse + ms.BuckHashSys + ms.GCSys + ms.OtherSys
	if path := os.Getenv("CELLGUARD_BENCH_HEAP_PROFILE"); path != "" {
		if err := writeHeapProfile(path); err != nil {
			return m, err
		}
	}
	debug.FreeOSMemory()
	_, m.rssReleased = memoryInUse()
	return m, nil
}

// memoryInUse returns the Go heap in use after a collection and the
// process's resident set size.
func memoryInUse() (heap, rss uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, readRSS()
}

// readRSS returns the process's resident set size (Linux; 0 elsewhere).
func readRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func parseInts(s string) ([]int, error) {
	var out []int
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}
