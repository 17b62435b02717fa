package lancefile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"cellguard/internal/lancedbtest"
	"cellguard/lancefile"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// mixedJS opens a table, counts its rows, appends rows and compacts it,
// and reports what each step did.
const mixedJS = `
const input = JSON.parse(await readStdin());
const db = await lancedb.connect(input.dir);
const out = {};
const step = async (name, f) => {
  try { out[name] = await f(); } catch (e) { out[name + "Err"] = String(e.message || e).split("\n")[0]; }
};
let tbl;
await step("open", async () => { tbl = await db.openTable("t"); return true; });
await step("count", () => tbl.countRows());
await step("scan", async () => (await tbl.query().limit(1000000).toArray()).length);
await step("add", async () => {
  const rows = Array.from({ length: 10 }, (_, r) => ({ i64: BigInt(10000 + r), s_n: "added" }));
  await tbl.add(lancedb.makeArrowTable(rows, { schema: await tbl.schema() }));
  return true;
});
await step("countAfterAdd", () => tbl.countRows());
await step("optimize", async () => { await tbl.optimize(); return true; });
await step("countAfterOptimize", () => tbl.countRows());
process.stdout.write(JSON.stringify(out));
`

type mixedOutcome struct {
	Open               bool   `json:"open"`
	OpenErr            string `json:"openErr"`
	Count              int    `json:"count"`
	Scan               int    `json:"scan"`
	Add                bool   `json:"add"`
	AddErr             string `json:"addErr"`
	CountAfterAdd      int    `json:"countAfterAdd"`
	Optimize           bool   `json:"optimize"`
	OptimizeErr        string `json:"optimizeErr"`
	CountAfterOptimize int    `json:"countAfterOptimize"`
}

// TestLanceDBMixedVersions measures what LanceDB does with a table whose
// fragments mix file versions 2.1 and 2.2 (the manifest's data format
// naming either), or whose files all differ from its data format: Lance 8
// reads every row but refuses to append to it or compact it; Lance 12
// refuses to open it ("mixed data-file-version capability is not
// enabled"). This is why a dataset's data files all have its storage
// version.
func TestLanceDBMixedVersions(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "i64", Type: arrow.PrimitiveTypes.Int64},
		{Name: "s_n", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	recs := func(start int) []arrow.Record {
		return []arrow.Record{makeRecord(schema, start, 100, someNulls, false)}
	}
	lancedbtest.Each(t, func(t *testing.T, judge lancedbtest.Version) {
		for _, tc := range []struct {
			name   string
			files  []lancefile.Version
			format lancefile.Version
		}{
			{"2.1 and 2.2 files, format 2.1", []lancefile.Version{lancefile.V2_1, lancefile.V2_2}, lancefile.V2_1},
			{"2.1 and 2.2 files, format 2.2", []lancefile.Version{lancefile.V2_1, lancefile.V2_2}, lancefile.V2_2},
			{"2.1 files, format 2.2", []lancefile.Version{lancefile.V2_1, lancefile.V2_1}, lancefile.V2_2},
		} {
			format := tc.format
			t.Run(tc.name, func(t *testing.T) {
				dir := t.TempDir()
				var files [][]byte
				var infos []lancefile.FileInfo
				for i, v := range tc.files {
					f, fi := writeFile(t, schema, recs(100*i), lancefile.WriterOptions{Version: v})
					files, infos = append(files, f), append(infos, fi)
				}
				writeFragments(t, filepath.Join(dir, "t.lance"), schema, files, infos, format)
				var out mixedOutcome
				judge.Run(t, lancedbtest.Prelude+mixedJS, map[string]any{"dir": dir}, &out)
				t.Logf("%s, %s: open %v %q, count %d, scan %d", judge, tc.name, out.Open, out.OpenErr, out.Count, out.Scan)
				t.Logf("add %v %.200q, optimize %v %.200q", out.Add, out.AddErr, out.Optimize, out.OptimizeErr)
				if judge.Name == lancedbtest.Lance12.Name {
					// Lance 12 refuses to open the table at all.
					if out.Open || !strings.Contains(out.OpenErr, "mixed data-file-version capability is not enabled") {
						t.Errorf("Lance 12 opened a table mixing file versions: %v %q", out.Open, out.OpenErr)
					}
					return
				}
				// Lance 8 reads it but refuses to append to it or compact it.
				if !out.Open || out.Count != 200 || out.Scan != 200 {
					t.Errorf("LanceDB opened %v (%s), counted %d and scanned %d rows; want 200", out.Open, out.OpenErr, out.Count, out.Scan)
				}
				if !strings.Contains(out.AddErr, "All data files must have the same version") {
					t.Errorf("Lance 8 appended to a table mixing file versions: %q", out.AddErr)
				}
				if out.Optimize || out.OptimizeErr == "" {
					t.Errorf("Lance 8 compacted a table mixing file versions")
				}
			})
		}
	})
}

// writeFragments lays out version 1 of a dataset at root with one
// fragment per file, its data format the given version.
func writeFragments(t *testing.T, root string, schema *arrow.Schema, files [][]byte, infos []lancefile.FileInfo, format lancefile.Version) {
	t.Helper()
	for _, d := range []string{"data", "_versions"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fields, err := lancefile.Fields(schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	var frags []*lancepb.DataFragment
	for i, file := range files {
		name := "0123456789abcdef0123456789abcde" + string(rune('0'+i)) + ".lance"
		if err := os.WriteFile(filepath.Join(root, "data", name), file, 0o644); err != nil {
			t.Fatal(err)
		}
		frags = append(frags, &lancepb.DataFragment{Id: uint64(i), Files: []*lancepb.DataFile{infos[i].DataFile(name)}, PhysicalRows: infos[i].Rows})
	}
	maxID := uint32(len(files) - 1)
	m := &lancepb.Manifest{
		Fields:        fields,
		Fragments:     frags,
		Version:       1,
		WriterVersion: &lancepb.Manifest_WriterVersion{Library: "lance", Version: "8.0.0"},
		MaxFragmentId: &maxID,
		DataFormat:    &lancepb.Manifest_DataStorageFormat{FileFormat: "lance", Version: format.String()},
	}
	txn := &lancepb.Transaction{
		Uuid: "0d9e3c1a-6b2f-4e57-8a90-3c4d5e6f7a81",
		Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{
			Fragments: frags, Schema: fields}},
	}
	b, err := table.WriteManifestFile(&table.ManifestFile{Manifest: m, Transaction: txn})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "_versions", table.ManifestFileName(1, true)), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
