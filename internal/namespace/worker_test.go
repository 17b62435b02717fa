package namespace_test

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"

	"cellguard/evaluator"
	"cellguard/internal/lancedbtest"
	"cellguard/internal/publish"
	"cellguard/lancefile"
	"cellguard/producer"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

//go:embed testdata/ops.mjs
var opsJS string

type opsOut struct {
	Results []struct {
		Version uint64   `json:"version"`
		Error   string   `json:"error"`
		Names   []string `json:"names"`
	} `json:"results"`
	Rows     any      `json:"rows"`
	Versions []uint64 `json:"versions"`
}

func runOps(t *testing.T, v lancedbtest.Version, e *env, ds string, headers map[string]string, ops ...map[string]any) opsOut {
	t.Helper()
	var out opsOut
	in := map[string]any{"uri": e.url, "table": ds, "ops": ops, "headers": headers, "timeoutMs": 20000}
	v.Run(t, lancedbtest.Prelude+opsJS, in, &out)
	return out
}

// TestLanceDBAndSDKWorker: a Go SDK worker derives y = 2·x from version 1
// of a table LanceDB created, with the precondition "x unchanged in
// fragment 0". LanceDB updates x first, through the namespace. The
// committer decides both in one order: the LanceDB write commits, the
// worker's stale column is rejected naming the changed field.
func TestLanceDBAndSDKWorker(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		e := newEnv(t, envOptions{})
		out := runOps(t, v, e, "w", nil, map[string]any{"op": "create", "rows": []map[string]any{{"id": 1, "x": 10}, {"id": 2, "x": 20}, {"id": 3, "x": 30}}})
		if out.Results[0].Version != 1 {
			t.Fatalf("create: %+v", out.Results)
		}
		snap, err := e.pc.Latest(t.Context(), "w")
		if err != nil {
			t.Fatal(err)
		}
		var xID int32 = -1
		maxID := int32(-1)
		for _, f := range snap.Manifest().Schema().Fields() {
			if f.GetName() == "x" {
				xID = f.GetId()
			}
			maxID = max(maxID, f.GetId())
		}
		if xID < 0 {
			t.Fatal("no field x")
		}
		// The worker computes y from the x it read at version 1 and writes it
		// as a real Lance file in the table's location.
		yID := maxID + 1
		yField := arrow.Field{Name: "y", Type: arrow.PrimitiveTypes.Float64, Nullable: true}
		fields, err := lancefile.Fields(arrow.NewSchema([]arrow.Field{yField}, nil), []int32{yID})
		if err != nil {
			t.Fatal(err)
		}
		file := writeLanceFile(t, filepath.Join(e.root, "w.lance"), yField, []float64{20, 40, 60}, yID)
		txn := snap.NewTxn().AddColumns(fields, map[uint64]*lancepb.DataFile{0: file}).
			CellsUnchanged([]int32{xID}, evaluator.WholeFragments(0))

		// Meanwhile LanceDB changes x of row 2.
		out = runOps(t, v, e, "w", nil, map[string]any{"op": "open"}, map[string]any{"op": "update", "where": "id = 2", "values": map[string]any{"x": "21"}})
		if out.Results[1].Error != "" || out.Results[1].Version != 2 {
			t.Fatalf("LanceDB update: %+v", out.Results)
		}
		ctx, cancel := contextWithTimeout(t)
		defer cancel()
		_, err = e.pc.Commit(ctx, txn)
		var rej *producer.RejectedError
		if !errors.As(err, &rej) || rej.Reason != cellguardpb.Reason_PRECONDITION_FAILED {
			t.Fatalf("worker commit: %v, want PRECONDITION_FAILED", err)
		}
		t.Logf("worker rejected: %v", err)
		e.checkLog(t, "w", 2)
		if got := js(t, out.Rows); got != js(t, []row{{"id": 1, "x": 10}, {"id": 2, "x": 21}, {"id": 3, "x": 30}}) {
			t.Errorf("rows after the LanceDB update: %s", got)
		}
	})
}

func writeLanceFile(t *testing.T, dir string, f arrow.Field, vals []float64, id int32) *lancepb.DataFile {
	t.Helper()
	b := array.NewFloat64Builder(memory.DefaultAllocator)
	b.AppendValues(vals, nil)
	return writeLanceArrays(t, dir, arrow.NewSchema([]arrow.Field{f}, nil), []arrow.Array{b.NewArray()}, []int32{id})
}

// writeLanceArrays writes the columns as a Lance file under dir/data, in
// the data storage version of the table's latest version there (2.1 for
// a table LanceDB 0.31 created, 2.2 for LanceDB 0.39), and returns its
// DataFile.
func writeLanceArrays(t *testing.T, dir string, schema *arrow.Schema, cols []arrow.Array, ids []int32) *lancepb.DataFile {
	t.Helper()
	rec := array.NewRecord(schema, cols, int64(cols[0].Len()))
	var buf bytes.Buffer
	w, err := lancefile.NewWriter(&buf, rec.Schema(), ids, lancefile.WriterOptions{Version: tableFileVersion(t, dir)})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	fi, err := w.Close()
	if err != nil {
		t.Fatal(err)
	}
	name := strings.ReplaceAll(uuid.NewString(), "-", "") + ".lance"
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data", name), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return fi.DataFile(name)
}

// tableFileVersion is the file version of data files for the latest
// version of the table at dir (data.FileVersion).
func tableFileVersion(t *testing.T, dir string) lancefile.Version {
	t.Helper()
	ctx := t.Context()
	loc, err := publish.OpenLocation(ctx, dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	v, err := publish.LatestVersion(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "_versions", table.ManifestFileName(v, true)))
	if err != nil {
		t.Fatal(err)
	}
	f, err := table.ReadManifestFile(b)
	if err != nil {
		t.Fatal(err)
	}
	m, err := table.FromProto(f.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	fv, err := data.FileVersion(m)
	if err != nil {
		t.Fatalf("write a data file for version %d of %s: %v", v, dir, err)
	}
	return fv
}

func contextWithTimeout(t *testing.T) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), 2*time.Minute)
}
