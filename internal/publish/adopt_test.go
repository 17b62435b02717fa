package publish_test

import (
	"context"
	_ "embed"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"cellguard/committer"
	"cellguard/internal/lancedbtest"
	"cellguard/internal/publish"
	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

//go:embed testdata/create_table.mjs
var createTableJS string

// lanceRows creates the rows the Node script writes, and records them in m.
func lanceRows(m *model, ids []int64) []map[string]any {
	var out []map[string]any
	for _, id := range ids {
		r := &row{x: float64(id) + 0.5, vec: []float32{float32(id), 1, 2, 3}}
		m.rows[id] = r
		out = append(out, map[string]any{"id": id, "x": r.x, "vec": r.vec})
	}
	return out
}

// TestAdoptLanceDBTable: LanceDB creates and writes a table, cellguard
// adopts it, a Go worker commits new versions through cellguard (an
// append written with lancefile, a delete), and LanceDB reads every
// version, its own and ours.
func TestAdoptLanceDBTable(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, judge lancedbtest.Version) {
		ctx := context.Background()
		root := t.TempDir()
		loc := filepath.Join(root, "t.lance")
		m := &model{rows: map[int64]*row{}}
		want := map[uint64][]map[string]any{}
		first := lanceRows(m, span(0, 6))
		want[1] = m.want(t)
		second := lanceRows(m, span(6, 4))
		want[2] = m.want(t)
		var created struct{ Version uint64 }
		judge.Run(t, lancedbtest.Prelude+createTableJS, map[string]any{"dir": root, "table": "t", "first": first, "second": second}, &created)
		if created.Version != 2 {
			t.Fatalf("LanceDB made version %d, want 2", created.Version)
		}

		e := newEnv(t, committer.Config{})
		pm := e.runManager(t)
		v, err := publish.Adopt(ctx, e.pc, "t", loc)
		if err != nil {
			t.Fatal(err)
		}
		if v != 2 {
			t.Fatalf("adopted version %d, want 2", v)
		}
		r, err := committer.NewReader(ctx, e.pc.Conn(), "")
		if err != nil {
			t.Fatal(err)
		}
		if ds, err := r.Datasets(ctx); err != nil || len(ds) != 1 || ds[0].Head != 2 {
			t.Errorf("Datasets after adoption = %+v, %v; want t at head 2", ds, err)
		}
		snap := e.latest(t, "t")
		if snap.Version() != 2 || snap.Manifest().NumFragments() != 2 {
			t.Fatalf("adopted head: version %d with %d fragments", snap.Version(), snap.Manifest().NumFragments())
		}

		// v3: a Go worker appends a fragment written with lancefile.
		ids := span(100, 3)
		xs := make([]float64, len(ids))
		vecs := make([][]float32, len(ids))
		for i, id := range ids {
			xs[i] = float64(id) * 2
			vecs[i] = []float32{float32(id), 9, 9, 9}
			m.rows[id] = &row{x: xs[i], vec: vecs[i]}
		}
		nullableVec := arrow.Field{Name: "vec", Type: vecField.Type, Nullable: true}
		nullableX := arrow.Field{Name: "x", Type: xField.Type, Nullable: true}
		df := writeLance(t, loc, record([]arrow.Field{idField, nullableX, nullableVec}, int64Col(ids), float64Col(xs), vecCol(vecs, 4)), []int32{0, 1, 2})
		v = e.commit(t, snap.NewTxn().Append(&lancepb.DataFragment{Files: []*lancepb.DataFile{df}, PhysicalRows: uint64(len(ids))}))
		if v != 3 {
			t.Fatalf("first commit after adoption made version %d, want 3", v)
		}
		want[3] = m.want(t)

		// A restarted committer loads the adopted dataset from the log.
		e.restartCommitter(t, committer.Config{})

		// v4: delete rows 1 and 2 of LanceDB's first fragment.
		store, err := data.Open(ctx, loc)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		snap = e.latest(t, "t")
		first0 := firstFragment(t, snap.Manifest())
		txn := snap.NewTxn()
		if err := txn.DeleteRows(ctx, store, first0, 1, 2); err != nil {
			t.Fatal(err)
		}
		v = e.commit(t, txn)
		delete(m.rows, 1)
		delete(m.rows, 2)
		want[v] = m.want(t)
		waitPublished(t, pm, "t", v)

		var out struct {
			Versions []uint64 `json:"versions"`
			At       map[string]struct {
				Count int              `json:"count"`
				Rows  []map[string]any `json:"rows"`
			} `json:"at"`
		}
		judge.Run(t, lancedbtest.Prelude+readVersionsJS, map[string]any{"dir": root, "table": "t", "maxRows": 1000}, &out)
		if !slices.Equal(out.Versions, []uint64{1, 2, 3, 4}) {
			t.Fatalf("LanceDB listVersions = %v, want [1 2 3 4]", out.Versions)
		}
		for v := uint64(1); v <= 4; v++ {
			got := out.At[strconv.FormatUint(v, 10)]
			if got.Count != len(want[v]) || !reflect.DeepEqual(got.Rows, want[v]) {
				t.Errorf("version %d: LanceDB read %d rows\n%v\nwant %d\n%v", v, got.Count, got.Rows, len(want[v]), want[v])
			}
		}
	})
}

func firstFragment(t *testing.T, m *table.Manifest) uint64 {
	t.Helper()
	for f := range m.Fragments() {
		return f.ID()
	}
	t.Fatal("no fragment")
	return 0
}

// TestAdoptRefusals: what cellguard cannot carry is refused with a typed
// error, and nothing is staged.
func TestAdoptRefusals(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, judge lancedbtest.Version) {
		ctx := context.Background()
		e := newEnv(t, committer.Config{})

		// Not a Lance table: an empty directory, and a directory of other files.
		empty := t.TempDir()
		if _, err := publish.Adopt(ctx, e.pc, "a", empty); !errors.Is(err, publish.ErrNotLance) {
			t.Errorf("empty directory: %v, want ErrNotLance", err)
		}
		if err := os.WriteFile(filepath.Join(empty, "README"), []byte("hi"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := publish.Adopt(ctx, e.pc, "a", empty); !errors.Is(err, publish.ErrNotLance) {
			t.Errorf("directory without _versions: %v, want ErrNotLance", err)
		}
		// A location that does not exist.
		if _, err := publish.Adopt(ctx, e.pc, "a", filepath.Join(empty, "missing")); !errors.Is(err, publish.ErrLocation) {
			t.Errorf("missing location: %v, want ErrLocation", err)
		}
		// An undecodable manifest.
		bad := t.TempDir()
		if err := os.MkdirAll(filepath.Join(bad, "_versions"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bad, "_versions", table.ManifestFileName(3, true)), []byte("garbage bytes, no LANC footer"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := publish.Adopt(ctx, e.pc, "a", bad); !errors.Is(err, table.ErrMalformed) {
			t.Errorf("undecodable manifest: %v, want table.ErrMalformed", err)
		}

		// A LanceDB table with an index.
		root := t.TempDir()
		m := &model{rows: map[int64]*row{}}
		var created struct{ Version uint64 }
		judge.Run(t, lancedbtest.Prelude+createTableJS, map[string]any{
			"dir": root, "table": "t", "first": lanceRows(m, span(0, 3)), "second": lanceRows(m, span(3, 3)), "index": true,
		}, &created)
		// Its index is carried (TestLanceDBUsesPublishedIndices); one without a
		// fragment bitmap, which only reopening the index could tell, is not.
		tdir := filepath.Join(root, "t.lance")
		mpath := filepath.Join(tdir, "_versions", table.ManifestFileName(created.Version, true))
		raw, err := os.ReadFile(mpath)
		if err != nil {
			t.Fatal(err)
		}
		f, err := table.ReadManifestFile(raw)
		if err != nil || len(f.Indexes.GetIndices()) != 1 {
			t.Fatalf("LanceDB's indexed version: %v, %v", f, err)
		}
		f.Indexes.Indices[0].FragmentBitmap = nil
		if raw, err = table.WriteManifestFile(f); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(mpath, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err = publish.Adopt(ctx, e.pc, "a", tdir)
		t.Logf("index refusal: %v", err)
		if !errors.Is(err, publish.ErrCannotAdopt) || !strings.Contains(err.Error(), `"id_idx"`) {
			t.Errorf("table with an index without fragment bitmap: %v, want ErrCannotAdopt naming id_idx", err)
		}

		// Nothing was staged or committed for "a".
		if _, err := e.log.Config(ctx, "a"); err == nil {
			t.Error("a refused adoption left a dataset behind")
		}
	})
}

// TestAdoptedDeletionsMergeThroughLocation: LanceDB deletes a row (an
// .arrow deletion file), cellguard adopts the table, and two cellguard
// deletes read at the same version land on the same fragment: the second
// is rebased, which makes the committer read the deletion files (Lance's
// .arrow and our .bin) through the dataset's location and write the
// merged one there. LanceDB reads the result.
func TestAdoptedDeletionsMergeThroughLocation(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, judge lancedbtest.Version) {
		ctx := context.Background()
		root := t.TempDir()
		loc := filepath.Join(root, "t.lance")
		m := &model{rows: map[int64]*row{}}
		var created struct{ Version uint64 }
		judge.Run(t, lancedbtest.Prelude+createTableJS, map[string]any{
			"dir": root, "table": "t", "first": lanceRows(m, span(0, 6)), "second": lanceRows(m, span(6, 4)), "deleteWhere": "id = 1",
		}, &created)
		delete(m.rows, 1)
		if created.Version != 3 {
			t.Fatalf("LanceDB made version %d, want 3", created.Version)
		}
		if arrows, _ := filepath.Glob(filepath.Join(loc, "_deletions", "*.arrow")); len(arrows) != 1 {
			t.Fatalf("LanceDB wrote deletion files %v, want one .arrow", arrows)
		}

		e := newEnv(t, committer.Config{})
		pm := e.runManager(t)
		if _, err := publish.Adopt(ctx, e.pc, "t", loc); err != nil {
			t.Fatal(err)
		}
		store, err := data.Open(ctx, loc)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		snap := e.latest(t, "t")
		frag0 := firstFragment(t, snap.Manifest())
		a, b := snap.NewTxn(), snap.NewTxn()
		if err := a.DeleteRows(ctx, store, frag0, 3); err != nil {
			t.Fatal(err)
		}
		if err := b.DeleteRows(ctx, store, frag0, 4); err != nil {
			t.Fatal(err)
		}
		e.commit(t, a)
		v := e.commit(t, b) // read at 3, lands on 4: deletion vectors merged
		delete(m.rows, 3)
		delete(m.rows, 4)
		head := e.latest(t, "t").Manifest()
		f, _ := head.Fragment(frag0)
		if n := f.DeletionFile().GetNumDeletedRows(); n != 3 {
			t.Fatalf("merged deletion file holds %d rows, want 3", n)
		}
		waitPublished(t, pm, "t", v)

		var out struct {
			Versions []uint64 `json:"versions"`
			At       map[string]struct {
				Count int              `json:"count"`
				Rows  []map[string]any `json:"rows"`
			} `json:"at"`
		}
		judge.Run(t, lancedbtest.Prelude+readVersionsJS, map[string]any{"dir": root, "table": "t", "maxRows": 1000}, &out)
		got := out.At[strconv.FormatUint(v, 10)]
		if want := m.want(t); got.Count != len(want) || !reflect.DeepEqual(got.Rows, want) {
			t.Errorf("version %d: LanceDB read %d rows\n%v\nwant %d\n%v", v, got.Count, got.Rows, len(want), want)
		}
	})
}
