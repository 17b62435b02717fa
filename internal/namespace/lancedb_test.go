package namespace_test

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"cellguard/internal/lancedbtest"
)

//go:embed testdata/lifecycle.mjs
var lifecycleJS string

type row = map[string]any

type lifecycleOut struct {
	Steps []struct {
		Op      string `json:"op"`
		Version uint64 `json:"version"`
	} `json:"steps"`
	Versions []uint64 `json:"versions"`
	At       map[string]struct {
		Count int   `json:"count"`
		Rows  []row `json:"rows"`
	} `json:"at"`
	Names []string `json:"names"`
}

// TestLanceDBLifecycle: create, add, update, delete and add a column with
// unmodified LanceDB through the namespace; every version reads back
// with the values each step left.
func TestLanceDBLifecycle(t *testing.T) {
	e := newEnv(t, envOptions{})
	var out lifecycleOut
	lancedbtest.Run(t, lancedbtest.Prelude+lifecycleJS, map[string]any{"uri": e.url, "table": "t1"}, &out)
	t.Logf("steps %+v versions %v", out.Steps, out.Versions)
	for i, s := range out.Steps {
		if s.Version != uint64(i+1) {
			t.Errorf("step %s at version %d, want %d", s.Op, s.Version, i+1)
		}
	}
	want := map[uint64][]row{
		1: {{"id": 1, "x": 10}, {"id": 2, "x": 20}, {"id": 3, "x": 30}},
		2: {{"id": 1, "x": 10}, {"id": 2, "x": 20}, {"id": 3, "x": 30}, {"id": 4, "x": 40}, {"id": 5, "x": 50}},
		3: {{"id": 1, "x": 10}, {"id": 2, "x": 200}, {"id": 3, "x": 30}, {"id": 4, "x": 40}, {"id": 5, "x": 50}},
		4: {{"id": 1, "x": 10}, {"id": 2, "x": 200}, {"id": 4, "x": 40}, {"id": 5, "x": 50}},
		5: {{"id": 1, "x": 10, "y": 20}, {"id": 2, "x": 200, "y": 400}, {"id": 4, "x": 40, "y": 80}, {"id": 5, "x": 50, "y": 100}},
	}
	if len(out.Versions) != len(want) {
		t.Fatalf("versions %v, want 1..%d", out.Versions, len(want))
	}
	for v, rows := range want {
		got := out.At[fmt.Sprint(v)]
		if g, w := js(t, got.Rows), js(t, rows); g != w || got.Count != len(rows) {
			t.Errorf("version %d: count %d rows %s, want %s", v, got.Count, g, w)
		}
	}
	if len(out.Names) != 1 || out.Names[0] != "t1" {
		t.Errorf("tableNames %v, want [t1]", out.Names)
	}
	// Every version went through version/create and the committer.
	if n := testutil.ToFloat64(e.ns.Requests("version_create", 200)); n != 5 {
		t.Errorf("%v version/create answered 200, want 5", n)
	}
	e.checkLog(t, "t1", 5)
}

func js(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
