package nsbench_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cellguard/internal/lancedbtest"
	"cellguard/internal/nsbench"
)

// BenchmarkLanceDB runs the full measure once and prints its report
// (and, with NSBENCH_OUT set to a directory, draws nsbench.svg there):
//
//	go test -run '^$' -bench LanceDB -benchtime 1x ./internal/nsbench
func BenchmarkLanceDB(b *testing.B) {
	for range b.N {
		rep, err := nsbench.Run(b.Context(), nsbench.Options{Progress: func(v lancedbtest.Version, s nsbench.Scenario) {
			fmt.Fprintf(os.Stderr, "LanceDB %s %s: local %.1f/s, namespace %.1f/s (%.2fx), namespace p50 %v, failed %d/%d\n",
				v.LanceDB, s.Name, s.Local.Rate, s.Namespace.Rate, s.Ratio(), s.Namespace.P50, s.Local.Failed, s.Namespace.Failed)
		}})
		if err != nil {
			b.Fatal(err)
		}
		var sb strings.Builder
		if err := rep.WriteText(&sb); err != nil {
			b.Fatal(err)
		}
		os.Stdout.WriteString(sb.String())
		if dir := os.Getenv("NSBENCH_OUT"); dir != "" {
			f, err := os.Create(filepath.Join(dir, "nsbench.svg"))
			if err != nil {
				b.Fatal(err)
			}
			if err := rep.Figure().WriteSVG(f); err != nil {
				b.Fatal(err)
			}
			if err := f.Close(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
