// Package bench measures a real committer on embedded JetStream beside
// raw JetStream doing the same I/O with nothing decided (cellguard bench).
package bench

import (
	"context"
	"errors"
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

	"cellguard/internal/embedded"
	"cellguard/internal/natstest/loopback"
)

// Options are what a bench run measures and where it writes; the
// flags of `cellguard bench` set them (its help describes each).
type Options struct {
	Txns          int   // transactions per throughput run
	Producers     int   // concurrent producers of a closed loop
	Batches       []int // group-commit batch sizes
	Preconditions []int // fragments protected per transaction, at the largest batch size
	Datasets      []int // dataset counts of the many-datasets runs (0s are skipped)
	DatasetsTxns  int   // transactions per dataset in the many-datasets runs
	DatasetsBurst bool  // many-datasets runs stage every transaction at once
	CacheBytes    int   // the committer's cache budget (0: its default)
	Partitions    int   // the committer's partition count (0: its default)
	MaxAckPending int   // each partition consumer's MaxAckPending (0: the committer's default)
	Deciders      int   // the committers' Config.Deciders (0: the committer's default)
	AtomicMin     int   // the smallest group appended as one atomic batch (0: the log's default)
	Latency       bool  // also measure latency at half the measured throughput
	DataDir       string
	Sync          embedded.SyncPolicy
	Cluster       int // JetStream nodes, 1 to 5
	JSONPath      string
	PlotPath      string
	Progress      time.Duration // interval of the "n/m decided" lines
	Rounds        int
	KeepStreams   bool
	TimelineDir   string
	CPUProfile    string
}

// Defaults are the options of a bench run no flag changes.
func Defaults() Options {
	return Options{
		Txns: 20000, Producers: 256, Batches: []int{1, 8, 64, 256}, Preconditions: []int{0, 1, 16, 128},
		Datasets: []int{1000}, DatasetsTxns: 5, Latency: true, Sync: embedded.Always(), Cluster: 1,
		Progress: 10 * time.Second, Rounds: 1,
	}
}

// Run drives a real committer on an embedded server with concurrent
// producers and, in the same run, a raw JetStream loop doing the same I/O
// without evaluation (publish staged, consume, publish decisions as an
// atomic batch, ack). The table goes to stdout, progress to stderr.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	if err := o.Check(); err != nil {
		return err
	}
	plan := o.plan()
	if o.CPUProfile != "" {
		if os.Getenv("CELLGUARD_BENCH_CPU_PROFILE") != "" {
			return &OptionError{"bench: -cpuprofile and CELLGUARD_BENCH_CPU_PROFILE both profile the CPU: set one"}
		}
		stopProfile, err := profileCPU(o.CPUProfile)
		if err != nil {
			return err
		}
		defer stopProfile()
	}
	if o.DataDir == "" {
		d, err := os.MkdirTemp("", "cellguard-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		o.DataDir = d
	}
	if stop := profileHeapEvery(os.Getenv("CELLGUARD_BENCH_HEAP_PROFILE"), os.Getenv("CELLGUARD_BENCH_HEAP_PROFILE_EVERY"), stderr); stop != nil {
		defer stop()
	}
	if o.TimelineDir != "" {
		if err := os.MkdirAll(o.TimelineDir, 0o755); err != nil {
			return err
		}
	}
	quiet := slog.New(slog.DiscardHandler)
	if os.Getenv("CELLGUARD_BENCH_LOG") != "" {
		quiet = slog.New(slog.NewTextHandler(stderr, nil))
	}
	// The server's own warnings and errors always reach stderr: they are
	// what explains a run that fails on a server error.
	serverLog := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	url, stop, err := startBenchServers(ctx, o.DataDir, o.Cluster, o.Sync, serverLog)
	if err != nil {
		return err
	}
	defer stop()
	b := &bencher{
		url: url, replicas: o.Cluster, n: o.Txns, producers: o.Producers, manyTxns: o.DatasetsTxns, log: quiet, cacheBytes: o.CacheBytes, partitions: o.Partitions, maxAckPending: o.MaxAckPending, deciders: o.Deciders, atomicMin: o.AtomicMin,
		timelineDir: o.TimelineDir, keepStreams: o.KeepStreams, out: stdout, rep: newBenchReport(o.Cluster, o.Producers, o.Rounds),
		prog: &benchProgress{w: stderr, start: time.Now(), total: o.Rounds * plan.runs(o.Latency)},
	}
	stopTicker := b.prog.tick(o.Progress)
	defer stopTicker()
	fmt.Fprintf(stdout, "cellguard bench: %d txns per run, %d producers, %s, sync %s, GOMAXPROCS=%d\n\n",
		o.Txns, o.Producers, serversLabel(o.Cluster), o.Sync, runtime.GOMAXPROCS(0))
	printBenchHeader(stdout)
	// The runs made so far are written even when one fails.
	if err = b.anchorStreams(ctx); err == nil {
		err = b.runRounds(ctx, plan, o.Latency, o.Rounds)
	}
	return errors.Join(err, b.rep.write(o.JSONPath, o.PlotPath))
}

// benchPlan is what a bench run measures.
type benchPlan struct {
	batches, pres, datasets []int
	burst                   bool // many-datasets runs stage everything at once
}

// plan is what o measures: its batch and precondition sizes, and its
// dataset counts above 0.
func (o Options) plan() benchPlan {
	p := benchPlan{batches: o.Batches, pres: o.Preconditions, burst: o.DatasetsBurst}
	for _, d := range o.Datasets {
		if d > 0 {
			p.datasets = append(p.datasets, d)
		}
	}
	return p
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

// Check reports the first option out of range as an *OptionError.
func (o Options) Check() error {
	bad := func(format string, a ...any) error { return &OptionError{"bench: " + fmt.Sprintf(format, a...)} }
	switch {
	case o.Txns < 1:
		return bad("-txns %d: want at least 1", o.Txns)
	case o.Producers < 1 || o.Producers > o.Txns:
		return bad("-producers %d: want 1 to -txns (%d)", o.Producers, o.Txns)
	case o.DatasetsTxns < 1:
		return bad("-datasets-txns %d: want at least 1", o.DatasetsTxns)
	case o.Cluster < 1 || o.Cluster > 5:
		return bad("-cluster %d: want 1 to 5 nodes", o.Cluster)
	case o.Progress <= 0:
		return bad("-progress %v: want a positive interval", o.Progress)
	case o.Rounds < 1 || o.Rounds > 100:
		return bad("-rounds %d: want 1 to 100", o.Rounds)
	case o.AtomicMin < 0:
		return bad("-atomic-min %d: want 0 (the default) or more", o.AtomicMin)
	}
	for _, v := range o.Batches {
		if v < 1 {
			return bad("-batches: %d is no batch size", v)
		}
	}
	for _, v := range o.Preconditions {
		if v < 0 {
			return bad("-preconditions: %d is no number of fragments", v)
		}
	}
	return nil
}

// OptionError is an option out of range; the message names its flag.
type OptionError struct{ Msg string }

func (e *OptionError) Error() string { return e.Msg }

func serversLabel(nodes int) string {
	if nodes == 1 {
		return "embedded JetStream (file store, R1)"
	}
	return fmt.Sprintf("%d-node loopback JetStream cluster in process (file store, R%d)", nodes, nodes)
}

// startBenchServers starts one embedded server, or a loopback cluster of
// nodes, with their stores under dir, and returns the client URLs and a
// function that stops them. sync is every server's file store policy.
// A single server's warnings and errors go to log.
func startBenchServers(ctx context.Context, dir string, nodes int, sync embedded.SyncPolicy, log *slog.Logger) (string, func(), error) {
	if nodes == 1 {
		srv, err := embedded.StartNoAuth(dir, -1, sync, log)
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
		sync.Apply(o)
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
// profileHeapEvery writes a heap profile to path.<seconds into the run>
// every interval (a Go duration) while the bench runs, for what a run
// holds before its end; nil when either is empty or the interval is not
// a duration.
func profileHeapEvery(path, interval string, stderr io.Writer) (stop func()) {
	every, err := time.ParseDuration(interval)
	if path == "" || err != nil || every <= 0 {
		return nil
	}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				name := fmt.Sprintf("%s.%d", path, int(now.Sub(start).Seconds()))
				if err := writeProfile("heap", name); err != nil {
					fmt.Fprintf(stderr, "heap profile %s: %v\n", name, err)
				}
			}
		}
	}()
	return func() { close(done) }
}

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
