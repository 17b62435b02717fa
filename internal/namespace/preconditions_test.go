package namespace_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"cellguard/evaluator"
	"cellguard/internal/lancedbtest"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// TestVersionCreateWithPreconditions: a Lance client that sends cell
// preconditions (Transaction field 5; LanceDB itself never does) gets
// them evaluated by the committer exactly as for SDK workers. The append
// read version 1 and protects x in fragment 0; LanceDB changed x at
// version 2, so the commit is rejected PRECONDITION_FAILED. A retry of the
// same transaction (a new staged file, as Lance retries) gets the same
// answer from the decision, and nothing is decided twice.
func TestVersionCreateWithPreconditions(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		e := newEnv(t, envOptions{})
		out := runOps(t, v, e, "p", nil,
			map[string]any{"op": "create", "rows": []map[string]any{{"id": 1, "x": 10}, {"id": 2, "x": 20}}},
			map[string]any{"op": "update", "where": "id = 2", "values": map[string]any{"x": "21"}})
		if out.Results[1].Version != 2 {
			t.Fatalf("LanceDB: %+v", out.Results)
		}
		ctx := t.Context()
		snap, err := e.pc.At(ctx, "p", 1)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]int32{}
		var afields []arrow.Field
		for _, f := range snap.Manifest().Schema().Fields() {
			ids[f.GetName()] = f.GetId()
			afields = append(afields, arrow.Field{Name: f.GetName(), Type: arrow.PrimitiveTypes.Float64, Nullable: true})
		}
		dir := filepath.Join(e.root, "p.lance")
		df := writeLanceRecord(t, dir, afields, [][]float64{{3}, {30}}, []int32{ids["id"], ids["x"]})
		txn, err := snap.NewTxn().Append(&lancepb.DataFragment{Files: []*lancepb.DataFile{df}, PhysicalRows: 1}).
			CellsUnchanged([]int32{ids["x"]}, evaluator.WholeFragments(0)).Proto()
		if err != nil {
			t.Fatal(err)
		}
		head, err := e.pc.Latest(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		rebased := proto.CloneOf(txn)
		rebased.ReadVersion = head.Version()
		want, err := table.Apply(ctx, head.Manifest(), rebased, nil)
		if err != nil {
			t.Fatal(err)
		}
		stage := func() string {
			b, err := table.WriteManifestFile(&table.ManifestFile{Manifest: want.Proto(), Transaction: txn})
			if err != nil {
				t.Fatal(err)
			}
			name := table.ManifestFileName(3, true) + "-" + uuid.NewString()
			if err := os.WriteFile(filepath.Join(dir, "_versions", name), b, 0o644); err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf(`{"id":["p"],"version":3,"manifest_path":%q,"manifest_size":%d,"naming_scheme":"V2"}`,
				strings.TrimPrefix(filepath.Join(dir, "_versions", name), "/"), len(b))
		}
		status, body := call(t, "POST", e.url+"/v1/table/p/version/create", stage(), nil)
		t.Logf("%d %v", status, body)
		if status != 400 || body["code"].(float64) != 13 || !strings.Contains(body["error"].(string), "PRECONDITION_FAILED") {
			t.Fatalf("version/create: %d %v, want 400 code 13 PRECONDITION_FAILED", status, body)
		}
		decided := e.decisions(t, "p")
		status2, body2 := call(t, "POST", e.url+"/v1/table/p/version/create", stage(), nil)
		if status2 != status || body2["error"] != body["error"] {
			t.Errorf("retry: %d %v, want the first answer", status2, body2)
		}
		if n := e.decisions(t, "p"); n != decided {
			t.Errorf("retry made %d decisions, want none", n-decided)
		}
		e.checkLog(t, "p", 2)
	})
}

func writeLanceRecord(t *testing.T, dir string, fields []arrow.Field, cols [][]float64, ids []int32) *lancepb.DataFile {
	t.Helper()
	var arrs []arrow.Array
	for _, c := range cols {
		b := array.NewFloat64Builder(memory.DefaultAllocator)
		b.AppendValues(c, nil)
		arrs = append(arrs, b.NewArray())
	}
	return writeLanceArrays(t, dir, arrow.NewSchema(fields, nil), arrs, ids)
}

// TestLanceDBOverPreconditionedVersion: a version committed by an SDK
// worker whose transaction carries cell preconditions (field 5, inline in
// the published manifest) is read, appended to and verified by LanceDB.
// The worker's commit lands while LanceDB's add of the same version is on
// its way (the namespace's before-stage hook), so LanceDB gets 409 and
// reads that version back (Lance 12 decodes its transaction and compares
// it with its own: a foreign one), rebases and commits the next version;
// every row is there once. The table is created in storage version 2.1,
// which the Go side writes with either judge.
func TestLanceDBOverPreconditionedVersion(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		e := newEnv(t, envOptions{})
		out := runOps(t, v, e, "f", nil, map[string]any{"op": "create", "storage": "2.1", "rows": []map[string]any{{"id": 1, "x": 10}, {"id": 2, "x": 20}}})
		if out.Results[0].Version != 1 {
			t.Fatalf("create: %+v", out.Results)
		}
		ctx, cancel := contextWithTimeout(t)
		defer cancel()
		snap, err := e.pc.At(ctx, "f", 1)
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]int32{}
		var afields []arrow.Field
		for _, f := range snap.Manifest().Schema().Fields() {
			ids[f.GetName()] = f.GetId()
			afields = append(afields, arrow.Field{Name: f.GetName(), Type: arrow.PrimitiveTypes.Float64, Nullable: true})
		}
		dir := filepath.Join(e.root, "f.lance")
		waitManifest(ctx, t, dir, 1)
		df := writeLanceRecord(t, dir, afields, [][]float64{{3}, {30}}, []int32{ids["id"], ids["x"]})
		txn := snap.NewTxn().Append(&lancepb.DataFragment{Files: []*lancepb.DataFile{df}, PhysicalRows: 1}).
			CellsUnchanged([]int32{ids["x"]}, evaluator.WholeFragments(0))
		var once sync.Once
		var committed uint64
		var commitErr error
		e.ns.SetBeforeStage(func(context.Context, string) {
			once.Do(func() { committed, commitErr = e.pc.Commit(ctx, txn) })
		})
		out = runOps(t, v, e, "f", nil, map[string]any{"op": "open"}, map[string]any{"op": "add", "rows": []map[string]any{{"id": 4, "x": 40}}})
		if commitErr != nil || committed != 2 {
			t.Fatalf("worker commit: version %d, %v; want 2", committed, commitErr)
		}
		mf, err := table.ReadManifestFile(waitManifest(ctx, t, dir, 2))
		if err != nil {
			t.Fatal(err)
		}
		if len(mf.Transaction.GetPreconditions()) == 0 {
			t.Error("published version 2 has no preconditions in its inline transaction")
		}
		conflicts := testutil.ToFloat64(e.ns.Requests("version_create", 409))
		t.Logf("LanceDB: %+v; 409 answers %v", out.Results, conflicts)
		if len(out.Results) != 2 || out.Results[1].Error != "" || out.Results[1].Version != 3 {
			t.Fatalf("LanceDB add over the worker's version: %+v, want version 3", out.Results)
		}
		if conflicts < 1 {
			t.Error("LanceDB's add got no 409: it did not propose the worker's version")
		}
		if got, want := js(t, out.Rows), js(t, []row{{"id": 1, "x": 10}, {"id": 2, "x": 20}, {"id": 3, "x": 30}, {"id": 4, "x": 40}}); got != want {
			t.Errorf("rows %s, want %s", got, want)
		}
		e.checkLog(t, "f", 3)
	})
}

// waitManifest waits for version v's manifest to be published in dir and
// returns its bytes.
func waitManifest(ctx context.Context, t *testing.T, dir string, v uint64) []byte {
	t.Helper()
	for {
		b, err := os.ReadFile(filepath.Join(dir, "_versions", table.ManifestFileName(v, true)))
		if err == nil {
			return b
		}
		if ctx.Err() != nil {
			t.Fatalf("version %d not published: %v", v, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
