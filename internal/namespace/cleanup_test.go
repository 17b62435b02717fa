package namespace_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"cellguard/internal/lancedbtest"
	"cellguard/table"
)

// TestLanceDBCleanup: LanceDB's optimize() compacts (a commit through the
// namespace) and prunes old manifests straight from storage. The
// namespace then reports the pruned versions as gone, the same way in
// version/list and version/describe, and never hands out a path to a
// missing file.
func TestLanceDBCleanup(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		e := newEnv(t, envOptions{})
		rows := func(id int) []map[string]any { return []map[string]any{{"id": id}} }
		out := runOps(t, v, e, "o", nil,
			map[string]any{"op": "create", "rows": rows(1)},
			map[string]any{"op": "add", "rows": rows(2)},
			map[string]any{"op": "add", "rows": rows(3)},
			map[string]any{"op": "optimize"},
		)
		t.Logf("results %+v versions %v rows %v", out.Results, out.Versions, js(t, out.Rows))
		for _, r := range out.Results {
			if r.Error != "" {
				t.Fatalf("ops: %+v", out.Results)
			}
		}
		head := out.Results[len(out.Results)-1].Version
		if js(t, out.Rows) != js(t, []row{{"id": 1}, {"id": 2}, {"id": 3}}) {
			t.Errorf("rows %s", js(t, out.Rows))
		}
		dir := filepath.Join(e.root, "o.lance", "_versions")
		var present, gone []uint64
		for v := uint64(1); v <= head; v++ {
			if _, err := os.Stat(filepath.Join(dir, table.ManifestFileName(v, true))); err == nil {
				present = append(present, v)
			} else {
				gone = append(gone, v)
			}
		}
		if len(gone) == 0 {
			t.Fatalf("optimize pruned no version (head %d)", head)
		}
		status, body := call(t, "POST", e.url+"/v1/table/o/version/list", "null", nil)
		if status != 200 {
			t.Fatalf("version/list: %d %v", status, body)
		}
		var listed []uint64
		for _, v := range body["versions"].([]any) {
			tv := v.(map[string]any)
			n := uint64(tv["version"].(float64))
			listed = append(listed, n)
			if _, err := os.Stat("/" + tv["manifest_path"].(string)); err != nil {
				t.Errorf("version/list gives a missing file for %d: %v", n, err)
			}
		}
		if want := reversed(present); js(t, listed) != js(t, want) {
			t.Errorf("version/list %v, want %v (present %v, gone %v)", listed, want, present, gone)
		}
		for _, v := range gone {
			status, body := call(t, "POST", e.url+"/v1/table/o/version/describe", fmt.Sprintf(`{"id":["o"],"version":%d}`, v), nil)
			if status != 404 || body["code"].(float64) != 11 {
				t.Errorf("describe pruned version %d: %d %v, want 404 code 11", v, status, body)
			}
		}
		for _, v := range present {
			status, body := call(t, "POST", e.url+"/v1/table/o/version/describe", fmt.Sprintf(`{"id":["o"],"version":%d}`, v), nil)
			if status != 200 {
				t.Errorf("describe version %d: %d %v", v, status, body)
			}
		}
		out = runOps(t, v, e, "o", nil, map[string]any{"op": "open"}, map[string]any{"op": "checkout", "version": gone[0]})
		t.Logf("LanceDB checkout(%d) of a pruned version: %+v", gone[0], out.Results)
		if out.Results[1].Error == "" {
			t.Errorf("checkout of pruned version %d succeeded", gone[0])
		}
	})
}

func reversed(vs []uint64) []uint64 {
	out := make([]uint64, len(vs))
	for i, v := range vs {
		out[len(vs)-1-i] = v
	}
	return out
}
