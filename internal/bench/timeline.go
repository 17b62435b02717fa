package bench

// timeline.go writes, with -timeline DIR, every decision of every
// run: when its transaction was staged and how long its decision took.
// A p99 says how bad the tail is; the timeline says when it happens
// (at the start of a run, every so often, at a checkpoint), which is what
// finding its cause takes.

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// sample is one decision of a run: its transaction's staging time since
// the run's first staging, and its latency.
type sample struct {
	sent, latency time.Duration
}

// timeline returns the run's decisions in staging order.
func (t *tracker) timeline() []sample {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]sample, len(t.lat))
	for i, l := range t.lat {
		out[i] = sample{sent: time.Duration(t.sentNs[i] - t.first.UnixNano()), latency: l}
	}
	slices.SortStableFunc(out, func(a, b sample) int { return int(a.sent - b.sent) })
	return out
}

// writeTimeline writes the samples of the run named name, the index-th of
// the bench, to dir as a tab-separated file; it returns its path.
func writeTimeline(dir string, index int, name string, samples []sample) (string, error) {
	path := filepath.Join(dir, fmt.Sprintf("%02d-%s.tsv", index, slug(name)))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "# %s\nsent_ms\tlatency_ms\n", name)
	for _, s := range samples {
		fmt.Fprintf(w, "%.3f\t%.3f\n", ms(s.sent), ms(s.latency))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}

// slug makes a run's name a file name: lower case letters, digits and
// single dashes.
func slug(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
			continue
		}
		dash = true
	}
	return b.String()
}
