package lancedbtest_test

import (
	"testing"

	"cellguard/internal/lancedbtest"
)

// TestRunRoundTrip creates a table with LanceDB, reads it back and checks
// the values and the pinned version arrive through stdin/stdout JSON.
func TestRunRoundTrip(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		testRunRoundTrip(t, v)
	})
}

func testRunRoundTrip(t *testing.T, v lancedbtest.Version) {
	script := lancedbtest.Prelude + `
const input = JSON.parse(await readStdin());
const db = await lancedb.connect(input.dir);
const tbl = await db.createTable("t", input.rows.map((v) => ({ v })));
const rows = await tbl.query().toArray();
const pkg = JSON.parse((await import("node:fs")).readFileSync(
  "node_modules/@lancedb/lancedb/package.json", "utf8"));
process.stdout.write(JSON.stringify({ values: rows.map((r) => Number(r.v)), version: pkg.version }));
`
	var out struct {
		Values  []int  `json:"values"`
		Version string `json:"version"`
	}
	v.Run(t, script, map[string]any{"dir": t.TempDir(), "rows": []int{3, 1, 2}}, &out)
	if got, want := len(out.Values), 3; got != want {
		t.Fatalf("rows = %d; want %d", got, want)
	}
	for i, want := range []int{3, 1, 2} {
		if out.Values[i] != want {
			t.Errorf("value %d = %d; want %d", i, out.Values[i], want)
		}
	}
	if out.Version != v.LanceDB {
		t.Errorf("lancedb version = %q; want %q", out.Version, v.LanceDB)
	}
}

// TestRunErrReportsFailure checks that a failing script is an error that
// carries its stderr.
func TestRunErrReportsFailure(t *testing.T) {
	_, err := lancedbtest.RunErr(t, `console.error("boom"); process.exit(3);`, nil)
	if err == nil {
		t.Fatal("RunErr of a failing script = nil error")
	}
	se, ok := err.(*lancedbtest.ScriptError)
	if !ok || se.Stderr != "boom\n" {
		t.Fatalf("RunErr error = %#v; want *ScriptError with stderr boom", err)
	}
}
