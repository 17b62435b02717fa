package nsbench_test

import (
	"os"
	"strings"
	"testing"

	"cellguard/internal/nsbench"
)

// BenchmarkLanceDB runs the full measure once and prints its report:
// go test -run '^$' -bench LanceDB -benchtime 1x ./internal/nsbench
func BenchmarkLanceDB(b *testing.B) {
	for range b.N {
		rep, err := nsbench.Run(b.Context(), nsbench.Options{})
		if err != nil {
			b.Fatal(err)
		}
		var sb strings.Builder
		if err := rep.WriteText(&sb); err != nil {
			b.Fatal(err)
		}
		os.Stdout.WriteString(sb.String())
	}
}
