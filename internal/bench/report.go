package bench

// What `cellguard bench` reports: one benchRecord per run, printed as a
// table row on stdout, collected into a benchReport for -json and -plot,
// and announced on stderr as the run starts and ends (benchProgress).

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// benchSchema is the version of the -json document; a change to a field's
// meaning or unit gets a new number. Version 2 added loop, producers,
// duplicates and out_of_order; in version 1 every "datasets" run was
// what version 2 calls loop "burst".
const benchSchema = 2

// Run kinds.
const (
	kindRaw       = "raw"       // raw JetStream: the same I/O with nothing decided
	kindCommitter = "committer" // the real committer
)

// Run loads.
const (
	loadMax           = "max"           // closed loop, as fast as the system decides
	loadHalf          = "half"          // open loop at half the committer's max rate
	loadPreconditions = "preconditions" // max load, transactions protect fragments
	loadDatasets      = "datasets"      // many datasets, in any loop
)

// Run loops: how producers offer the transactions.
const (
	loopClosed = "closed" // each producer stages, awaits its decision, then stages its next
	loopOpen   = "open"   // staged on a schedule at the offered rate, whatever is decided
	loopBurst  = "burst"  // every transaction staged at once, then all awaited
)

// benchReport is the -json document: the set-up of the run and its records.
type benchReport struct {
	Schema     int           `json:"schema"`
	Started    time.Time     `json:"started"`
	GoVersion  string        `json:"go_version"`
	GOOS       string        `json:"goos"`
	GOARCH     string        `json:"goarch"`
	CPUs       int           `json:"cpus"`
	GOMAXPROCS int           `json:"gomaxprocs"`
	Nodes      int           `json:"cluster_nodes"`
	Producers  int           `json:"producers"`
	Rounds     int           `json:"rounds"`
	Runs       []benchRecord `json:"runs"`
	// Summary holds each distinct run's medians over the rounds (with
	// more than one round).
	Summary []benchRecord `json:"summary,omitempty"`
}

// benchRecord is one run. Latencies are end to end (staged → decision
// received); the rate counts decisions from the first staging to the last
// decision. RSS is the whole process (servers, committer, producers) at
// the end of the run.
type benchRecord struct {
	Kind string `json:"kind"`
	Load string `json:"load"`
	Loop string `json:"loop"`
	// Producers is the number of concurrent producers of a closed loop
	// (0 in open and burst loops).
	Producers     int     `json:"producers"`
	Name          string  `json:"name"`
	Batch         int     `json:"batch"`
	Datasets      int     `json:"datasets"`
	Txns          int     `json:"txns"`
	Protected     int     `json:"protected_fragments"`
	OfferedPerSec float64 `json:"offered_per_sec"`
	CommitsPerSec float64 `json:"commits_per_sec"`
	P50Ms         float64 `json:"p50_ms"`
	P99Ms         float64 `json:"p99_ms"`
	Rejected      int64   `json:"rejected"`
	// Duplicates counts decisions of a transaction already decided;
	// OutOfOrder counts decisions of a dataset's transaction before an
	// earlier one of the same dataset (both should be 0).
	Duplicates int64 `json:"duplicates"`
	OutOfOrder int64 `json:"out_of_order"`
	// RejectedBy counts the rejections by reason (absent when none).
	RejectedBy map[string]int64 `json:"rejected_by,omitempty"`
	// RejectedExamples holds the committer's message for the first
	// rejection of each reason.
	RejectedExamples map[string]string `json:"rejected_examples,omitempty"`
	SetupSec         float64           `json:"setup_s"`
	RunSec           float64           `json:"run_s"`
	RSSBytes         uint64            `json:"rss_bytes"`
	Replicas         int               `json:"replicas"`
	VsRaw            float64           `json:"vs_raw"`
	// Groups is the number of appends to the decision log in the
	// measured part (an atomic batch, possibly shared by several
	// datasets, or one dataset's chain of single appends below 32 on R1):
	// txns/groups is the group commit's reach.
	Groups int64 `json:"groups"`
	// CPUPerTxnUs is the CPU time the whole process (servers, committer
	// or raw loop, producers) used in the measured part, per transaction,
	// in microseconds: a cost that other work on the machine changes far
	// less than it changes the rate.
	CPUPerTxnUs float64 `json:"cpu_us_per_txn"`
	// AllocPerTxn is what the whole process allocated on the heap in
	// the measured part, per transaction, in bytes; GCCycles is the
	// garbage collections it finished meanwhile.
	AllocPerTxn float64 `json:"alloc_bytes_per_txn"`
	GCCycles    uint64  `json:"gc_cycles"`
	// AppendMs is the mean time one group took to append (an atomic
	// batch, or a whole chain of single appends), in milliseconds: a
	// dataset's decision cycle, and so the floor under its latency.
	AppendMs float64 `json:"append_ms"`
	// Round is the round of the run, from 1; 0 in a summary record.
	Round int `json:"round"`
	// Rounds and VsRawRounds are a summary record's number of rounds and
	// each round's ratio to raw JetStream.
	Rounds      int       `json:"rounds,omitempty"`
	VsRawRounds []float64 `json:"vs_raw_rounds,omitempty"`
}

func newBenchReport(nodes, producers, rounds int) *benchReport {
	return &benchReport{
		Schema: benchSchema, Started: time.Now().UTC().Truncate(time.Second),
		GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
		CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Nodes: nodes, Producers: producers, Rounds: rounds,
	}
}

// record fills r's measured fields from res.
func (r *benchRecord) record(res result) {
	r.CommitsPerSec, r.Rejected, r.RejectedBy, r.RejectedExamples = res.rate, res.rejected, res.reasons, res.examples
	r.Duplicates, r.OutOfOrder = res.duplicates, res.outOfOrder
	r.P50Ms, r.P99Ms = ms(res.p50), ms(res.p99)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// find returns the first round's run of kind, load and loop with the
// batch size and dataset count given, or nil.
func (rep *benchReport) find(kind, load, loop string, batch, datasets int) *benchRecord {
	return rep.findIn(1, kind, load, loop, batch, datasets)
}

// findIn is find in the given round.
func (rep *benchReport) findIn(round int, kind, load, loop string, batch, datasets int) *benchRecord {
	for i := range rep.Runs {
		r := &rep.Runs[i]
		if r.Round == round && r.Kind == kind && r.Load == load && r.Loop == loop && r.Batch == batch && r.Datasets == datasets {
			return r
		}
	}
	return nil
}

// writeJSON writes the report, indented, to path.
func (rep *benchReport) writeJSON(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

const benchTableHeader = "%-48s %10s %9s %9s %7s %7s %8s %8s %9s %4s %8s %8s\n"

func printBenchHeader(w io.Writer) {
	fmt.Fprintf(w, benchTableHeader, "run", "commits/s", "p50", "p99", "vs raw", "group", "append", "CPU/txn", "alloc/txn", "GCs", "setup", "RSS")
}

func printBenchRecord(w io.Writer, r benchRecord) {
	ratio := ""
	if r.VsRaw > 0 {
		ratio = fmt.Sprintf("%.2f×", r.VsRaw)
	}
	rej := ""
	if r.Rejected > 0 {
		var by []string
		for _, reason := range slices.Sorted(maps.Keys(r.RejectedBy)) {
			by = append(by, fmt.Sprintf("%s %d", reason, r.RejectedBy[reason]))
		}
		rej = fmt.Sprintf("  (%d rejected: %s)", r.Rejected, strings.Join(by, ", "))
	}
	lat := func(v float64) string { return roundDur(time.Duration(v * float64(time.Millisecond))).String() }
	group, appending := "", "" // decisions per group appended, and the mean append
	if r.Groups > 0 {
		group = fmt.Sprintf("%.1f", float64(r.Txns)/float64(r.Groups))
		appending = lat(r.AppendMs)
	}
	fmt.Fprintf(w, strings.TrimSuffix(benchTableHeader, "\n")+"%s\n", r.Name, fmt.Sprintf("%.0f", r.CommitsPerSec), lat(r.P50Ms), lat(r.P99Ms), ratio, group, appending, fmt.Sprintf("%.0fµs", r.CPUPerTxnUs),
		fmt.Sprintf("%.1fKiB", r.AllocPerTxn/1024), fmt.Sprint(r.GCCycles),
		roundDur(time.Duration(r.SetupSec*float64(time.Second))).String(), fmt.Sprintf("%dMiB", r.RSSBytes>>20), rej)
}

func roundDur(d time.Duration) time.Duration {
	if d >= 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	if d >= 100*time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(10 * time.Microsecond)
}

// benchProgress tells, on stderr, which run is going and how far it is:
// a line as each run starts and ends and, every interval given to tick,
// an "n/m decided" line for the phase the current run waits on.
type benchProgress struct {
	w     io.Writer
	start time.Time
	total int

	mu    sync.Mutex
	n     int // runs started
	name  string
	runAt time.Time
	phase string
	tr    *tracker // decisions of the phase; nil between phases
	want  int
}

func (p *benchProgress) elapsed() string {
	return time.Since(p.start).Round(100 * time.Millisecond).String()
}

func (p *benchProgress) begin(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	p.name, p.runAt = name, time.Now()
	fmt.Fprintf(p.w, "bench [%d/%d] start %s (elapsed %s)\n", p.n, p.total, name, p.elapsed())
}

func (p *benchProgress) end(r benchRecord) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "bench [%d/%d] done  %s: %.0f commits/s, p50 %.2fms, p99 %.2fms in %s (elapsed %s)\n",
		p.n, p.total, p.name, r.CommitsPerSec, r.P50Ms, r.P99Ms, time.Since(p.runAt).Round(100*time.Millisecond), p.elapsed())
}

// watch names the phase the current run waits on: want decisions
// counted by tr (nil: none).
func (p *benchProgress) watch(phase string, tr *tracker, want int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phase, p.tr, p.want = phase, tr, want
}

// tick writes an "n/m decided" line every interval while a phase is
// watched, until the returned function is called.
func (p *benchProgress) tick(every time.Duration) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				p.decided()
			}
		}
	}()
	return func() { close(done); <-exited }
}

func (p *benchProgress) decided() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tr == nil {
		return
	}
	fmt.Fprintf(p.w, "bench [%d/%d] %s, %s: %d/%d decided (elapsed %s)\n",
		p.n, p.total, p.name, p.phase, p.tr.done.Load(), p.want, p.elapsed())
}

// write writes the report as JSON to jsonPath and as an SVG plot to
// plotPath; an empty path is skipped.
func (rep *benchReport) write(jsonPath, plotPath string) error {
	if jsonPath != "" {
		if err := rep.writeJSON(jsonPath); err != nil {
			return fmt.Errorf("bench: -json: %w", err)
		}
	}
	if plotPath != "" {
		if err := rep.writePlot(plotPath); err != nil {
			return fmt.Errorf("bench: -plot: %w", err)
		}
	}
	return nil
}
