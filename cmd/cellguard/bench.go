package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"cellguard/committer"
	"cellguard/internal/bench"
	"cellguard/internal/embedded"
	"cellguard/internal/lancedbtest"
	"cellguard/internal/nsbench"
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
raw and committer runs alternate through the whole run, and a noisy minute
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

-namespace measures unmodified LanceDB (0.31 and 0.39) instead: the same
driver commits to a local directory and through cellguard's Lance REST
namespace (embedded JetStream, committer, publisher and namespace in this
process), scenario by scenario in the same run: serial appends of one
handle, concurrent appends of -namespace-append-handles handles, and
update/delete/mergeInsert of -namespace-mixed-handles handles on one
table; -plot draws both side by side. It needs Node.js and npm (the
LanceDB packages are installed into the user cache on first use).

-timeline DIR writes one file per run, NN-<run name>.tsv: a "# <run name>"
line, a header line "sent_ms<TAB>latency_ms", then one line per decision in
staging order: when its transaction was staged (ms since the run's first
staging) and how long its decision took (ms). It shows when a tail happens.

flags:
`

// benchCmd reads the flags of `cellguard bench` into bench.Options and
// runs it.
func benchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, benchHelp); fs.PrintDefaults() }
	o := bench.Defaults()
	fs.IntVar(&o.Txns, "txns", o.Txns, "transactions per throughput run")
	fs.IntVar(&o.Producers, "producers", o.Producers, "concurrent producers (each stages, then awaits its decision)")
	fs.Var((*intList)(&o.Batches), "batches", "group-commit batch sizes to measure")
	fs.Var((*intList)(&o.Preconditions), "preconditions", "precondition sizes (fragments protected per transaction) to measure, at the largest batch size")
	fs.Var((*intList)(&o.Datasets), "datasets", "dataset counts of the many-datasets runs, comma-separated (empty or 0: skip)")
	fs.IntVar(&o.DatasetsTxns, "datasets-txns", o.DatasetsTxns, "transactions per dataset in the many-datasets runs")
	fs.BoolVar(&o.DatasetsBurst, "datasets-burst", o.DatasetsBurst, "many-datasets runs stage every transaction at once (schema 1's mode) instead of a closed loop of -producers")
	fs.IntVar(&o.CacheBytes, "cache-bytes", o.CacheBytes, "the committer's cache budget for all datasets (0: its default)")
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, fmt.Sprintf("the committer's partition count, one consumer each on the staging stream (0: its default, %d)", committer.DefaultPartitions))
	fs.IntVar(&o.Deciders, "deciders", o.Deciders, "how many datasets each committer decides at once (0: its default)")
	fs.IntVar(&o.MaxAckPending, "max-ack-pending", o.MaxAckPending, "each partition consumer's MaxAckPending: how many staged messages the committer holds undecided per partition (0: its default)")
	fs.IntVar(&o.AtomicMin, "atomic-min", o.AtomicMin, "the smallest group appended as one atomic batch, by the committer and raw JetStream alike (0: the committer's default for the decision log)")
	memoryLimit := memoryLimitFlag(fs)
	fs.BoolVar(&o.Latency, "latency", o.Latency, "also measure latency at half the measured throughput")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, "embedded server store (default: a temp dir, removed after)")
	syncFlag := fs.String("sync", embedded.SyncAlways, "the servers' file store policy: 'always' syncs every write before acknowledging it (serve's default), a duration (e.g. 2m, JetStream's default) flushes in the background")
	fs.IntVar(&o.Cluster, "cluster", o.Cluster, "JetStream nodes, 1 to 5: 1 is one embedded server with R1 streams, n > 1 an n-node loopback cluster in this process with Rn streams")
	fs.StringVar(&o.JSONPath, "json", o.JSONPath, "write the results to `FILE` as JSON (schema above)")
	fs.StringVar(&o.PlotPath, "plot", o.PlotPath, "write a plot of the results to `FILE` as SVG")
	fs.DurationVar(&o.Progress, "progress", o.Progress, "interval of the \"n/m decided\" lines on stderr")
	fs.IntVar(&o.Rounds, "rounds", o.Rounds, "make the whole plan this many times, one round after another, and end with each run's median over the rounds")
	fs.BoolVar(&o.KeepStreams, "keep-streams", o.KeepStreams, "leave each run's streams on the server (default: deleted once the run is measured, so that no later run carries them)")
	fs.StringVar(&o.TimelineDir, "timeline", o.TimelineDir, "write every decision of each run (staged when, decided how long after) to a tab-separated file in `DIR`")
	fs.StringVar(&o.CPUProfile, "cpuprofile", o.CPUProfile, "write a CPU profile of the whole process (servers, committer, producers) to `FILE`, for go tool pprof")
	namespace := fs.Bool("namespace", false, "measure LanceDB through the Lance REST namespace against a local directory (see above) instead of the committer against raw JetStream")
	ns := nsbench.Options{}
	fs.IntVar(&ns.Appends, "namespace-appends", 200, "-namespace: serial appends of one handle")
	fs.Var((*intList)(&ns.AppendHandles), "namespace-append-handles", "-namespace: handle counts of the concurrent append scenarios (default 4)")
	fs.Var((*intList)(&ns.MixedHandles), "namespace-mixed-handles", "-namespace: handle counts of the update/delete/mergeInsert scenarios on one table (default 4,8,32)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if o.Sync, err = embedded.ParseSync(*syncFlag); err != nil {
		return usageError{"bench: " + err.Error()}
	}
	if *namespace {
		ns.Sync = o.Sync
		return namespaceBench(ctx, ns, o.PlotPath, stdout, stderr)
	}
	if err := o.Check(); err != nil {
		return usageError{err.Error()}
	}
	restoreLimit, err := setMemoryLimit(*memoryLimit)
	if err != nil {
		return err
	}
	defer restoreLimit()
	err = bench.Run(ctx, o, stdout, stderr)
	if oe := (*bench.OptionError)(nil); errors.As(err, &oe) {
		return usageError{oe.Error()}
	}
	return err
}

// intList is a flag of comma-separated integers ("" is none).
type intList []int

func (l *intList) String() string {
	s := make([]string, len(*l))
	for i, v := range *l {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(s string) error {
	v, err := parseInts(s)
	*l = v
	return err
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

// namespaceBench runs `cellguard bench -namespace`.
func namespaceBench(ctx context.Context, o nsbench.Options, plotPath string, stdout, stderr io.Writer) error {
	o.Progress = func(v lancedbtest.Version, s nsbench.Scenario) {
		fmt.Fprintf(stderr, "%s %s done\n", v.Name, s.Name)
	}
	rep, err := nsbench.Run(ctx, o)
	if err != nil {
		return err
	}
	if err := rep.WriteText(stdout); err != nil {
		return err
	}
	if plotPath == "" {
		return nil
	}
	f, err := os.Create(plotPath)
	if err != nil {
		return err
	}
	if err := rep.Figure().WriteSVG(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
