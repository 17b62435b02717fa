package bench

// The -plot figure of `cellguard bench`: throughput and latency against
// the batch size and against the number of datasets, committer beside
// raw JetStream, drawn by internal/benchplot.

import (
	"fmt"
	"os"

	"cellguard/internal/benchplot"
)

// Series colors: one per kind, so that a reader matches lines across
// charts; p99 is dashed, p50 solid.
var kindColor = map[string]string{kindRaw: "#1f77b4", kindCommitter: "#d62728"}

var kindLabel = map[string]string{kindRaw: "raw JetStream", kindCommitter: "committer"}

// figure lays out the report's charts; a chart without runs is left out.
func (rep *benchReport) figure() benchplot.Figure {
	f := benchplot.Figure{
		Title: fmt.Sprintf("cellguard bench, %s, %d producers, %d CPUs (%s)",
			serversLabel(rep.Nodes), rep.Producers, rep.CPUs, rep.Started.Format("2006-01-02 15:04 MST")),
		Columns: 2,
	}
	byBatch := func(r benchRecord) float64 { return float64(r.Batch) }
	byDatasets := func(r benchRecord) float64 { return float64(r.Datasets) }
	load := func(load string) func(benchRecord) bool {
		return func(r benchRecord) bool { return r.Load == load }
	}
	many := func(loop string) func(benchRecord) bool {
		return func(r benchRecord) bool { return r.Load == loadDatasets && r.Loop == loop }
	}
	dsLabel := fmt.Sprintf("datasets (batch %d)", manyBatch)
	for _, c := range []benchplot.Chart{
		rep.throughput("throughput vs batch size (1 dataset)", "batch size", load(loadMax), byBatch),
		rep.latency("latency vs batch size, full speed", "batch size", load(loadMax), byBatch),
		rep.throughput("throughput vs number of datasets, closed loop", dsLabel, many(loopClosed), byDatasets),
		rep.latency("latency vs number of datasets, closed loop", dsLabel, many(loopClosed), byDatasets),
		rep.throughput("throughput vs number of datasets, all staged at once", dsLabel, many(loopBurst), byDatasets),
		rep.latency("latency vs number of datasets, all staged at once", dsLabel, many(loopBurst), byDatasets),
		rep.latency("latency vs batch size, half the committer's rate", "batch size", load(loadHalf), byBatch),
		rep.latency("latency vs number of datasets, half the committer's rate", dsLabel, many(loopOpen), byDatasets),
	} {
		if len(c.Series) > 0 {
			f.Charts = append(f.Charts, c)
		}
	}
	return f
}

// throughput is commits/s of the runs that match against x, one series
// per kind.
func (rep *benchReport) throughput(title, xlabel string, match func(benchRecord) bool, x func(benchRecord) float64) benchplot.Chart {
	c := benchplot.Chart{Title: title, XLabel: xlabel, YLabel: "commits/s", LogX: true}
	for _, kind := range []string{kindRaw, kindCommitter} {
		s := benchplot.Series{Name: kindLabel[kind], Color: kindColor[kind]}
		for _, r := range rep.plotted() {
			if r.Kind == kind && match(r) && r.CommitsPerSec > 0 {
				s.Points = append(s.Points, benchplot.Point{X: x(r), Y: r.CommitsPerSec})
			}
		}
		if len(s.Points) > 0 {
			c.Series = append(c.Series, s)
		}
	}
	return c
}

// latency is p50 and p99 of the runs that match against x (log scale),
// two series per kind.
func (rep *benchReport) latency(title, xlabel string, match func(benchRecord) bool, x func(benchRecord) float64) benchplot.Chart {
	c := benchplot.Chart{Title: title, XLabel: xlabel, YLabel: "ms, staged to decided", LogX: true, LogY: true}
	for _, kind := range []string{kindRaw, kindCommitter} {
		for _, q := range []struct {
			name   string
			dashed bool
			v      func(benchRecord) float64
		}{
			{"p50", false, func(r benchRecord) float64 { return r.P50Ms }},
			{"p99", true, func(r benchRecord) float64 { return r.P99Ms }},
		} {
			s := benchplot.Series{Name: kindLabel[kind] + " " + q.name, Color: kindColor[kind], Dashed: q.dashed}
			for _, r := range rep.plotted() {
				if r.Kind == kind && match(r) && q.v(r) > 0 {
					s.Points = append(s.Points, benchplot.Point{X: x(r), Y: q.v(r)})
				}
			}
			if len(s.Points) > 0 {
				c.Series = append(c.Series, s)
			}
		}
	}
	return c
}

// plotted is what the plot draws: each run's medians over the rounds, or
// the runs themselves when there was one round.
func (rep *benchReport) plotted() []benchRecord {
	if len(rep.Summary) > 0 {
		return rep.Summary
	}
	return rep.Runs
}

// writePlot writes the figure to path as SVG.
func (rep *benchReport) writePlot(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.figure().WriteSVG(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
