package publish_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/internal/lancedbtest"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// mixedJS creates, with LanceDB, a table of input.rows in the data
// storage version input.storage (op "create"), or opens one, reads its
// row count, appends a row and compacts it, reporting each step's error
// (op "use").
const mixedJS = `
const input = JSON.parse(await readStdin());
const db = await lancedb.connect(input.dir);
const out = {};
if (input.op === "create") {
  const rows = input.rows.map((id) => ({ id: BigInt(id) }));
  const schema = new arrow.Schema([new arrow.Field("id", new arrow.Int64(), false)]);
  await db.createTable(input.table, rows, { schema, dataStorageVersion: input.storage });
} else {
  const tbl = await db.openTable(input.table);
  const step = async (name, f) => {
    try { out[name] = await f(); } catch (e) { out[name + "Error"] = String(e.message || e).slice(0, 400); }
  };
  await step("count", async () => await tbl.countRows());
  await step("add", async () => { await tbl.add([{ id: 100n }]); return await tbl.countRows(); });
  await step("optimize", async () => { await tbl.optimize(); return await tbl.countRows(); });
}
process.stdout.write(JSON.stringify(out));
`

type mixedOut struct {
	Count         *int   `json:"count"`
	CountError    string `json:"countError"`
	Add           *int   `json:"add"`
	AddError      string `json:"addError"`
	Optimize      *int   `json:"optimize"`
	OptimizeError string `json:"optimizeError"`
}

// TestLanceDBMixedFileVersions is the measurement behind the table
// model's rule that a commit never mixes data file versions
// (table.checkFileVersion): a table whose manifest says one storage
// version, holding a fragment of the other (2.1 and 2.2), is read by
// LanceDB 0.31, which then fails its appends and compactions; LanceDB
// 0.39 does not open it at all.
func TestLanceDBMixedFileVersions(t *testing.T) {
	for _, tc := range []struct{ table, other string }{{"2.1", "2.2"}, {"2.2", "2.1"}} {
		lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
			dir := t.TempDir()
			for _, s := range []struct {
				name, storage string
				rows          []int
			}{{"t", tc.table, []int{1, 2, 3}}, {"o", tc.other, []int{4, 5}}} {
				lancedbtest.Lance12.Run(t, lancedbtest.Prelude+mixedJS, map[string]any{"dir": dir, "table": s.name, "op": "create", "storage": s.storage, "rows": s.rows}, nil)
			}
			mixFragment(t, filepath.Join(dir, "t.lance"), filepath.Join(dir, "o.lance"))
			stdout, err := v.RunErr(t, lancedbtest.Prelude+mixedJS, map[string]any{"dir": dir, "table": "t", "op": "use"})
			if err != nil {
				// Lance 12 refuses to open it: "… has version 2.2, but the
				// manifest default is 2.1 and mixed data-file-version
				// capability is not enabled".
				t.Logf("%s table with a %s fragment, LanceDB %s: %v", tc.table, tc.other, v.LanceDB, err)
				if !strings.Contains(err.Error(), "version "+tc.other) {
					t.Errorf("LanceDB %s failed without naming the file version %s: %v", v.LanceDB, tc.other, err)
				}
				return
			}
			var out mixedOut
			if err := json.Unmarshal(stdout, &out); err != nil {
				t.Fatalf("%v: %s", err, stdout)
			}
			t.Logf("%s table with a %s fragment, LanceDB %s: %s", tc.table, tc.other, v.LanceDB, stdout)
			// Lance 8 reads it, then fails every append and compaction:
			// "All data files must have the same version".
			if out.Count == nil || *out.Count != 5 {
				t.Errorf("count %v (%s), want 5", out.Count, out.CountError)
			}
			if out.Add != nil || out.Optimize != nil {
				t.Errorf("append (%v) or optimize (%v) succeeded on a mixed table: the rule against mixing is not needed", out.Add, out.Optimize)
			}
			for _, e := range []string{out.AddError, out.OptimizeError} {
				if e != "" && !strings.Contains(e, "same version") {
					t.Errorf("error %q does not name the file versions", e)
				}
			}
		})
	}
}

// mixFragment commits, by hand, version 2 of the table at dst: version
// 1 plus the first fragment of the table at src, whose data file it
// copies. It is Lance's Append, skipping the version check that Lance
// and cellguard do on every commit.
func mixFragment(t *testing.T, dst, src string) {
	t.Helper()
	read := func(dir string) *table.ManifestFile {
		b, err := os.ReadFile(filepath.Join(dir, "_versions", table.ManifestFileName(1, true)))
		if err != nil {
			t.Fatal(err)
		}
		f, err := table.ReadManifestFile(b)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	d, s := read(dst), read(src)
	frag := proto.CloneOf(s.Manifest.GetFragments()[0])
	df := frag.GetFiles()[0]
	b, err := os.ReadFile(filepath.Join(src, "data", df.GetPath()))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "data", df.GetPath()), b, 0o644); err != nil {
		t.Fatal(err)
	}
	m := proto.CloneOf(d.Manifest)
	frag.Id = uint64(m.GetMaxFragmentId()) + 1
	m.Fragments = append(m.Fragments, frag)
	m.MaxFragmentId = proto.Uint32(uint32(frag.Id))
	m.Version = 2
	m.TransactionFile = ""
	txn := &lancepb.Transaction{ReadVersion: 1, Uuid: "00000000-0000-4000-8000-00000000a11d",
		Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{Fragments: []*lancepb.DataFragment{frag}}}}
	out, err := table.WriteManifestFile(&table.ManifestFile{Manifest: m, Transaction: txn})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "_versions", table.ManifestFileName(2, true)), out, 0o644); err != nil {
		t.Fatal(err)
	}
}
