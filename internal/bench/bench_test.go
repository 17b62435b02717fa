package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/embedded"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
)

// runBench runs bench with the defaults as set changes them, a JSON
// report and a plot, in this process, and returns the report as written,
// the SVG and stderr.
func runBench(t *testing.T, set func(o *Options)) (rep benchReport, raw, svg []byte, stderr string) {
	t.Helper()
	dir := t.TempDir()
	jsonPath, plotPath := filepath.Join(dir, "bench.json"), filepath.Join(dir, "bench.svg")
	o := Defaults()
	set(&o)
	o.DataDir, o.JSONPath, o.PlotPath = filepath.Join(dir, "data"), jsonPath, plotPath
	var out, errOut bytes.Buffer
	if err := Run(t.Context(), o, &out, &errOut); err != nil {
		t.Fatalf("bench %+v: %v\nstdout:\n%s\nstderr:\n%s", o, err, &out, &errOut)
	}
	raw, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("decode %s: %v\n%s", jsonPath, err, raw)
	}
	if svg, err = os.ReadFile(plotPath); err != nil {
		t.Fatal(err)
	}
	return rep, raw, svg, errOut.String()
}

func TestBenchReportAndPlot(t *testing.T) {
	timelines := t.TempDir()
	rep, raw, svg, stderr := runBench(t, func(o *Options) {
		o.Txns, o.Producers, o.Batches, o.Preconditions = 60, 6, []int{1, 32}, []int{4}
		o.Datasets, o.DatasetsTxns, o.Progress, o.TimelineDir = []int{3, 6}, 2, time.Millisecond, timelines
	})
	checkTimelines(t, timelines, rep.Runs)

	// The JSON round-trips: decoding and encoding again gives the same bytes.
	again, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if got := append(again, '\n'); !bytes.Equal(got, raw) {
		t.Errorf("JSON after a round trip differs:\n%s\nwant:\n%s", got, raw)
	}
	if rep.Schema != benchSchema || rep.Nodes != 1 || rep.Producers != 6 || rep.CPUs < 1 {
		t.Errorf("report header = %+v", rep)
	}
	// 4 runs per batch size and per dataset count (raw, committer, and
	// both at half load), 1 with preconditions.
	if got, want := len(rep.Runs), 4*2+1+4*2; got != want {
		t.Fatalf("%d runs, want %d: %+v", got, want, rep.Runs)
	}
	for _, r := range rep.Runs {
		checkBenchRecord(t, r)
	}
	checkAllocated(t, rep.Runs)
	for _, want := range []struct {
		kind, load, loop    string
		batch, datasets, tx int
	}{
		{kindRaw, loadMax, loopClosed, 1, 1, 60}, {kindCommitter, loadMax, loopClosed, 32, 1, 60}, {kindCommitter, loadHalf, loopOpen, 32, 1, 60},
		{kindCommitter, loadPreconditions, loopClosed, 32, 1, 60}, {kindRaw, loadDatasets, loopClosed, manyBatch, 6, 12},
		{kindCommitter, loadDatasets, loopClosed, manyBatch, 3, 6}, {kindCommitter, loadDatasets, loopOpen, manyBatch, 6, 12},
	} {
		r := rep.find(want.kind, want.load, want.loop, want.batch, want.datasets)
		if r == nil || r.Txns != want.tx {
			t.Errorf("run %+v = %+v, want one with %d txns", want, r, want.tx)
		}
	}
	if r := rep.find(kindCommitter, loadPreconditions, loopClosed, 32, 1); r != nil && r.Protected != 4 {
		t.Errorf("preconditions run protects %d fragments, want 4", r.Protected)
	}

	charts := svgCharts(t, svg)
	lat := map[string]int{"raw JetStream p50": 2, "raw JetStream p99": 2, "committer p50": 2, "committer p99": 2}
	want := map[string]map[string]int{
		"throughput vs batch size (1 dataset)":                     {"raw JetStream": 2, "committer": 2},
		"latency vs batch size, full speed":                        lat,
		"throughput vs number of datasets, closed loop":            {"raw JetStream": 2, "committer": 2},
		"latency vs number of datasets, closed loop":               lat,
		"latency vs batch size, half the committer's rate":         lat,
		"latency vs number of datasets, half the committer's rate": lat,
	}
	if fmt.Sprint(charts) != fmt.Sprint(want) {
		t.Errorf("SVG charts and series (points) = %v, want %v", charts, want)
	}

	for i := 1; i <= len(rep.Runs); i++ {
		for _, what := range []string{"start", "done "} {
			if prefix := fmt.Sprintf("bench [%d/%d] %s", i, len(rep.Runs), what); !strings.Contains(stderr, prefix) {
				t.Errorf("stderr has no line %q...:\n%s", prefix, stderr)
			}
		}
	}
	if !strings.Contains(stderr, " decided (elapsed ") {
		t.Errorf("stderr has no \"n/m decided\" line:\n%s", stderr)
	}
}

// checkTimelines checks -timeline's files: one per run, named after it,
// with one line per decision in staging order.
func checkTimelines(t *testing.T, dir string, runs []benchRecord) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.tsv"))
	if err != nil || len(files) != len(runs) {
		t.Fatalf("%d timeline files (%v), want %d", len(files), err, len(runs))
	}
	for i, r := range runs {
		path := filepath.Join(dir, fmt.Sprintf("%02d-%s.tsv", i+1, slug(r.Name)))
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if len(lines) != r.Txns+2 || lines[0] != "# "+r.Name || lines[1] != "sent_ms\tlatency_ms" {
			t.Errorf("%s: %d lines starting %q, want %d: the run's name, the header, a line per decision", path, len(lines), lines[:min(2, len(lines))], r.Txns+2)
			continue
		}
		last := -1.0
		for _, l := range lines[2:] {
			var sent, lat float64
			if _, err := fmt.Sscanf(l, "%f\t%f", &sent, &lat); err != nil || sent < last || lat < 0 {
				t.Errorf("%s: line %q after sent %v (%v)", path, l, last, err)
				break
			}
			last = sent
		}
	}
}

func TestSlug(t *testing.T) {
	for name, want := range map[string]string{
		"committer batch=256 at 12329/s":        "committer-batch-256-at-12329-s",
		"raw JetStream 10000 datasets × 2 txns": "raw-jetstream-10000-datasets-2-txns",
		"  -- odd__Name --":                     "odd-name",
	} {
		if got := slug(name); got != want {
			t.Errorf("slug(%q) = %q, want %q", name, got, want)
		}
	}
}

// checkAllocated requires the runs together to have allocated: the
// runtime counts a small allocation when its size class's span is
// handed to a processor, so a run of a few transactions may count none,
// but not all of them.
func checkAllocated(t *testing.T, runs []benchRecord) {
	t.Helper()
	var sum float64
	for _, r := range runs {
		sum += r.AllocPerTxn * float64(r.Txns)
	}
	if sum <= 0 {
		t.Errorf("%d runs allocated %v bytes in all", len(runs), sum)
	}
}

// checkBenchRecord checks what every run must have measured.
func checkBenchRecord(t *testing.T, r benchRecord) {
	t.Helper()
	switch {
	case r.Kind != kindRaw && r.Kind != kindCommitter:
		t.Errorf("%s: kind %q", r.Name, r.Kind)
	case r.CommitsPerSec <= 0 || r.P50Ms <= 0 || r.P99Ms < r.P50Ms:
		t.Errorf("%s: rate %v, p50 %v ms, p99 %v ms", r.Name, r.CommitsPerSec, r.P50Ms, r.P99Ms)
	case r.Rejected != 0:
		t.Errorf("%s: %d rejected, want none", r.Name, r.Rejected)
	case r.SetupSec <= 0 || r.RunSec < r.SetupSec:
		t.Errorf("%s: setup %vs, run %vs", r.Name, r.SetupSec, r.RunSec)
	case r.Replicas != 1:
		t.Errorf("%s: %d replicas, want 1", r.Name, r.Replicas)
	case r.RSSBytes == 0:
		t.Errorf("%s: no RSS", r.Name)
	case r.Duplicates != 0 || r.OutOfOrder != 0:
		t.Errorf("%s: %d duplicate decisions, %d out of their dataset's order", r.Name, r.Duplicates, r.OutOfOrder)
	case r.Groups < 1 || r.Groups > 2*int64(r.Txns):
		// An append is counted whether it carried one dataset's group or
		// several datasets' (shared); a shared append the server refuses
		// is made again group by group, so a decision can take part in
		// two appends.
		t.Errorf("%s: %d groups appended for %d transactions", r.Name, r.Groups, r.Txns)
	case r.CPUPerTxnUs <= 0:
		t.Errorf("%s: CPU per transaction %v µs", r.Name, r.CPUPerTxnUs)
	case r.AllocPerTxn < 0:
		// Zero can be true of a run of a few transactions: the runtime
		// counts small allocations a span at a time (checkAllocated).
		t.Errorf("%s: %v bytes allocated per transaction", r.Name, r.AllocPerTxn)
	case r.AppendMs <= 0 || r.AppendMs*float64(r.Groups) > r.RunSec*1000*float64(max(r.Datasets, 1)):
		t.Errorf("%s: mean append %v ms over %d groups in a %vs run", r.Name, r.AppendMs, r.Groups, r.RunSec)
	}
	ratio := r.Kind == kindCommitter && (r.Load == loadMax || r.Load == loadDatasets) && r.Loop != loopOpen
	if ratio != (r.VsRaw > 0) {
		t.Errorf("%s (%s, %s, %s): vs_raw %v", r.Name, r.Kind, r.Load, r.Loop, r.VsRaw)
	}
	if (r.Loop == loopOpen) != (r.OfferedPerSec > 0) {
		t.Errorf("%s: %s loop offered %v/s", r.Name, r.Loop, r.OfferedPerSec)
	}
	if (r.Loop == loopClosed) != (r.Producers > 0) {
		t.Errorf("%s: %s loop with %d producers", r.Name, r.Loop, r.Producers)
	}
	wantLoop := map[string][]string{
		loadMax: {loopClosed}, loadPreconditions: {loopClosed}, loadHalf: {loopOpen},
		loadDatasets: {loopClosed, loopOpen, loopBurst},
	}
	if !slices.Contains(wantLoop[r.Load], r.Loop) {
		t.Errorf("%s: load %q with loop %q", r.Name, r.Load, r.Loop)
	}
}

// TestBenchManyDatasetsClosedLoop checks the many-datasets runs of the
// default mode: a closed loop of -producers (fewer than the datasets, so
// each serves several), then an open loop at half the committer's rate,
// every append decided once and in its dataset's order.
func TestBenchManyDatasetsClosedLoop(t *testing.T) {
	rep, _, _, stderr := runBench(t, func(o *Options) {
		o.Batches, o.Preconditions, o.Datasets, o.DatasetsTxns, o.Producers = nil, nil, []int{5}, 3, 2
	})
	if got, want := len(rep.Runs), 4; got != want {
		t.Fatalf("%d runs, want %d: %+v\n%s", got, want, rep.Runs, stderr)
	}
	checkAllocated(t, rep.Runs)
	for _, r := range rep.Runs {
		checkBenchRecord(t, r)
		if r.Load != loadDatasets || r.Datasets != 5 || r.Txns != 15 || r.Batch != manyBatch {
			t.Errorf("%s: load %q, %d datasets, %d txns, batch %d; want datasets, 5, 15, %d", r.Name, r.Load, r.Datasets, r.Txns, r.Batch, manyBatch)
		}
	}
	var loops []string
	for _, r := range rep.Runs {
		loops = append(loops, r.Kind+" "+r.Loop)
	}
	if want := []string{"raw closed", "committer closed", "raw open", "committer open"}; !slices.Equal(loops, want) {
		t.Errorf("runs = %q, want %q", loops, want)
	}
	closed := rep.find(kindCommitter, loadDatasets, loopClosed, manyBatch, 5)
	for _, r := range rep.Runs {
		switch {
		case r.Loop == loopClosed && r.Producers != 2:
			t.Errorf("%s: %d producers, want 2", r.Name, r.Producers)
		case r.Loop == loopOpen && closed != nil && r.OfferedPerSec != closed.CommitsPerSec/2:
			t.Errorf("%s: offered %v/s, want half the committer's closed-loop %v/s", r.Name, r.OfferedPerSec, closed.CommitsPerSec)
		}
	}
}

// TestBenchManyDatasetsProducersPerDataset checks that a closed loop
// never has more producers than datasets.
func TestBenchManyDatasetsProducersPerDataset(t *testing.T) {
	rep, _, _, _ := runBench(t, func(o *Options) {
		o.Batches, o.Preconditions, o.Datasets, o.DatasetsTxns, o.Producers, o.Latency = nil, nil, []int{3}, 2, 8, false
	})
	if len(rep.Runs) != 2 {
		t.Fatalf("%d runs, want 2: %+v", len(rep.Runs), rep.Runs)
	}
	checkAllocated(t, rep.Runs)
	for _, r := range rep.Runs {
		checkBenchRecord(t, r)
		if r.Loop != loopClosed || r.Producers != 3 {
			t.Errorf("%s: loop %q with %d producers, want closed with 3 (one per dataset)", r.Name, r.Loop, r.Producers)
		}
	}
}

// TestBenchManyDatasetsBurst checks -datasets-burst: schema 1's runs,
// every append staged at once, and no open loop after them.
func TestBenchManyDatasetsBurst(t *testing.T) {
	rep, _, svg, _ := runBench(t, func(o *Options) {
		o.Batches, o.Preconditions, o.Datasets, o.DatasetsTxns, o.DatasetsBurst = nil, nil, []int{4}, 2, true
	})
	if len(rep.Runs) != 2 {
		t.Fatalf("%d runs, want 2 (raw, committer): %+v", len(rep.Runs), rep.Runs)
	}
	checkAllocated(t, rep.Runs)
	for _, r := range rep.Runs {
		checkBenchRecord(t, r)
		if r.Loop != loopBurst || r.Producers != 0 || r.Txns != 8 || !strings.HasSuffix(r.Name, ", burst") {
			t.Errorf("%s: loop %q, %d producers, %d txns; want a burst of 8", r.Name, r.Loop, r.Producers, r.Txns)
		}
	}
	charts := svgCharts(t, svg)
	lat := map[string]int{"raw JetStream p50": 1, "raw JetStream p99": 1, "committer p50": 1, "committer p99": 1}
	want := map[string]map[string]int{
		"throughput vs number of datasets, all staged at once": {"raw JetStream": 1, "committer": 1},
		"latency vs number of datasets, all staged at once":    lat,
	}
	if fmt.Sprint(charts) != fmt.Sprint(want) {
		t.Errorf("SVG charts and series (points) = %v, want %v", charts, want)
	}
}

func TestBenchShares(t *testing.T) {
	for _, c := range []struct{ datasets, per, producers int }{
		{1, 1, 1}, {5, 3, 2}, {3, 2, 8}, {10, 2, 10}, {7, 4, 3}, {1000, 2, 256},
	} {
		sh := shares(c.datasets, c.per, c.producers)
		if want := min(c.datasets, c.producers); len(sh) != want {
			t.Errorf("%+v: %d producers, want %d", c, len(sh), want)
		}
		seen := map[manyTxn]bool{}
		owner := map[int]int{} // dataset → producer
		for p, share := range sh {
			next := map[int]int{} // dataset → its next round in this share
			for _, x := range share {
				if seen[x] {
					t.Errorf("%+v: %+v given twice", c, x)
				}
				seen[x] = true
				if o, ok := owner[x.ds]; ok && o != p {
					t.Errorf("%+v: dataset %d served by producers %d and %d", c, x.ds, o, p)
				}
				owner[x.ds] = p
				if x.round != next[x.ds] {
					t.Errorf("%+v: producer %d stages round %d of dataset %d before round %d", c, p, x.round, x.ds, next[x.ds])
				}
				next[x.ds] = x.round + 1
			}
		}
		if len(seen) != c.datasets*c.per {
			t.Errorf("%+v: %d appends given, want %d", c, len(seen), c.datasets*c.per)
		}
		for x := range seen {
			if x.ds < 0 || x.ds >= c.datasets || x.round < 0 || x.round >= c.per {
				t.Errorf("%+v: append %+v out of range", c, x)
			}
		}
	}
}

// TestBenchTrackerCountsDuplicatesAndDisorder feeds a tracker decisions by
// hand: the checks the many-datasets runs report as 0 do count.
func TestBenchTrackerCountsDuplicatesAndDisorder(t *testing.T) {
	tr := newTracker(4)
	decide := func(id string) {
		m := nats.NewMsg("cg.dec.ds.committed")
		m.Header.Set(subject.HdrTxnID, id)
		tr.onDecision(m)
	}
	for i, x := range []manyTxn{{0, 0}, {0, 1}, {1, 0}, {1, 1}} {
		id := fmt.Sprint("t", i)
		tr.inOrder(id, x)
		tr.sent(id)
	}
	decide("t0")
	decide("t0")   // a duplicate
	decide("t3")   // dataset 1's second append before its first
	decide("t2")   // and its first after it
	decide("t1")   // in order
	decide("none") // never staged: counted as a duplicate too
	res := tr.result(4)
	if res.duplicates != 2 || res.outOfOrder != 2 || tr.done.Load() != 4 {
		t.Errorf("duplicates %d, out of order %d, done %d; want 2, 2, 4", res.duplicates, res.outOfOrder, tr.done.Load())
	}
}

// svgCharts parses an SVG document with encoding/xml and returns, per
// chart, its series and the number of points each draws.
func svgCharts(t *testing.T, doc []byte) map[string]map[string]int {
	t.Helper()
	out := map[string]map[string]int{}
	d := xml.NewDecoder(bytes.NewReader(doc))
	var chart, series string
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("the plot is not well-formed XML: %v", err)
		}
		e, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		attr := map[string]string{}
		for _, a := range e.Attr {
			attr[a.Name.Local] = a.Value
		}
		switch {
		case attr["class"] == "chart":
			chart = attr["data-title"]
			out[chart] = map[string]int{}
		case attr["class"] == "series":
			series = attr["data-name"]
			out[chart][series] += 0
		case e.Name.Local == "circle":
			out[chart][series]++
		}
	}
}

func TestBenchCluster(t *testing.T) {
	rep, _, _, stderr := runBench(t, func(o *Options) {
		o.Cluster, o.Txns, o.Producers, o.Batches, o.Preconditions = 3, 40, 4, []int{8}, nil
		o.Datasets, o.DatasetsTxns, o.Latency = []int{3}, 2, false
	})
	if rep.Nodes != 3 {
		t.Errorf("cluster_nodes = %d, want 3", rep.Nodes)
	}
	if got, want := len(rep.Runs), 4; got != want {
		t.Fatalf("%d runs, want %d: %+v\n%s", got, want, rep.Runs, stderr)
	}
	for _, r := range rep.Runs {
		if r.Replicas != 3 {
			t.Errorf("%s: the decision stream has %d replicas, want 3", r.Name, r.Replicas)
		}
		if r.CommitsPerSec <= 0 || r.Rejected != 0 {
			t.Errorf("%s: rate %v, %d rejected", r.Name, r.CommitsPerSec, r.Rejected)
		}
	}
}

func TestBenchRejectsBadOptions(t *testing.T) {
	for name, set := range map[string]func(o *Options){
		"cluster 0": func(o *Options) { o.Cluster = 0 }, "cluster 6": func(o *Options) { o.Cluster = 6 },
		"batch 0": func(o *Options) { o.Batches = []int{0} }, "preconditions -1": func(o *Options) { o.Preconditions = []int{-1} },
		"producers 0":      func(o *Options) { o.Producers = 0 },
		"producers > txns": func(o *Options) { o.Txns, o.Producers = 10, 11 },
		"datasets-txns 0":  func(o *Options) { o.DatasetsTxns = 0 }, "progress 0": func(o *Options) { o.Progress = 0 },
		"rounds 0": func(o *Options) { o.Rounds = 0 }, "rounds 101": func(o *Options) { o.Rounds = 101 },
		"atomic-min -1": func(o *Options) { o.AtomicMin = -1 },
	} {
		o := Defaults()
		set(&o)
		o.DataDir = t.TempDir() // an error must come before anything starts in it
		var out, errOut bytes.Buffer
		err := Run(t.Context(), o, &out, &errOut)
		var oe *OptionError
		if !errors.As(err, &oe) {
			t.Errorf("%s: Run = %v, want an *OptionError", name, err)
		}
		if entries, _ := os.ReadDir(o.DataDir); len(entries) != 0 {
			t.Errorf("%s: Run left %d entries in the data directory", name, len(entries))
		}
	}
}

func TestBenchWritesWhatItHasWhenARunFails(t *testing.T) {
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "bench.json")
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the first run cannot even create its streams
	var out, errOut bytes.Buffer
	o := Defaults()
	o.Txns, o.Producers, o.Batches, o.Preconditions, o.Datasets = 10, 2, []int{1}, nil, nil
	o.DataDir, o.JSONPath = filepath.Join(dir, "data"), jsonPath
	err := Run(ctx, o, &out, &errOut)
	if err == nil {
		t.Fatal("bench with a cancelled context = nil error")
	}
	var rep benchReport
	b, rerr := os.ReadFile(jsonPath)
	if rerr != nil {
		t.Fatalf("no report after a failed run: %v (bench: %v)", rerr, err)
	}
	if err := json.Unmarshal(b, &rep); err != nil || rep.Schema != benchSchema || len(rep.Runs) != 0 {
		t.Errorf("report after a failed first run = %+v, %v; want the header and no runs", rep, err)
	}
}

func TestBenchReportJSONRoundTrip(t *testing.T) {
	rep := newBenchReport(3, 64, 1)
	rep.Runs = []benchRecord{
		{Kind: kindRaw, Load: loadMax, Name: "raw JetStream batch=8", Batch: 8, Datasets: 1, Txns: 100, CommitsPerSec: 5000.5,
			P50Ms: 1.25, P99Ms: 9.5, SetupSec: 0.2, RunSec: 1.5, RSSBytes: 64 << 20, Replicas: 3, Round: 1, AppendMs: 0.25,
			AllocPerTxn: 12800.5, GCCycles: 7},
		{Kind: kindCommitter, Load: loadHalf, Name: "committer batch=8 at 2500/s", Batch: 8, Datasets: 1, Txns: 100, OfferedPerSec: 2500,
			CommitsPerSec: 2400, P50Ms: 0.5, P99Ms: 3, Rejected: 2, RejectedBy: map[string]int64{"READ_VERSION_TOO_OLD": 2},
			RejectedExamples: map[string]string{"READ_VERSION_TOO_OLD": "read_version 3 is no longer retained"}, SetupSec: 0.1, RunSec: 1, RSSBytes: 1, Replicas: 3, VsRaw: 0.48},
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := rep.writeJSON(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got benchReport
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, rep) {
		t.Errorf("report after a round trip = %+v, want %+v", got, *rep)
	}
}

func TestBenchProgressLines(t *testing.T) {
	var buf bytes.Buffer
	p := &benchProgress{w: &buf, start: time.Now(), total: 2}
	p.decided() // nothing watched: no line
	p.begin("committer batch=8")
	tr := newTracker(4)
	p.watch("transactions", tr, 4)
	tr.done.Add(3)
	p.decided()
	p.watch("", nil, 0)
	p.decided()
	p.end(benchRecord{CommitsPerSec: 1234, P50Ms: 1.5, P99Ms: 20})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	want := []string{
		"bench [1/2] start committer batch=8 (elapsed ",
		"bench [1/2] committer batch=8, transactions: 3/4 decided (elapsed ",
		"bench [1/2] done  committer batch=8: 1234 commits/s, p50 1.50ms, p99 20.00ms in ",
	}
	if len(lines) != len(want) {
		t.Fatalf("progress lines = %q, want %d", lines, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("line %d = %q, want it to start %q", i, lines[i], want[i])
		}
	}
}

// TestBenchRunsLeaveNoStreams makes a raw and a committer run on one
// server: each has streams of its own, deleted once it is measured, and
// kept with -keep-streams.
func TestBenchRunsLeaveNoStreams(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			srv := natstest.RunServer(t)
			b := &bencher{
				url: srv.URL(), replicas: 1, n: 20, producers: 2, manyTxns: 1, log: slog.New(slog.DiscardHandler),
				keepStreams: keep, out: io.Discard, rep: newBenchReport(1, 2, 1),
				prog: &benchProgress{w: io.Discard, start: time.Now(), total: 2},
			}
			var seen []string
			for _, kind := range []string{kindRaw, kindCommitter} {
				name := kind + " batch=8"
				if _, err := b.measure(t.Context(), benchRecord{Kind: kind, Load: loadMax, Loop: loopClosed, Batch: 8, Name: name}); err != nil {
					t.Fatal(err)
				}
				left, err := b.streamNames(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if !keep && len(left) != 0 {
					t.Errorf("after %s the server has streams %v, want none", name, slices.Sorted(maps.Keys(left)))
				}
				if keep {
					for _, s := range seen {
						if !left[s] {
							t.Errorf("after %s stream %s is gone with -keep-streams", name, s)
						}
					}
					if len(left) <= len(seen) {
						t.Errorf("%s made no streams of its own: %v after %v", name, slices.Sorted(maps.Keys(left)), seen)
					}
					seen = slices.Sorted(maps.Keys(left))
				}
			}
		})
	}
}

// TestBenchCreateMatchesItsEncoding: a creation made from the template is
// byte for byte the encoding of a creation with its own uuid.
func TestBenchCreateMatchesItsEncoding(t *testing.T) {
	for _, id := range []string{uuid.NewString(), uuid.NewString(), "short-id"} {
		if got, want := benchCreate(id), encodeCreate(id); !bytes.Equal(got, want) {
			t.Errorf("benchCreate(%q): %d bytes differ from its encoding (%d bytes)", id, len(got), len(want))
		}
	}
}

// CELLGUARD_BENCH_CPU_PROFILE profiles each run's transactions into a
// file of its own, named by the run, for the single-dataset runs as for
// the many-datasets ones' phases.
func TestBenchPhaseProfiles(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "cpu")
	t.Setenv("CELLGUARD_BENCH_CPU_PROFILE", prefix)
	runBench(t, func(o *Options) {
		o.Txns, o.Producers, o.Batches, o.Preconditions = 20, 2, []int{8}, []int{2}
		o.Datasets, o.DatasetsTxns, o.Latency = []int{3}, 1, false
	})
	for _, name := range []string{
		"raw-batch8", "committer-batch8", "committer-batch8-pre2",
		"raw-setup-3", "raw-closed-3", "committer-setup-3", "committer-closed-3",
	} {
		b, err := os.ReadFile(prefix + "." + name)
		if err != nil {
			t.Errorf("profile %s: %v", name, err)
			continue
		}
		if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b { // pprof writes gzip
			t.Errorf("profile %s: %d bytes, not a gzipped profile", name, len(b))
		}
	}
}

// TestBenchAnchorKeepsTheAccountDirectory: once a run's streams are
// dropped, the server removes the account's stream directory if it is
// empty, in a goroutine of its own, which can race the next run's first
// stream creation into it. Without the anchor the directory is left
// empty (removable whenever that goroutine runs); with it, it holds the
// anchor's stream, so it stays.
func TestBenchAnchorKeepsTheAccountDirectory(t *testing.T) {
	for _, anchored := range []bool{false, true} {
		t.Run(fmt.Sprintf("anchored=%v", anchored), func(t *testing.T) {
			ctx := t.Context()
			dir := t.TempDir()
			policy, err := embedded.ParseSync(embedded.SyncAlways)
			if err != nil {
				t.Fatal(err)
			}
			url, stop, err := startBenchServers(ctx, dir, 1, policy, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			b := &bencher{url: url, replicas: 1}
			if anchored {
				if err := b.anchorStreams(ctx); err != nil {
					t.Fatal(err)
				}
			}
			before, err := b.streamNames(ctx)
			if err != nil {
				t.Fatal(err)
			}
			nc, js, err := b.connect()
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RUN", Subjects: []string{"run.>"}, Storage: jetstream.FileStorage}); err != nil {
				t.Fatal(err)
			}
			dirs, _ := filepath.Glob(filepath.Join(dir, "*", "*", "$G", "streams"))
			if len(dirs) != 1 {
				t.Fatalf("account stream directories under %s: %v, want one", dir, dirs)
			}
			if err := b.dropStreams(ctx, before); err != nil {
				t.Fatal(err)
			}
			// The dropped stream's files are removed in the background
			// too: wait until they are.
			var left []string
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				ents, err := os.ReadDir(dirs[0])
				if err != nil && !errors.Is(err, fs.ErrNotExist) {
					t.Fatal(err)
				}
				left = nil
				for _, e := range ents {
					left = append(left, e.Name())
				}
				if !slices.ContainsFunc(left, func(n string) bool { return strings.HasPrefix(n, ".") || n == "RUN" }) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the dropped stream's files are still there after 5 s: %v", left)
				}
			}
			var want []string // empty: removable at any moment
			if anchored {
				want = []string{anchorStream}
			}
			if !slices.Equal(left, want) {
				t.Errorf("anchored %t: the account's stream directory holds %v after the drop, want %v", anchored, left, want)
			}
		})
	}
}
