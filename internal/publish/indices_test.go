package publish_test

import (
	"context"
	_ "embed"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"cellguard/committer"
	"cellguard/internal/lancedbtest"
	"cellguard/internal/publish"
	"cellguard/proto/lancepb"
	"cellguard/table/data"
)

//go:embed testdata/indexed_table.mjs
var indexedTableJS string

//go:embed testdata/index_judge.mjs
var indexJudgeJS string

type judgedIndex struct {
	Name      string   `json:"name"`
	Type      string   `json:"type"`
	Columns   []string `json:"columns"`
	Indexed   int      `json:"indexed"`
	Unindexed int      `json:"unindexed"`
}

type judgedVersion struct {
	Indices []judgedIndex `json:"indices"`
	Scalar  []struct {
		IDs  []int64 `json:"ids"`
		Plan string  `json:"plan"`
	} `json:"scalar"`
	FTS    [][]int64 `json:"fts"`
	Vector []struct {
		IDs   []int64 `json:"ids"`
		Exact []int64 `json:"exact"`
	} `json:"vector"`
}

func ixVec(id int64) []float32 { return []float32{float32(id), float32(id) * 0.5, -float32(id), 1} }

func strCol(vals []string) arrow.Array {
	b := array.NewStringBuilder(memory.DefaultAllocator)
	defer b.Release()
	b.AppendValues(vals, nil)
	return b.NewArray()
}

// TestLanceDBUsesPublishedIndices: LanceDB builds four indices (btree on
// id and on x, FTS on text, IVF-PQ on vec) over 300 rows; cellguard adopts
// the table with them; a Go worker appends rows, deletes indexed rows and
// replaces the indexed column x of the indexed fragment. At every version
// LanceDB lists the indices, counts what they cover, answers scalar, FTS
// and vector queries through them, and answers right: a row cellguard
// added is found through the scan of unindexed fragments, a deleted row
// is never returned, and x's new values are found (its index stopped
// covering the fragment whose x was replaced) while the old ones are not.
// With each judge; the worker's data files take the table's file version
// (2.1 under LanceDB 0.31, 2.2 under 0.39).
func TestLanceDBUsesPublishedIndices(t *testing.T) {
	lancedbtest.Each(t, testPublishedIndices)
}

func testPublishedIndices(t *testing.T, lv lancedbtest.Version) {
	ctx := context.Background()
	root := t.TempDir()
	loc := filepath.Join(root, "t.lance")
	var rows []map[string]any
	for id := int64(0); id < 300; id++ {
		rows = append(rows, map[string]any{"id": id, "x": float64(id) + 0.5, "text": fmt.Sprintf("word%d row%d", id%5, id), "vec": ixVec(id)})
	}
	var created struct{ Version uint64 }
	lv.Run(t, lancedbtest.Prelude+indexedTableJS, map[string]any{"dir": root, "table": "t", "rows": rows}, &created)
	if created.Version != 5 {
		t.Fatalf("LanceDB made version %d, want 5", created.Version)
	}

	e := newEnv(t, committer.Config{})
	pm := e.runManager(t)
	v, err := publish.Adopt(ctx, e.pc, "t", loc)
	if err != nil {
		t.Fatal(err)
	}
	snap := e.latest(t, "t")
	if v != 5 || len(snap.Indices()) != 4 {
		t.Fatalf("adopted version %d with %d indices, want 5 with 4", v, len(snap.Indices()))
	}

	// What each version holds: rows cellguard appended (1000-1009), rows 1
	// and 2 deleted, x replaced in the indexed fragment.
	type state struct{ appended, deleted, replaced bool }
	states := map[uint64]state{5: {}}
	cur := state{}
	fields := []arrow.Field{idField, {Name: "x", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "text", Type: arrow.BinaryTypes.String, Nullable: true}, {Name: "vec", Type: vecField.Type, Nullable: true}}
	// Append rows 1000-1009.
	ids := span(1000, 10)
	xs := make([]float64, len(ids))
	texts := make([]string, len(ids))
	vecs := make([][]float32, len(ids))
	for i, id := range ids {
		xs[i], texts[i], vecs[i] = float64(id)+0.5, fmt.Sprintf("word%d row%d", id%5, id), ixVec(id)
	}
	df := writeLance(t, loc, record(fields, int64Col(ids), float64Col(xs), strCol(texts), vecCol(vecs, 4)), []int32{0, 1, 2, 3})
	v = e.commit(t, snap.NewTxn().Append(&lancepb.DataFragment{Files: []*lancepb.DataFile{df}, PhysicalRows: uint64(len(ids))}))
	cur.appended = true
	states[v] = cur

	// Delete rows 1 and 2 of the indexed fragment.
	store, err := data.Open(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	snap = e.latest(t, "t")
	frag0 := firstFragment(t, snap.Manifest())
	txn := snap.NewTxn()
	if err := txn.DeleteRows(ctx, store, frag0, 1, 2); err != nil {
		t.Fatal(err)
	}
	v = e.commit(t, txn)
	cur.deleted = true
	states[v] = cur

	// Replace x in the indexed fragment: x = 10·id + 0.25.
	newX := make([]float64, 300)
	for i := range newX {
		newX[i] = 10*float64(i) + 0.25
	}
	xf := writeLance(t, loc, record(fields[1:2], float64Col(newX)), []int32{1})
	snap = e.latest(t, "t")
	v = e.commit(t, snap.NewTxn().ReplaceColumns(frag0, xf))
	cur.replaced = true
	states[v] = cur
	waitPublished(t, pm, "t", v)

	var versions []uint64
	for v := range states {
		versions = append(versions, v)
	}
	slices.Sort(versions)
	var out struct {
		At map[string]judgedVersion `json:"at"`
	}
	lv.Run(t, lancedbtest.Prelude+indexJudgeJS, map[string]any{
		"dir": root, "table": "t", "versions": versions,
		"scalar": []map[string]any{{"where": "id = 5"}, {"where": "id = 1"}, {"where": "id = 1003"}, {"where": "x = 5.5"}, {"where": "x = 50.25"}},
		"fts":    []string{"row7", "row2", "row1003"},
		"vector": []map[string]any{{"q": ixVec(2), "k": 3}, {"q": ixVec(1004), "k": 1}},
	}, &out)

	for _, v := range versions {
		at, ok := out.At[strconv.FormatUint(v, 10)]
		if !ok {
			t.Fatalf("no answer for version %d", v)
		}
		var names []string
		for _, ix := range at.Indices {
			names = append(names, ix.Name)
		}
		if want := []string{"id_idx", "text_idx", "vec_idx", "x_idx"}; !slices.Equal(names, want) {
			t.Errorf("v%d: listIndices %v, want %v", v, names, want)
		}
		st := states[v]
		live, added := 300, 0
		if st.deleted {
			live = 298
		}
		if st.appended {
			added = 10
		}
		for _, ix := range at.Indices {
			wantIndexed, wantUnindexed := live, added
			if ix.Name == "x_idx" && st.replaced {
				wantIndexed, wantUnindexed = 0, live+added
			}
			if ix.Indexed != wantIndexed || ix.Unindexed != wantUnindexed {
				t.Errorf("v%d: indexStats(%s) = %d indexed, %d unindexed; want %d, %d", v, ix.Name, ix.Indexed, ix.Unindexed, wantIndexed, wantUnindexed)
			}
		}
		deleted := st.deleted
		want := [][]int64{{5}, {1}, nil, {5}, nil}
		if st.appended {
			want[2] = []int64{1003}
		}
		if deleted {
			want[1] = nil
		}
		if st.replaced {
			want[3], want[4] = nil, []int64{5}
		}
		for i, s := range at.Scalar {
			if !slices.Equal(s.IDs, want[i]) {
				t.Errorf("v%d: scalar query %d: ids %v, want %v", v, i, s.IDs, want[i])
			}
			if i == 0 && !strings.Contains(s.Plan, "ScalarIndexQuery") {
				t.Errorf("v%d: id = 5 does not use the index:\n%s", v, s.Plan)
			}
		}
		wantFTS := [][]int64{{7}, {2}, nil}
		if deleted {
			wantFTS[1] = nil
		}
		if st.appended {
			wantFTS[2] = []int64{1003}
		}
		for i, got := range at.FTS {
			if !slices.Equal(got, wantFTS[i]) {
				t.Errorf("v%d: FTS %d: ids %v, want %v", v, i, got, wantFTS[i])
			}
		}
		for i, q := range at.Vector {
			if !slices.Equal(q.IDs, q.Exact) {
				t.Errorf("v%d: vector query %d: ANN %v, exact %v", v, i, q.IDs, q.Exact)
			}
			if deleted && (slices.Contains(q.IDs, 1) || slices.Contains(q.IDs, 2)) {
				t.Errorf("v%d: vector query %d returned a deleted row: %v", v, i, q.IDs)
			}
		}
		if st.appended && (len(at.Vector[1].IDs) != 1 || at.Vector[1].IDs[0] != 1004) {
			t.Errorf("v%d: nearest to row 1004's vector: %v", v, at.Vector[1].IDs)
		}
	}
}
