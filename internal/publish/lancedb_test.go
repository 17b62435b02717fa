package publish_test

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"

	"cellguard/committer"
	"cellguard/internal/lancedbtest"
	"cellguard/internal/publish"
	"cellguard/lancefile"
	"cellguard/producer"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/rejection"
	"cellguard/table"
	"cellguard/table/data"
)

//go:embed testdata/read_versions.mjs
var readVersionsJS string

// model is the Go side's expectation of a table: every row by id.
type model struct {
	rows map[int64]*row
	hasY bool
}

type row struct {
	x   float64
	y   int64
	vec []float32
}

// want renders the live rows the way read_versions.mjs normalizes
// LanceDB's, through JSON so both sides have the same Go types.
func (m *model) want(t *testing.T) []map[string]any {
	t.Helper()
	ids := make([]int64, 0, len(m.rows))
	for id := range m.rows {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var out []map[string]any
	for _, id := range ids {
		r := m.rows[id]
		o := map[string]any{"id": strconv.FormatInt(id, 10), "x": r.x, "vec": r.vec}
		if m.hasY {
			o["y"] = strconv.FormatInt(r.y, 10)
		}
		out = append(out, o)
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	var back []map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	return back
}

func (m *model) clone() *model {
	c := &model{rows: map[int64]*row{}, hasY: m.hasY}
	for id, r := range m.rows {
		rc := *r
		c.rows[id] = &rc
	}
	return c
}

var (
	idField  = arrow.Field{Name: "id", Type: arrow.PrimitiveTypes.Int64}
	xField   = arrow.Field{Name: "x", Type: arrow.PrimitiveTypes.Float64}
	vecField = arrow.Field{Name: "vec", Type: arrow.FixedSizeListOf(4, arrow.PrimitiveTypes.Float32)}
	yField   = arrow.Field{Name: "y", Type: arrow.PrimitiveTypes.Int64}
)

// base writes a fragment of rows ids with x = 1.5·id and vec = id..id+3.
func base(t *testing.T, loc string, m *model, ids []int64) *lancepb.DataFragment {
	t.Helper()
	xs := make([]float64, len(ids))
	vecs := make([][]float32, len(ids))
	for i, id := range ids {
		xs[i] = 1.5 * float64(id)
		vecs[i] = []float32{float32(id), float32(id + 1), float32(id + 2), float32(id + 3)}
		m.rows[id] = &row{x: xs[i], vec: vecs[i]}
	}
	rec := record([]arrow.Field{idField, xField, vecField}, int64Col(ids), float64Col(xs), vecCol(vecs, 4))
	df := writeLance(t, loc, rec, []int32{0, 1, 2})
	return &lancepb.DataFragment{Files: []*lancepb.DataFile{df}, PhysicalRows: uint64(len(ids))}
}

func span(from, n int64) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = from + int64(i)
	}
	return out
}

// TestLanceDBReadsPublishedVersions is the acceptance test: a
// table built through cellguard (a real committer and publisher, data
// files written by lancefile) — create, append, delete, a column added
// by a Merge, a column replacement (DataReplacement), a column rewrite
// (Update REWRITE_COLUMNS), a vector column — is read by real LanceDB
// 0.31 at every version, and a DataOverlay is refused without LanceDB
// ever reading a stale value.
func TestLanceDBReadsPublishedVersions(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, judge lancedbtest.Version) {
		ctx := context.Background()
		root := t.TempDir()
		loc := filepath.Join(root, "t.lance")
		e := newEnv(t, committer.Config{})
		pm := e.runManager(t)
		store, err := data.Open(ctx, loc)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()

		m := &model{rows: map[int64]*row{}}
		want := map[uint64][]map[string]any{}
		fields, err := lancefile.Fields(arrow.NewSchema([]arrow.Field{idField, xField, vecField}, nil), []int32{0, 1, 2})
		if err != nil {
			t.Fatal(err)
		}

		// v1: create with fragment 0 (ids 0..9).
		v := e.commit(t, withConfig(t, producer.Create("t", fields, base(t, loc, m, span(0, 10))),
			&cellguardpb.DatasetConfig{Location: loc}))
		want[v] = m.want(t)

		// v2: append fragment 1 (ids 10..14).
		snap := e.latest(t, "t")
		v = e.commit(t, snap.NewTxn().Append(base(t, loc, m, span(10, 5))))
		want[v] = m.want(t)

		// v3: delete offsets 2 and 3 of fragment 0.
		snap = e.latest(t, "t")
		txn := snap.NewTxn()
		if err := txn.DeleteRows(ctx, store, 0, 2, 3); err != nil {
			t.Fatal(err)
		}
		v = e.commit(t, txn)
		delete(m.rows, 2)
		delete(m.rows, 3)
		want[v] = m.want(t)

		// v4: Merge adds y = 3·id + 7 as a file of its own in each fragment.
		snap = e.latest(t, "t")
		yFields, err := lancefile.Fields(arrow.NewSchema([]arrow.Field{yField}, nil), []int32{3})
		if err != nil {
			t.Fatal(err)
		}
		yFile := func(ids []int64, f func(int64) int64) *lancepb.DataFile {
			ys := make([]int64, len(ids))
			for i, id := range ids {
				ys[i] = f(id)
				if r, ok := m.rows[id]; ok {
					r.y = ys[i]
				}
			}
			return writeLance(t, loc, record([]arrow.Field{yField}, int64Col(ys)), []int32{3})
		}
		lin := func(id int64) int64 { return 3*id + 7 }

		v = e.commit(t, snap.NewTxn().AddColumns(yFields, map[uint64]*lancepb.DataFile{
			0: yFile(span(0, 10), lin), 1: yFile(span(10, 5), lin),
		}))
		m.hasY = true
		want[v] = m.want(t)

		// v5: DataReplacement of y in fragment 1: y = 1000 + id.
		snap = e.latest(t, "t")
		v = e.commit(t, snap.NewTxn().ReplaceColumns(1, yFile(span(10, 5), func(id int64) int64 { return 1000 + id })))
		want[v] = m.want(t)

		// v6: Update REWRITE_COLUMNS of x in fragment 0: x = -id - 0.25.
		snap = e.latest(t, "t")
		xs := make([]float64, 10)
		for i := range xs {
			xs[i] = -float64(i) - 0.25
			if r, ok := m.rows[int64(i)]; ok {
				r.x = xs[i]
			}
		}
		xFile := writeLance(t, loc, record([]arrow.Field{xField}, float64Col(xs)), []int32{1})
		v = e.commit(t, snap.NewTxn().RewriteColumns(0, xFile))
		want[v] = m.want(t)

		// A DataOverlay on this lance8 dataset is refused for good.
		snap = e.latest(t, "t")
		cover, err := roaring.BitmapOf(0).ToBytes()
		if err != nil {
			t.Fatal(err)
		}
		overlay := &lancepb.DataOverlayFile{
			DataFile: &lancepb.DataFile{Path: "never-written.lance", Fields: []int32{1}, ColumnIndices: []int32{0}, FileMajorVersion: 2, FileMinorVersion: 1},
			Coverage: &lancepb.DataOverlayFile_SharedOffsetBitmap{SharedOffsetBitmap: cover},
		}
		_, err = e.pc.Commit(ctx, snap.NewTxn().Overlay(0, overlay))
		var rej *producer.RejectedError
		if !errors.As(err, &rej) || rej.Reason != cellguardpb.Reason_UNSUPPORTED_BY_READERS {
			t.Fatalf("overlay on a lance8 dataset: err %v, want rejection UNSUPPORTED_BY_READERS", err)
		}
		if rejection.Retryable(rej.Reason) {
			t.Errorf("%s is retryable", rej.Reason)
		}

		head := v
		waitPublished(t, pm, "t", head)

		var out struct {
			Versions []uint64 `json:"versions"`
			Latest   uint64   `json:"latest"`
			Appended struct {
				Version uint64 `json:"version"`
				Count   int    `json:"count"`
			} `json:"appended"`
			At map[string]struct {
				Count int              `json:"count"`
				Rows  []map[string]any `json:"rows"`
			} `json:"at"`
		}
		judge.Run(t, lancedbtest.Prelude+readVersionsJS, map[string]any{"dir": root, "table": "t", "maxRows": 1000,
			"append": map[string]any{"id": 500, "x": 1.0, "vec": []float32{1, 2, 3, 4}, "y": 5}}, &out)

		var ours []uint64
		for v := uint64(1); v <= head; v++ {
			ours = append(ours, v)
		}
		if !slices.Equal(out.Versions, ours) {
			t.Fatalf("LanceDB listVersions = %v, want %v", out.Versions, ours)
		}
		if out.Latest != head {
			t.Errorf("LanceDB latest version %d, want %d", out.Latest, head)
		}
		if out.Appended.Version != head+1 || out.Appended.Count != len(want[head])+1 {
			t.Errorf("LanceDB append after our versions: version %d with %d rows, want %d with %d",
				out.Appended.Version, out.Appended.Count, head+1, len(want[head])+1)
		}
		for _, v := range ours {
			got := out.At[strconv.FormatUint(v, 10)]
			if got.Count != len(want[v]) {
				t.Errorf("version %d: LanceDB countRows %d, want %d", v, got.Count, len(want[v]))
			}
			if !reflect.DeepEqual(got.Rows, want[v]) {
				t.Errorf("version %d: LanceDB rows\n%v\nwant\n%v", v, got.Rows, want[v])
			}
		}
	})
}

//go:embed testdata/stale_append.mjs
var staleAppendJS string

// TestLanceDBStaleWriterRebasesOverPublished: a LanceDB writer that read
// the table before cellguard published a version appends afterwards; it
// finds our version's transaction, rebases over it and commits the next
// version, with both appends visible. Writing straight to storage is out
// of contract: our publisher then stops at that foreign version instead of
// overwriting it.
func TestLanceDBStaleWriterRebasesOverPublished(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, judge lancedbtest.Version) {
		root := t.TempDir()
		loc := filepath.Join(root, "t.lance")
		e := newEnv(t, committer.Config{})
		pm := e.runManager(t)
		schema := []arrow.Field{idField, {Name: "x", Type: arrow.PrimitiveTypes.Float64, Nullable: true}}
		fields, err := lancefile.Fields(arrow.NewSchema(schema, nil), []int32{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		frag := func(ids []int64) *lancepb.DataFragment {
			xs := make([]float64, len(ids))
			df := writeLance(t, loc, record(schema, int64Col(ids), float64Col(xs)), []int32{0, 1})
			return &lancepb.DataFragment{Files: []*lancepb.DataFile{df}, PhysicalRows: uint64(len(ids))}
		}
		e.commit(t, withConfig(t, producer.Create("t", fields, frag(span(0, 3))), &cellguardpb.DatasetConfig{Location: loc}))
		waitPublished(t, pm, "t", 1)

		ready, goFile := filepath.Join(root, "ready"), filepath.Join(root, "go")
		done := make(chan error, 1)
		go func() { // cellguard publishes version 2 while LanceDB holds version 1
			deadline := time.Now().Add(2 * time.Minute)
			for {
				if _, err := os.Stat(ready); err == nil {
					break
				}
				if time.Now().After(deadline) {
					done <- errors.New("LanceDB never got ready")
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			snap, err := e.pc.Latest(ctx, "t")
			if err == nil {
				_, err = e.pc.Commit(ctx, snap.NewTxn().Append(frag(span(10, 2))))
			}
			for err == nil {
				if p, ok := pm.Publisher("t"); ok && p != nil && p.Published() >= 2 {
					break
				}
				if ctx.Err() != nil {
					err = errors.New("version 2 not published")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err == nil {
				err = os.WriteFile(goFile, []byte("go"), 0o644)
			}
			done <- err
		}()
		var out struct {
			Before, After uint64
			IDs           []int64 `json:"ids"`
			Versions      []uint64
		}
		judge.Run(t, lancedbtest.Prelude+staleAppendJS, map[string]any{
			"dir": root, "table": "t", "ready": ready, "go": goFile, "rows": []map[string]any{{"id": 100, "x": 1.0}},
		}, &out)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if out.Before != 1 || out.After != 3 || !slices.Equal(out.Versions, []uint64{1, 2, 3}) {
			t.Errorf("stale LanceDB writer: before %d after %d versions %v; want 1, 3, [1 2 3]", out.Before, out.After, out.Versions)
		}
		if want := []int64{0, 1, 2, 10, 11, 100}; !slices.Equal(out.IDs, want) {
			t.Errorf("rows after the rebase: %v, want %v", out.IDs, want)
		}

		// Our next version would be 3, which LanceDB took: publishing stops
		// and LanceDB's version 3 stays.
		lance3, err := os.ReadFile(filepath.Join(loc, "_versions", table.ManifestFileName(3, true)))
		if err != nil {
			t.Fatal(err)
		}
		e.commit(t, e.latest(t, "t").NewTxn().Append(frag(span(20, 1))))
		p, _ := pm.Publisher("t")
		waitFor(t, "publishing to stop", func() bool { return p.Stopped() != nil })
		if err := p.Stopped(); !errors.Is(err, publish.ErrForeignVersion) {
			t.Errorf("stopped with %v, want ErrForeignVersion", err)
		}
		if now, err := os.ReadFile(filepath.Join(loc, "_versions", table.ManifestFileName(3, true))); err != nil || string(now) != string(lance3) {
			t.Errorf("LanceDB's version 3 was changed (%v)", err)
		}
		l, err := publish.OpenLocation(context.Background(), loc, false)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if st, err := publish.ReadStatus(context.Background(), e.log, "t", l); err != nil || !st.Foreign || st.Latest != 3 {
			t.Errorf("ReadStatus = %+v, %v; want version 3, foreign", st, err)
		}
	})
}
