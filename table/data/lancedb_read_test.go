package data_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"cellguard/internal/lancedbtest"
	"cellguard/table"
	"cellguard/table/data"
)

// writeLanceDBJS has LanceDB create a table in the given storage version
// with its default encodings, delete some rows, and print the rows it
// then reads (normalized as in readRowsJS). Its columns take the
// encodings 2.2 changes as well: constants, all-null pages, dictionaries
// of numbers and of strings.
const writeLanceDBJS = `
const input = JSON.parse(await readStdin());
const A = arrow;
const schema = new A.Schema([
  new A.Field("id", new A.Int64(), false),
  new A.Field("x", new A.Float64(), true),
  new A.Field("s", new A.Utf8(), true),
  new A.Field("v", new A.FixedSizeList(4, new A.Field("item", new A.Float32(), true)), true),
  new A.Field("c", new A.Int64(), false),
  new A.Field("cs", new A.Utf8(), false),
  new A.Field("f3", new A.Float64(), false),
  new A.Field("none", new A.Int32(), true),
  new A.Field("b", new A.Bool(), true),
  new A.Field("bin", new A.Binary(), true),
  new A.Field("u8", new A.Uint8(), false),
  new A.Field("i16", new A.Int16(), true),
]);
const rows = [];
for (let r = 0; r < input.rows; r++) {
  rows.push({
    id: BigInt(r), x: r % 5 === 1 ? null : r * 0.25, s: r % 7 === 0 ? null : "s" + (r % 13),
    v: r % 9 === 4 ? null : [r, r + 0.5, -r, 1],
    c: 42n, cs: "same", f3: [0.5, 1.25, -3][r % 3], none: null,
    b: r % 4 === 3 ? null : r % 3 === 0, bin: r % 2 ? null : Buffer.from("bin-" + (r % 50)),
    u8: r % 200, i16: r % 6 === 0 ? null : (r * 7) % 30000 - 15000,
  });
}
const db = await lancedb.connect(input.dir);
const tbl = await db.createTable("t", lancedb.makeArrowTable(rows, { schema }),
  { storageOptions: { new_table_data_storage_version: input.version } });
await tbl.delete("id % 10 = 3");
const back = await tbl.query().limit(input.rows + 1).toArray();
process.stdout.write(JSON.stringify({ rows: back.map((row) => {
  const o = {};
  for (const [k, v] of Object.entries(row)) o[k] = norm(v);
  return o;
}) }));

function norm(v) {
  if (v === null || v === undefined) return null;
  if (typeof v === "bigint") return v.toString();
  if (v instanceof Uint8Array) return "hex:" + Buffer.from(v).toString("hex");
  if (typeof v !== "object") return v;
  if (typeof v.toArray === "function") return Array.from(v.toArray(), norm);
  if (ArrayBuffer.isView(v) || Array.isArray(v)) return Array.from(v, norm);
  return String(v);
}
`

// TestReadTableLanceDBWrote has LanceDB write a table with its default
// (compressed) encodings and delete rows from it, then reads the latest
// version through the data plane, column by column: each column reads
// exactly what LanceDB reads.
// Both judges write every file version.
func TestReadTableLanceDBWrote(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, judge lancedbtest.Version) { readTableLanceDBWrote(t, judge) })
}

func readTableLanceDBWrote(t *testing.T, judge lancedbtest.Version) {
	for _, v := range []string{"2.0", "2.1", "2.2"} {
		t.Run(v, func(t *testing.T) {
			dir := t.TempDir()
			var out struct {
				Rows []map[string]any `json:"rows"`
			}
			judge.Run(t, lancedbtest.Prelude+writeLanceDBJS, map[string]any{"dir": dir, "rows": 3000, "version": v}, &out)
			root := filepath.Join(dir, "t.lance")
			m := latestManifest(t, root)
			if got, err := data.FileVersion(m); err != nil || got.String() != v {
				t.Errorf("FileVersion of LanceDB's table = %v, %v; want %s", got, err, v)
			}
			s, err := data.Open(t.Context(), root)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for _, f := range m.Schema().Fields() {
				var got []any
				var readErr error
				for b, err := range s.Scan(t.Context(), m, []int32{f.GetId()}) {
					if err != nil {
						readErr = err
						break
					}
					for _, r := range jsonRows(t, b, m) {
						got = append(got, r[f.GetName()])
					}
				}
				switch {
				case readErr != nil:
					t.Errorf("column %s: %v; want its values", f.GetName(), readErr)
				default:
					want := make([]any, len(out.Rows))
					for i, r := range out.Rows {
						want[i] = r[f.GetName()]
					}
					if !reflect.DeepEqual(got, want) {
						t.Errorf("column %s: the data plane reads values LanceDB does not (%d vs %d rows)", f.GetName(), len(got), len(want))
					}
				}
			}
		})
	}
}

// latestManifest reads the newest manifest under root/_versions.
func latestManifest(t *testing.T, root string) *table.Manifest {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "_versions"))
	if err != nil {
		t.Fatal(err)
	}
	var best string
	var bestV uint64
	for _, e := range entries {
		if v, ok := table.ParseManifestFileName(e.Name()); ok && v >= bestV {
			best, bestV = e.Name(), v
		}
	}
	b, err := os.ReadFile(filepath.Join(root, "_versions", best))
	if err != nil {
		t.Fatal(err)
	}
	mf, err := table.ReadManifestFile(b)
	if err != nil {
		t.Fatal(err)
	}
	m, err := table.FromProto(mf.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
