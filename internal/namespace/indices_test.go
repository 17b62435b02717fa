package namespace_test

import (
	_ "embed"
	"encoding/json"
	"slices"
	"testing"

	"cellguard/internal/lancedbtest"
)

//go:embed testdata/indices.mjs
var indicesJS string

type indexStep struct {
	Op        string            `json:"op"`
	Version   uint64            `json:"version"`
	Error     string            `json:"error"`
	LookError string            `json:"lookError"`
	Indices   []string          `json:"indices"`
	Stats     map[string][2]int `json:"stats"`
	Scalar    struct {
		IDs  []int `json:"ids"`
		Plan bool  `json:"plan"`
	} `json:"scalar"`
	Bitmap []int `json:"bitmap"`
	FTS    any   `json:"fts"`
	Vector []int `json:"vector"`
}

// TestLanceDBIndexLifecycle drives an indexed table through the namespace
// with each LanceDB judge — btree, bitmap, FTS and IVF-PQ indices, an add and a
// delete and an update after indexing, optimize() (compaction and index
// merging), a tag and a checkout by tag, an index replaced and one
// dropped, a restore — and the same steps on a local LanceDB directory.
// After every step a fresh handle reads the indices (listIndices,
// indexStats) and runs a scalar query (which must use the btree once it
// exists), a bitmap-filtered one, an FTS and a vector search; through
// cellguard every answer, version and index statistic is the local one.
func TestLanceDBIndexLifecycle(t *testing.T) {
	lancedbtest.Each(t, testIndexLifecycle)
}

func testIndexLifecycle(t *testing.T, lv lancedbtest.Version) {
	e := newEnv(t, envOptions{})
	var got, local struct{ Steps []indexStep }
	lv.Run(t, lancedbtest.Prelude+indicesJS, map[string]any{"uri": e.url, "table": "ix"}, &got)
	lv.Run(t, lancedbtest.Prelude+indicesJS, map[string]any{"dir": t.TempDir(), "table": "ix"}, &local)
	if len(got.Steps) != len(local.Steps) || len(got.Steps) == 0 {
		t.Fatalf("%d steps through cellguard, %d locally", len(got.Steps), len(local.Steps))
	}
	for i, s := range got.Steps {
		l := local.Steps[i]
		if s.Error != "" || s.LookError != "" || l.Error != "" || l.LookError != "" {
			t.Errorf("%s: error %q / %q (locally %q / %q)", s.Op, s.Error, s.LookError, l.Error, l.LookError)
		}
		gb, _ := json.Marshal(s)
		lb, _ := json.Marshal(l)
		if string(gb) != string(lb) {
			t.Errorf("%s through cellguard:\n %s\nlocally:\n %s", s.Op, gb, lb)
		}
		if i > 0 && !s.Scalar.Plan {
			t.Errorf("%s: id = 5 does not use the btree index", s.Op)
		}
	}
	last := got.Steps[len(got.Steps)-1]
	if last.Op != "restore 5" || !slices.Equal(last.Indices, []string{"cat_idx", "id_idx", "text_idx", "vec_idx"}) {
		t.Errorf("after restore: %+v", last)
	}
	for _, s := range got.Steps {
		t.Logf("%s v%d %v %v", s.Op, s.Version, s.Indices, s.Stats)
	}
}
