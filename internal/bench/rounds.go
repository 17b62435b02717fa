package bench

// Rounds: the whole plan made several times over, and each run's median.
//
// A 2-core machine shared with other work moves a single run's rate by
// ±20 %. Raw and committer runs of one round are made back to back, so a
// round's ratio is fair to both; the median over rounds of those ratios,
// and of each measure, is what the summary table reports.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
)

// runRounds makes the plan rounds times and, with more than one round,
// prints and records the medians.
func (b *bencher) runRounds(ctx context.Context, plan benchPlan, latency bool, rounds int) error {
	for b.round = 1; b.round <= rounds; b.round++ {
		if err := b.runPlan(ctx, plan, latency); err != nil {
			return err
		}
	}
	if rounds < 2 {
		return nil
	}
	b.rep.Summary = b.rep.medians()
	fmt.Fprintf(b.out, "\nmedian of %d rounds (vs raw: the median of each round's own ratio)\n\n", rounds)
	printBenchHeader(b.out)
	for _, r := range b.rep.Summary {
		printBenchRecord(b.out, r)
		if len(r.VsRawRounds) > 0 {
			fmt.Fprintf(b.out, "  vs raw by round: %s\n", formatRatios(r.VsRawRounds))
		}
	}
	return nil
}

// runKey is what makes runs of different rounds the same run.
type runKey struct {
	kind, load, loop           string
	batch, datasets, protected int
}

func keyOf(r benchRecord) runKey {
	return runKey{r.Kind, r.Load, r.Loop, r.Batch, r.Datasets, r.Protected}
}

// medians returns, for each distinct run in the order of the first round,
// a record of its medians over the rounds.
func (rep *benchReport) medians() []benchRecord {
	var order []runKey
	byKey := map[runKey][]benchRecord{}
	for _, r := range rep.Runs {
		k := keyOf(r)
		if _, ok := byKey[k]; !ok {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], r)
	}
	out := make([]benchRecord, 0, len(order))
	for _, k := range order {
		out = append(out, summarize(byKey[k]))
	}
	return out
}

// summarize is the median record of runs of one key: every measure is
// the median of its values (a ratio of the rounds' ratios, not of the
// medians), counts add up.
func summarize(runs []benchRecord) benchRecord {
	s := runs[0]
	med := func(f func(benchRecord) float64) float64 {
		vs := make([]float64, len(runs))
		for i, r := range runs {
			vs[i] = f(r)
		}
		return median(vs)
	}
	s.Round, s.Rounds = 0, len(runs)
	s.OfferedPerSec = med(func(r benchRecord) float64 { return r.OfferedPerSec })
	s.CommitsPerSec = med(func(r benchRecord) float64 { return r.CommitsPerSec })
	s.P50Ms = med(func(r benchRecord) float64 { return r.P50Ms })
	s.P99Ms = med(func(r benchRecord) float64 { return r.P99Ms })
	s.SetupSec = med(func(r benchRecord) float64 { return r.SetupSec })
	s.RunSec = med(func(r benchRecord) float64 { return r.RunSec })
	s.CPUPerTxnUs = med(func(r benchRecord) float64 { return r.CPUPerTxnUs })
	s.AppendMs = med(func(r benchRecord) float64 { return r.AppendMs })
	s.AllocPerTxn = med(func(r benchRecord) float64 { return r.AllocPerTxn })
	s.GCCycles = uint64(med(func(r benchRecord) float64 { return float64(r.GCCycles) }))
	s.RSSBytes = uint64(med(func(r benchRecord) float64 { return float64(r.RSSBytes) }))
	s.Groups = int64(med(func(r benchRecord) float64 { return float64(r.Groups) }))
	s.Rejected, s.Duplicates, s.OutOfOrder, s.RejectedBy, s.RejectedExamples = 0, 0, 0, nil, nil
	for _, r := range runs {
		s.Rejected += r.Rejected
		s.Duplicates += r.Duplicates
		s.OutOfOrder += r.OutOfOrder
		for reason, n := range r.RejectedBy {
			if s.RejectedBy == nil {
				s.RejectedBy, s.RejectedExamples = map[string]int64{}, map[string]string{}
			}
			s.RejectedBy[reason] += n
			if _, ok := s.RejectedExamples[reason]; !ok {
				s.RejectedExamples[reason] = r.RejectedExamples[reason]
			}
		}
	}
	s.VsRaw, s.VsRawRounds = 0, nil
	if !slices.ContainsFunc(runs, func(r benchRecord) bool { return r.VsRaw <= 0 }) {
		for _, r := range runs {
			s.VsRawRounds = append(s.VsRawRounds, r.VsRaw)
		}
		s.VsRaw = median(s.VsRawRounds)
	}
	if name, _, cut := strings.Cut(s.Name, " at "); cut && s.OfferedPerSec > 0 {
		s.Name = fmt.Sprintf("%s at %.0f/s", name, s.OfferedPerSec)
	}
	return s
}

// median returns the middle value of vs (the mean of the two middle ones
// for an even count).
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	vs = slices.Clone(vs)
	slices.SortFunc(vs, cmp.Compare[float64])
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

func formatRatios(vs []float64) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("%.2f×", v)
	}
	return strings.Join(parts, " ")
}
