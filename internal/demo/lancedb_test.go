package demo

import (
	"bytes"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"

	"cellguard/internal/lancedbtest"
	"cellguard/table"
	"cellguard/table/data"
)

// readXYJS reads x and y of every row of a table with LanceDB.
const readXYJS = `
const input = JSON.parse(await readStdin());
const db = await lancedb.connect(input.dir);
const tbl = await db.openTable(input.table);
const rows = await tbl.query().select(["x", "y"]).limit(input.limit).toArray();
const versions = await tbl.listVersions();
process.stdout.write(JSON.stringify({
  count: await tbl.countRows(),
  version: await tbl.version(),
  versions: versions.map((v) => v.version),
  x: rows.map((r) => r.x.toString()),
  y: rows.map((r) => (r.y === null ? null : r.y.toString())),
}));
`

// TestLanceDBReadsDemoHead runs the demo with --lance-root, whose publisher
// lays every committed version out in <root>/demo.lance, and has real
// LanceDB 0.31 open the table there: every version is listed, and the head
// has the same live rows as the data plane reads, with y = 3x+7 on every
// one of them.
func TestLanceDBReadsDemoHead(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, judge lancedbtest.Version) {
		if testing.Short() {
			t.Skip("short mode")
		}
		cfg := Options{
			DataDir: t.TempDir(), Fragments: 3, Rows: 150, Workers: 2,
			Duration: 1500 * time.Millisecond, UpdateEvery: 10 * time.Millisecond, WorkTime: 20 * time.Millisecond,
			Settle: 30 * time.Second, Seed: 11, Quiet: true, LanceRoot: t.TempDir(),
		}
		var out bytes.Buffer
		res, err := runDemo(t.Context(), cfg, &out)
		if err != nil || !res.ok() {
			t.Fatalf("demo: %v, %+v\n%s", err, res, out.String())
		}
		head := res.manifest
		lanceDir := cfg.LanceRoot
		if res.published != head.Version() {
			t.Fatalf("published up to version %d of %d: %v", res.published, head.Version(), res.publishErr)
		}

		var got struct {
			Count    int       `json:"count"`
			Version  uint64    `json:"version"`
			Versions []uint64  `json:"versions"`
			X        []string  `json:"x"`
			Y        []*string `json:"y"`
		}
		judge.Run(t, lancedbtest.Prelude+readXYJS, map[string]any{"dir": lanceDir, "table": demoDataset, "limit": 1 << 20}, &got)
		if got.Version != head.Version() || got.Count != int(res.headRows) || len(got.X) != got.Count {
			t.Fatalf("LanceDB: version %d, %d rows counted, %d read; want version %d, %d rows", got.Version, got.Count, len(got.X), head.Version(), res.headRows)
		}
		if len(got.Versions) != int(head.Version()) || got.Versions[0] != 1 || got.Versions[len(got.Versions)-1] != head.Version() {
			t.Errorf("LanceDB lists versions %v…; want 1 to %d", got.Versions[:min(5, len(got.Versions))], head.Version())
		}
		var lanceX []int64
		for i := range got.X {
			x, err := strconv.ParseInt(got.X[i], 10, 64)
			if err != nil || got.Y[i] == nil || *got.Y[i] != strconv.FormatInt(demoF(x), 10) {
				t.Fatalf("LanceDB row %d: x %s, y %v; want y = 3x+7", i, got.X[i], got.Y[i])
			}
			lanceX = append(lanceX, x)
		}
		if want := dataPlaneX(t, lanceLocation(lanceDir, demoDataset), head); !slices.Equal(lanceX, want) {
			t.Errorf("LanceDB reads x %v…, the data plane %v…", lanceX[:min(5, len(lanceX))], want[:min(5, len(want))])
		}
	})
}

// dataPlaneX is x of every live row of m in scan order, read through
// table/data.
func dataPlaneX(t *testing.T, dir string, m *table.Manifest) []int64 {
	t.Helper()
	s, err := data.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var xs []int64
	for b, err := range s.Scan(t.Context(), m, []int32{FieldX}) {
		if err != nil {
			t.Fatal(err)
		}
		col := b.Columns[FieldX].(*array.Int64)
		for i := range b.Len() {
			xs = append(xs, col.Value(i))
		}
	}
	return xs
}
