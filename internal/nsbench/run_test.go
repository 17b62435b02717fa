package nsbench_test

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"cellguard/internal/lancedbtest"
	"cellguard/internal/nsbench"
)

// TestRunTiny runs a tiny measure with both LanceDB releases and checks
// what it did, never how fast: every call succeeded against both targets,
// both tables end with the rows the workload implies, and the namespace
// table's versions are one per call after its creation. Every call is
// bounded, so a call that never ends fails the test instead of hanging it.
func TestRunTiny(t *testing.T) {
	opts := nsbench.Options{
		Appends: 3, AppendHandles: []int{2}, ConcurrentAppends: 2,
		MixedHandles: []int{2}, MixedOps: 12, MixedKeys: 2, Check: true, Dir: t.TempDir(),
		CallTimeout: time.Minute,
	}
	rep, err := nsbench.Run(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Versions) != len(lancedbtest.Versions) {
		t.Fatalf("%d LanceDB releases reported, want %d", len(rep.Versions), len(lancedbtest.Versions))
	}
	for _, v := range rep.Versions {
		names := []string{}
		for _, s := range v.Scenarios {
			names = append(names, s.Name)
			want := expectedRows(s, opts.MixedKeys)
			for target, r := range map[string]nsbench.Result{"local": s.Local, "namespace": s.Namespace} {
				if r.Failed != 0 || r.Calls != s.Handles*s.OpsPerHandle {
					t.Errorf("LanceDB %s %s %s: %d calls succeeded, %d failed (%v), want %d and 0", v.LanceDB, s.Name, target, r.Calls, r.Failed, r.Errors, s.Handles*s.OpsPerHandle)
				}
				if r.Count != len(want) || !mapsEqual(r.Rows, want) {
					t.Errorf("LanceDB %s %s %s: %d rows %v, want %v", v.LanceDB, s.Name, target, r.Count, r.Rows, want)
				}
				if r.Rate <= 0 || r.P50 <= 0 || r.P99 < r.P50 {
					t.Errorf("LanceDB %s %s %s: rate %v p50 %v p99 %v", v.LanceDB, s.Name, target, r.Rate, r.P50, r.P99)
				}
			}
			// Through the namespace every successful call is one version.
			n := uint64(1 + s.Handles*s.OpsPerHandle)
			if vs := s.Namespace.Versions; uint64(len(vs)) != n || slices.Max(vs) != n {
				t.Errorf("LanceDB %s %s namespace: versions %v, want 1..%d", v.LanceDB, s.Name, vs, n)
			}
		}
		if got := strings.Join(names, ","); got != "serial,append-2,mixed-2" {
			t.Errorf("scenarios %s", got)
		}
	}
	if err := rep.WriteText(os.Stderr); err != nil {
		t.Fatal(err)
	}
	fig := rep.Figure()
	if len(fig.Charts) != 2*len(rep.Versions) {
		t.Errorf("%d charts, want appends and mixed per release", len(fig.Charts))
	}
	var svg strings.Builder
	if err := fig.WriteSVG(&svg); err != nil || !strings.Contains(svg.String(), "through the namespace") {
		t.Errorf("figure: %v", err)
	}
}

// expectedRows is what the driver's workload leaves in a table (see
// driver.mjs): appends add id = x; a mixed handle's rotation ends each
// key it touched with the x of its last mergeInsert.
func expectedRows(s nsbench.Scenario, keys int) map[int64]int64 {
	key := func(h, j int) int64 { return int64(h*100000 + j) }
	rows := map[int64]int64{}
	if s.Kind == "append" {
		rows[-1] = 0
		for h := 0; h < s.Handles; h++ {
			for i := 0; i < s.OpsPerHandle; i++ {
				rows[key(h, i)] = key(h, i)
			}
		}
		return rows
	}
	for h := 0; h < s.Handles; h++ {
		for j := 0; j < keys; j++ {
			rows[key(h, j)] = 0
		}
		for i := 2; i < s.OpsPerHandle; i += 3 {
			rows[key(h, (i/3)%keys)] = int64(1000000 + i)
		}
	}
	return rows
}

func mapsEqual(a, b map[int64]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
