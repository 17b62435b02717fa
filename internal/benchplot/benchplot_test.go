package benchplot_test

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"slices"
	"strings"
	"testing"

	"cellguard/internal/benchplot"
)

// svgSeries parses an SVG document and returns, per chart title, the
// names of its series and the number of points each draws.
func svgSeries(t *testing.T, doc []byte) map[string]map[string]int {
	t.Helper()
	out := map[string]map[string]int{}
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var chart, series string
	depth, seriesDepth := 0, -1
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, doc)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			depth++
			if depth == 1 && (e.Name.Local != "svg" || e.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root element = %v, want svg in the SVG namespace", e.Name)
			}
			switch attr(e, "class") {
			case "chart":
				chart = attr(e, "data-title")
				out[chart] = map[string]int{}
			case "series":
				series, seriesDepth = attr(e, "data-name"), depth
				out[chart][series] += 0
			}
			if e.Name.Local == "circle" && seriesDepth >= 0 {
				out[chart][series]++
			}
		case xml.EndElement:
			if depth == seriesDepth {
				seriesDepth = -1
			}
			depth--
		}
	}
	return out
}

func attr(e xml.StartElement, name string) string {
	for _, a := range e.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

func TestWriteSVGSeries(t *testing.T) {
	fig := benchplot.Figure{Title: `bench <R1> & "friends"`, Charts: []benchplot.Chart{
		{Title: "throughput", XLabel: "batch", YLabel: "commits/s", LogX: true, Series: []benchplot.Series{
			{Name: "raw JetStream", Dashed: true, Points: []benchplot.Point{{X: 256, Y: 12000}, {X: 1, Y: 6000}, {X: 8, Y: 7000}}},
			{Name: "committer", Points: []benchplot.Point{{X: 1, Y: 3600}, {X: 8, Y: 4500}, {X: 256, Y: 8500}}},
		}},
		{Title: "latency", XLabel: "datasets", YLabel: "ms", LogX: true, LogY: true, Series: []benchplot.Series{
			{Name: "p50", Points: []benchplot.Point{{X: 100, Y: 0.5}, {X: 1000, Y: 1900}}},
			{Name: "p99 <half load>", Points: []benchplot.Point{{X: 100, Y: 3}}},
		}},
		{Title: "empty"},
	}}
	var buf bytes.Buffer
	if err := fig.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	got := svgSeries(t, buf.Bytes())
	want := map[string]map[string]int{
		"throughput": {"raw JetStream": 3, "committer": 3},
		"latency":    {"p50": 2, "p99 <half load>": 1},
		"empty":      {},
	}
	for chart, series := range want {
		for name, n := range series {
			if got[chart][name] != n {
				t.Errorf("chart %q series %q: %d points, want %d", chart, name, got[chart][name], n)
			}
		}
		if len(got[chart]) != len(series) {
			t.Errorf("chart %q has series %v, want %v", chart, got[chart], series)
		}
	}
	if len(got) != len(want) {
		t.Errorf("charts = %v, want %d", got, len(want))
	}
	for _, tick := range []string{">12k<", ">6000<", ">256<", ">1000<"} {
		if !strings.Contains(buf.String(), tick) {
			t.Errorf("SVG has no label %s", tick)
		}
	}
}

func TestWriteSVGRejectsUndrawablePoints(t *testing.T) {
	for _, c := range []benchplot.Chart{
		{Title: "nan", Series: []benchplot.Series{{Name: "s", Points: []benchplot.Point{{X: 1, Y: math.NaN()}}}}},
		{Title: "inf", Series: []benchplot.Series{{Name: "s", Points: []benchplot.Point{{X: math.Inf(1), Y: 1}}}}},
		{Title: "logy", LogY: true, Series: []benchplot.Series{{Name: "s", Points: []benchplot.Point{{X: 1, Y: 0}}}}},
		{Title: "logx", LogX: true, Series: []benchplot.Series{{Name: "s", Points: []benchplot.Point{{X: -1, Y: 1}}}}},
	} {
		var buf bytes.Buffer
		err := benchplot.Figure{Charts: []benchplot.Chart{c}}.WriteSVG(&buf)
		var pe *benchplot.PointError
		if !errors.As(err, &pe) || !errors.Is(err, benchplot.ErrBadPoint) || pe.Chart != c.Title {
			t.Errorf("%s: WriteSVG = %v, want a *PointError for the chart", c.Title, err)
		}
		if buf.Len() != 0 {
			t.Errorf("%s: wrote %d bytes before failing", c.Title, buf.Len())
		}
	}
}

func TestLinearTicksAreRound(t *testing.T) {
	// The y axis runs from zero to the round value above the largest.
	for _, tc := range []struct {
		lo, hi float64
		want   []string
	}{
		{1234, 8765, []string{"0", "2000", "4000", "6000", "8000", "10k"}},
		{8000, 8100, []string{"0", "2000", "4000", "6000", "8000", "10k"}},
		{0.2, 0.9, []string{"0", "0.2", "0.4", "0.6", "0.8", "1"}},
	} {
		fig := benchplot.Figure{Charts: []benchplot.Chart{{Title: "t", Series: []benchplot.Series{
			{Name: "s", Points: []benchplot.Point{{X: 1, Y: tc.lo}, {X: 2, Y: tc.hi}}},
		}}}}
		var buf bytes.Buffer
		if err := fig.WriteSVG(&buf); err != nil {
			t.Fatal(err)
		}
		var labels []string
		for _, part := range strings.Split(buf.String(), `text-anchor="end" dominant-baseline="middle">`)[1:] {
			labels = append(labels, part[:strings.Index(part, "<")])
		}
		if !slices.Equal(labels, tc.want) {
			t.Errorf("y labels for %g..%g = %v, want %v", tc.lo, tc.hi, labels, tc.want)
		}
	}
}
