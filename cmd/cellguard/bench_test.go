package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// runBench runs `cellguard bench args... -json -plot` in this process and
// returns the report as written, the SVG and stderr.
func runBench(t *testing.T, args ...string) (rep benchReport, raw, svg []byte, stderr string) {
	t.Helper()
	dir := t.TempDir()
	jsonPath, plotPath := filepath.Join(dir, "bench.json"), filepath.Join(dir, "bench.svg")
	args = append(args, "-data-dir", filepath.Join(dir, "data"), "-json", jsonPath, "-plot", plotPath)
	var out, errOut bytes.Buffer
	if err := bench(t.Context(), args, &out, &errOut); err != nil {
		t.Fatalf("bench %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, &out, &errOut)
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
	rep, raw, svg, stderr := runBench(t, "-txns", "60", "-producers", "6", "-batches", "1,32", "-preconditions", "4",
		"-datasets", "3,6", "-datasets-txns", "2", "-progress", "1ms")

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
	// 4 runs per batch size (raw, committer, and both at half load), 1
	// with preconditions, 2 per dataset count.
	if got, want := len(rep.Runs), 4*2+1+2*2; got != want {
		t.Fatalf("%d runs, want %d: %+v", got, want, rep.Runs)
	}
	for _, r := range rep.Runs {
		checkBenchRecord(t, r)
	}
	for _, want := range []struct {
		kind, load          string
		batch, datasets, tx int
	}{
		{kindRaw, loadMax, 1, 1, 60}, {kindCommitter, loadMax, 32, 1, 60}, {kindCommitter, loadHalf, 32, 1, 60},
		{kindCommitter, loadPreconditions, 32, 1, 60}, {kindRaw, loadDatasets, manyBatch, 6, 12}, {kindCommitter, loadDatasets, manyBatch, 3, 6},
	} {
		r := rep.find(want.kind, want.load, want.batch, want.datasets)
		if r == nil || r.Txns != want.tx {
			t.Errorf("run %+v = %+v, want one with %d txns", want, r, want.tx)
		}
	}
	if r := rep.find(kindCommitter, loadPreconditions, 32, 1); r != nil && r.Protected != 4 {
		t.Errorf("preconditions run protects %d fragments, want 4", r.Protected)
	}

	charts := svgCharts(t, svg)
	lat := map[string]int{"raw JetStream p50": 2, "raw JetStream p99": 2, "committer p50": 2, "committer p99": 2}
	want := map[string]map[string]int{
		"throughput vs batch size (1 dataset)":             {"raw JetStream": 2, "committer": 2},
		"latency vs batch size, full speed":                lat,
		"throughput vs number of datasets":                 {"raw JetStream": 2, "committer": 2},
		"latency vs number of datasets":                    lat,
		"latency vs batch size, half the committer's rate": lat,
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
	}
	ratio := r.Kind == kindCommitter && (r.Load == loadMax || r.Load == loadDatasets)
	if ratio != (r.VsRaw > 0) {
		t.Errorf("%s (%s, %s): vs_raw %v", r.Name, r.Kind, r.Load, r.VsRaw)
	}
	if r.Load == loadHalf && r.OfferedPerSec <= 0 {
		t.Errorf("%s: half load offered %v/s", r.Name, r.OfferedPerSec)
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
	rep, _, _, stderr := runBench(t, "-cluster", "3", "-txns", "40", "-producers", "4", "-batches", "8", "-preconditions", "",
		"-datasets", "3", "-datasets-txns", "2", "-latency=false")
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

func TestBenchRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-cluster", "0"}, {"-cluster", "6"}, {"-batches", "0"}, {"-batches", "x"}, {"-preconditions", "-1"},
		{"-producers", "0"}, {"-txns", "10", "-producers", "11"}, {"-datasets-txns", "0"}, {"-progress", "0s"},
	} {
		var out, errOut bytes.Buffer
		err := bench(t.Context(), args, &out, &errOut)
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("bench %v = %v, want a usage error", args, err)
		}
	}
}

func TestBenchWritesWhatItHasWhenARunFails(t *testing.T) {
	dir := t.TempDir()
	jsonPath := filepath.Join(dir, "bench.json")
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the first run cannot even create its streams
	var out, errOut bytes.Buffer
	err := bench(ctx, []string{"-txns", "10", "-producers", "2", "-batches", "1", "-preconditions", "", "-datasets", "",
		"-data-dir", filepath.Join(dir, "data"), "-json", jsonPath}, &out, &errOut)
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
	rep := newBenchReport(3, 64)
	rep.Runs = []benchRecord{
		{Kind: kindRaw, Load: loadMax, Name: "raw JetStream batch=8", Batch: 8, Datasets: 1, Txns: 100, CommitsPerSec: 5000.5,
			P50Ms: 1.25, P99Ms: 9.5, SetupSec: 0.2, RunSec: 1.5, RSSBytes: 64 << 20, Replicas: 3},
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
