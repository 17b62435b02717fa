// Package benchplot draws line charts as a standalone SVG document, for
// benchmark results that people look at in a browser or a Markdown page:
// a figure is a grid of charts, a chart has axes (linear or logarithmic)
// and named series of points, and every series is one <g class="series">
// element carrying its name, so that tools can find it again.
//
//	fig := benchplot.Figure{Title: "bench", Columns: 2, Charts: []benchplot.Chart{{
//		Title: "throughput", XLabel: "batch size", YLabel: "commits/s", LogX: true,
//		Series: []benchplot.Series{{Name: "raw", Points: []benchplot.Point{{X: 1, Y: 5000}, {X: 8, Y: 7000}}}},
//	}}}
//	err := fig.WriteSVG(w)
//
// It writes SVG 1.1 with no scripts, fonts or external references.
package benchplot

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ErrBadPoint is wrapped by a *PointError.
var ErrBadPoint = errors.New("benchplot: bad point")

// PointError names a point that cannot be drawn: not finite, or not
// positive on a logarithmic axis.
type PointError struct {
	Chart, Series string
	Point         Point
}

func (e *PointError) Error() string {
	return fmt.Sprintf("benchplot: chart %q, series %q: point (%g, %g) cannot be drawn", e.Chart, e.Series, e.Point.X, e.Point.Y)
}

func (e *PointError) Unwrap() error { return ErrBadPoint }

// Point is one (x, y) value.
type Point struct{ X, Y float64 }

// Series is a named line. Dashed draws it dashed; Color is an SVG color
// (empty: the next of the chart's palette).
type Series struct {
	Name   string
	Color  string
	Dashed bool
	Points []Point
}

// Chart is one set of axes. X ticks are placed at the points' X values;
// Y ticks at round values (powers of ten on a logarithmic axis).
type Chart struct {
	Title, XLabel, YLabel string
	LogX, LogY            bool
	Series                []Series
}

// Figure is a titled grid of charts, Columns wide (0 means 2).
type Figure struct {
	Title   string
	Columns int
	Charts  []Chart
}

// Chart geometry in SVG user units.
const (
	panelW, panelH = 560, 330
	padL, padR     = 70, 170 // the right margin holds the legend
	padT, padB     = 36, 48
	titleH         = 40
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#7f7f7f"}

// WriteSVG writes the figure as one SVG document.
func (f Figure) WriteSVG(w io.Writer) error {
	for _, c := range f.Charts {
		if err := c.check(); err != nil {
			return err
		}
	}
	cols := f.Columns
	if cols <= 0 {
		cols = 2
	}
	rows := (len(f.Charts) + cols - 1) / cols
	width, height := cols*panelW, titleH+rows*panelH
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(bw, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(bw, `<text class="figure-title" x="%d" y="26" text-anchor="middle" font-size="16">%s</text>`+"\n", width/2, esc(f.Title))
	for i, c := range f.Charts {
		x0, y0 := (i%cols)*panelW, titleH+(i/cols)*panelH
		c.write(bw, x0, y0)
	}
	fmt.Fprintln(bw, "</svg>")
	return bw.Flush()
}

func (c Chart) check() error {
	for _, s := range c.Series {
		for _, p := range s.Points {
			bad := math.IsNaN(p.X) || math.IsInf(p.X, 0) || math.IsNaN(p.Y) || math.IsInf(p.Y, 0) ||
				(c.LogX && p.X <= 0) || (c.LogY && p.Y <= 0)
			if bad {
				return &PointError{Chart: c.Title, Series: s.Name, Point: p}
			}
		}
	}
	return nil
}

// axis maps data values to a pixel range, linearly or by their logarithm.
type axis struct {
	lo, hi   float64 // in scale units (log10 on a log axis)
	from, to float64 // pixels
	log      bool
}

// newAxis fits an axis to vals. An x axis (fit) spans the values with a
// margin; a y axis starts at zero (linear) or spans whole decades (log).
func newAxis(vals []float64, log, fit bool, from, to float64) axis {
	a := axis{from: from, to: to, log: log, lo: math.Inf(1), hi: math.Inf(-1)}
	for _, v := range vals {
		a.lo, a.hi = min(a.lo, a.scale(v)), max(a.hi, a.scale(v))
	}
	if len(vals) == 0 {
		a.lo, a.hi = 0, 1
	}
	if a.hi-a.lo < 1e-12 {
		a.lo, a.hi = a.lo-0.5, a.hi+0.5
	}
	switch {
	case fit:
		margin := (a.hi - a.lo) * 0.06
		a.lo, a.hi = a.lo-margin, a.hi+margin
	case log:
		a.lo, a.hi = math.Floor(a.lo), math.Ceil(a.hi)
	default:
		a.lo = min(a.lo, 0)
		step := a.step()
		a.lo, a.hi = math.Floor(a.lo/step)*step, math.Ceil(a.hi/step)*step
	}
	return a
}

// step is the distance between round ticks on a linear axis: 1, 2 or 5
// times a power of ten, giving at most six intervals.
func (a axis) step() float64 {
	step := math.Pow(10, math.Floor(math.Log10((a.hi-a.lo)/5)))
	for _, m := range []float64{1, 2, 5, 10} {
		if (a.hi-a.lo)/(m*step) <= 6 {
			return m * step
		}
	}
	return 10 * step
}

func (a axis) scale(v float64) float64 {
	if a.log {
		return math.Log10(v)
	}
	return v
}

func (a axis) pos(v float64) float64 {
	return a.from + (a.scale(v)-a.lo)/(a.hi-a.lo)*(a.to-a.from)
}

// ticks returns round values across a linear axis, or the powers of ten
// (with 2 and 5 between them when there are few) across a log axis.
func (a axis) ticks() []float64 {
	var out []float64
	if a.log {
		for e := a.lo; e <= a.hi; e++ {
			for _, m := range []float64{1, 2, 5} {
				if v := m * math.Pow(10, e); (m == 1 || a.hi-a.lo <= 3) && math.Log10(v) <= a.hi+1e-9 {
					out = append(out, v)
				}
			}
		}
		return out
	}
	step := a.step()
	for v := math.Ceil(a.lo/step) * step; v <= a.hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

func (c Chart) write(w io.Writer, x0, y0 int) {
	var xs, ys []float64
	for _, s := range c.Series {
		for _, p := range s.Points {
			xs, ys = append(xs, p.X), append(ys, p.Y)
		}
	}
	left, right := float64(x0+padL), float64(x0+panelW-padR)
	top, bottom := float64(y0+padT), float64(y0+panelH-padB)
	ax := newAxis(xs, c.LogX, true, left, right)
	ay := newAxis(ys, c.LogY, false, bottom, top)
	fmt.Fprintf(w, `<g class="chart" data-title="%s">`+"\n", esc(c.Title))
	fmt.Fprintf(w, `<text x="%g" y="%d" text-anchor="middle" font-size="14">%s</text>`+"\n", (left+right)/2, y0+padT-12, esc(c.Title))
	fmt.Fprintf(w, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#444"/>`+"\n", left, top, right-left, bottom-top)
	for _, v := range ay.ticks() {
		y := ay.pos(v)
		fmt.Fprintf(w, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/><text x="%g" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left, y, right, y, left-6, y, label(v))
	}
	slices.Sort(xs)
	for _, v := range slices.Compact(xs) {
		x := ax.pos(v)
		fmt.Fprintf(w, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#444"/><text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n", x, bottom, x, bottom+4, x, bottom+17, label(v))
	}
	fmt.Fprintf(w, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", (left+right)/2, bottom+36, esc(c.XLabel))
	fmt.Fprintf(w, `<text transform="translate(%d %g) rotate(-90)" text-anchor="middle">%s</text>`+"\n", x0+16, (top+bottom)/2, esc(c.YLabel))
	for i, s := range c.Series {
		color := s.Color
		if color == "" {
			color = palette[i%len(palette)]
		}
		writeSeries(w, s, esc(color), ax, ay)
		ly := top + 10 + float64(i)*18
		fmt.Fprintf(w, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"%s/><text x="%g" y="%g" dominant-baseline="middle">%s</text>`+"\n",
			right+10, ly, right+34, ly, esc(color), dash(s.Dashed), right+40, ly, esc(s.Name))
	}
	fmt.Fprintln(w, "</g>")
}

func writeSeries(w io.Writer, s Series, color string, ax, ay axis) {
	pts := slices.Clone(s.Points)
	slices.SortStableFunc(pts, func(a, b Point) int { return cmpFloat(a.X, b.X) })
	fmt.Fprintf(w, `<g class="series" data-name="%s">`, esc(s.Name))
	var path []string
	for _, p := range pts {
		path = append(path, fmt.Sprintf("%.1f,%.1f", ax.pos(p.X), ay.pos(p.Y)))
	}
	fmt.Fprintf(w, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`, strings.Join(path, " "), color, dash(s.Dashed))
	for _, p := range pts {
		fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %s at %s</title></circle>`, ax.pos(p.X), ay.pos(p.Y), color, esc(s.Name), label(p.Y), label(p.X))
	}
	fmt.Fprintln(w, "</g>")
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func dash(on bool) string {
	if on {
		return ` stroke-dasharray="6 4"`
	}
	return ""
}

// label formats a tick or point value briefly: 12k, 1.5M, 0.25.
func label(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return trim(v/1e6) + "M"
	case a >= 1e4:
		return trim(v/1e3) + "k"
	default:
		return trim(v)
	}
}

// trim rounds v to three significant digits without an exponent.
func trim(v float64) string {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64) // always parses
	return strconv.FormatFloat(r, 'f', -1, 64)
}

var escaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&apos;")

func esc(s string) string { return escaper.Replace(s) }
