package bench

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0}, {[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), c.in...)
		if got := median(in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
		if !reflect.DeepEqual(in, c.in) && len(in) > 0 {
			t.Errorf("median reordered its input: %v, was %v", in, c.in)
		}
	}
}

// Each run's summary takes the median of every measure over the rounds,
// and its ratio is the median of the rounds' own ratios (not the ratio of
// the medians); counts add up; runs keep the first round's order.
func TestBenchMedians(t *testing.T) {
	rep := newBenchReport(1, 4, 3)
	raw := func(round int, rate float64) benchRecord {
		return benchRecord{Kind: kindRaw, Load: loadMax, Loop: loopClosed, Batch: 8, Datasets: 1, Round: round,
			Name: "raw JetStream batch=8", CommitsPerSec: rate, P50Ms: rate / 1000, P99Ms: rate / 100}
	}
	com := func(round int, rate, vs float64, rejected int64) benchRecord {
		r := benchRecord{Kind: kindCommitter, Load: loadMax, Loop: loopClosed, Batch: 8, Datasets: 1, Round: round,
			Name: "committer batch=8", CommitsPerSec: rate, VsRaw: vs, Rejected: rejected}
		if rejected > 0 {
			r.RejectedBy = map[string]int64{"CONFLICT_RETRYABLE": rejected}
			r.RejectedExamples = map[string]string{"CONFLICT_RETRYABLE": "an example"}
		}
		return r
	}
	half := func(round int, offered float64) benchRecord {
		return benchRecord{Kind: kindCommitter, Load: loadHalf, Loop: loopOpen, Batch: 8, Datasets: 1, Round: round,
			Name: "committer batch=8 at 1/s", OfferedPerSec: offered, CommitsPerSec: offered, P99Ms: offered / 1000}
	}
	rep.Runs = []benchRecord{
		raw(1, 1000), com(1, 900, 0.9, 0), half(1, 450),
		raw(2, 3000), com(2, 1500, 0.5, 2), half(2, 750),
		raw(3, 2000), com(3, 1400, 0.7, 1), half(3, 700),
	}
	got := rep.medians()
	if len(got) != 3 {
		t.Fatalf("%d summary records, want 3: %+v", len(got), got)
	}
	r, c, h := got[0], got[1], got[2]
	if r.Kind != kindRaw || r.CommitsPerSec != 2000 || r.P50Ms != 2 || r.P99Ms != 20 || r.Round != 0 || r.Rounds != 3 {
		t.Errorf("raw summary = %+v", r)
	}
	// The committer's rates are 900, 1500, 1400 (median 1400) against raw
	// 1000, 3000, 2000: the median ratio is 0.7, not 1400/2000.
	if c.CommitsPerSec != 1400 || c.VsRaw != 0.7 || !reflect.DeepEqual(c.VsRawRounds, []float64{0.9, 0.5, 0.7}) {
		t.Errorf("committer summary = %+v", c)
	}
	if c.Rejected != 3 || c.RejectedBy["CONFLICT_RETRYABLE"] != 3 || c.RejectedExamples["CONFLICT_RETRYABLE"] != "an example" {
		t.Errorf("committer summary rejections = %d %v %v", c.Rejected, c.RejectedBy, c.RejectedExamples)
	}
	if h.OfferedPerSec != 700 || h.P99Ms != 0.7 || h.VsRaw != 0 || h.VsRawRounds != nil ||
		h.Name != "committer batch=8 at 700/s" {
		t.Errorf("half-load summary = %+v", h)
	}
	// The runs themselves are left as they were.
	if rep.Runs[1].VsRaw != 0.9 || rep.Runs[4].Rejected != 2 {
		t.Errorf("runs changed: %+v", rep.Runs)
	}
}

// -rounds 2 makes the plan twice, pairs each committer run with the raw
// run of its own round, and ends with a table and records of medians.
func TestBenchRounds(t *testing.T) {
	rep, _, svg, stderr := runBench(t, func(o *Options) {
		o.Rounds, o.Txns, o.Producers, o.Batches = 2, 40, 4, []int{8}
		o.Preconditions, o.Datasets, o.Latency, o.Progress = nil, nil, false, time.Hour
	})
	if rep.Rounds != 2 || len(rep.Runs) != 4 || len(rep.Summary) != 2 {
		t.Fatalf("rounds %d, %d runs, %d summary records; want 2, 4, 2", rep.Rounds, len(rep.Runs), len(rep.Summary))
	}
	checkAllocated(t, rep.Runs)
	for i, r := range rep.Runs {
		checkBenchRecord(t, r)
		if want := 1 + i/2; r.Round != want {
			t.Errorf("run %d (%s) is in round %d, want %d", i, r.Name, r.Round, want)
		}
		if r.Kind == kindCommitter {
			raw := rep.findIn(r.Round, kindRaw, r.Load, r.Loop, r.Batch, r.Datasets)
			if raw == nil || r.VsRaw != r.CommitsPerSec/raw.CommitsPerSec {
				t.Errorf("round %d: vs_raw %v is not against its own round's raw run %+v", r.Round, r.VsRaw, raw)
			}
		}
	}
	c := rep.Summary[1]
	if c.Kind != kindCommitter || c.Rounds != 2 || len(c.VsRawRounds) != 2 || c.VsRaw != (c.VsRawRounds[0]+c.VsRawRounds[1])/2 {
		t.Errorf("committer summary = %+v", c)
	}
	for i := 1; i <= 4; i++ {
		if line := "bench [" + string(rune('0'+i)) + "/4] done"; !strings.Contains(stderr, line) {
			t.Errorf("stderr has no %q:\n%s", line, stderr)
		}
	}
	// The plot draws the medians: one point per series.
	charts := svgCharts(t, svg)
	if got := charts["throughput vs batch size (1 dataset)"]; got["committer"] != 1 || got["raw JetStream"] != 1 {
		t.Errorf("throughput chart series (points) = %v, want one point each", got)
	}
}
