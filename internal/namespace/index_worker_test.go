package namespace_test

import (
	_ "embed"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"cellguard/internal/lancedbtest"
	"cellguard/proto/lancepb"
	"cellguard/table/data"
)

//go:embed testdata/index_cleanup.mjs
var indexCleanupJS string

type cleanupOut struct {
	Before, After uint64
	Versions      []uint64
	Indices       []string
	Stats         map[string][2]int
	IDs           []int
	Plan          bool
	Ann           []int
	Count         int
}

// TestLanceDBIndexCleanupAndWorker: LanceDB indexes a table through the
// namespace and runs optimize() with a cleanup of every older version
// (their manifests and the data and index files only they used are
// deleted from storage). A Go worker's snapshot of a cleaned version
// still has its manifest (the decision log keeps every version), but a
// read of its data ends in data.ErrNotFound: never a value. The worker
// then appends to the head through cellguard, and LanceDB still uses both
// indices at the new version, finding the worker's row through the scan
// of the unindexed fragment.
func TestLanceDBIndexCleanupAndWorker(t *testing.T) {
	lancedbtest.Each(t, testIndexCleanupAndWorker)
}

func testIndexCleanupAndWorker(t *testing.T, judge lancedbtest.Version) {
	e := newEnv(t, envOptions{})
	var built cleanupOut
	judge.Run(t, lancedbtest.Prelude+indexCleanupJS, map[string]any{"uri": e.url, "table": "c", "phase": "build"}, &built)
	t.Logf("%+v", built)
	if built.After <= built.Before || slices.Contains(built.Versions, 1) {
		t.Fatalf("optimize with cleanup: versions %d → %d, listed %v", built.Before, built.After, built.Versions)
	}
	if !slices.Equal(built.Indices, []string{"id_idx", "vec_idx"}) || !built.Plan || !slices.Equal(built.IDs, []int{205}) {
		t.Fatalf("after cleanup: %+v", built)
	}
	ctx, cancel := contextWithTimeout(t)
	defer cancel()

	// A read of a cleaned version: its manifest, and a typed error for its data.
	old, err := e.pc.At(ctx, "c", 1)
	if err != nil {
		t.Fatalf("At(1): %v", err)
	}
	store, err := data.Open(ctx, filepath.Join(e.root, "c.lance"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.ReadFragment(ctx, old.Manifest(), 0, []int32{0}); !errors.Is(err, data.ErrNotFound) {
		t.Errorf("reading version 1's fragment after cleanup: %v, want data.ErrNotFound", err)
	}

	// The worker appends row 1002 to the head.
	snap, err := e.pc.Latest(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Indices()) < 2 {
		t.Fatalf("head %d has indices %v", snap.Version(), snap.Indices())
	}
	ib := array.NewInt64Builder(memory.DefaultAllocator)
	ib.AppendValues([]int64{1002}, nil)
	xb := array.NewFloat64Builder(memory.DefaultAllocator)
	xb.AppendValues([]float64{1002.5}, nil)
	vb := array.NewFixedSizeListBuilder(memory.DefaultAllocator, 4, arrow.PrimitiveTypes.Float32)
	vb.Append(true)
	vb.ValueBuilder().(*array.Float32Builder).AppendValues([]float32{1002, 501, -1002, 1}, nil)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "x", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
		{Name: "vec", Type: arrow.FixedSizeListOf(4, arrow.PrimitiveTypes.Float32), Nullable: true},
	}, nil)
	df := writeLanceArrays(t, filepath.Join(e.root, "c.lance"), schema, []arrow.Array{ib.NewArray(), xb.NewArray(), vb.NewArray()}, []int32{0, 1, 2})
	v, err := e.pc.Commit(ctx, snap.NewTxn().Append(&lancepb.DataFragment{Files: []*lancepb.DataFile{df}, PhysicalRows: 1}))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "publish", func() bool {
		p, ok := e.pub.Publisher("c")
		return ok && p != nil && p.Published() >= v
	})
	var look cleanupOut
	judge.Run(t, lancedbtest.Prelude+indexCleanupJS, map[string]any{"uri": e.url, "table": "c", "phase": "look"}, &look)
	t.Logf("%+v", look)
	if !slices.Equal(look.Indices, built.Indices) || !look.Plan || !slices.Equal(look.IDs, []int{205, 1002}) || !slices.Equal(look.Ann, []int{1002}) || look.Count != built.Count+1 {
		t.Errorf("after the worker's append: %+v", look)
	}
	for n, st := range look.Stats {
		if b := built.Stats[n]; st[0] != b[0] || st[1] != b[1]+1 {
			t.Errorf("indexStats(%s) %v after the append, %v before", n, st, b)
		}
	}
}
