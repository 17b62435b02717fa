package namespace_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/google/uuid"
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
