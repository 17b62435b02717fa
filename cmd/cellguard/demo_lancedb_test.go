package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/lancedbtest"
	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

// readXYJS reads x and y of every row of a table with LanceDB.
const readXYJS = `
const input = JSON.parse(await readStdin());
const db = await lancedb.connect(input.dir);
const tbl = await db.openTable(input.table);
const rows = await tbl.query().select(["x", "y"]).limit(input.limit).toArray();
process.stdout.write(JSON.stringify({
  count: await tbl.countRows(),
  version: await tbl.version(),
  x: rows.map((r) => r.x.toString()),
  y: rows.map((r) => (r.y === null ? null : r.y.toString())),
}));
`

// TestLanceDBReadsDemoHead runs the demo with --lance-root, lays out its
// head version as a Lance manifest next to the data files the demo wrote
// in <root>/demo.lance (the publisher's job; here one manifest, written by
// the test), and has real LanceDB 0.31 read it: the same live rows as the
// data plane reads, and y = 3x+7 on every one of them.
func TestLanceDBReadsDemoHead(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	cfg := demoConfig{
		dataDir: t.TempDir(), fragments: 3, rows: 150, workers: 2,
		duration: 1500 * time.Millisecond, updateEvery: 10 * time.Millisecond, workTime: 20 * time.Millisecond,
		settle: 30 * time.Second, seed: 11, quiet: true, lanceRoot: t.TempDir(),
	}
	var out bytes.Buffer
	res, err := runDemo(t.Context(), cfg, &out)
	if err != nil || !res.ok() {
		t.Fatalf("demo: %v, %+v\n%s", err, res, out.String())
	}
	head := res.manifest
	lanceDir := cfg.lanceRoot
	writeHeadManifest(t, lanceLocation(lanceDir, demoDataset), head)

	var got struct {
		Count   int       `json:"count"`
		Version uint64    `json:"version"`
		X       []string  `json:"x"`
		Y       []*string `json:"y"`
	}
	lancedbtest.Run(t, lancedbtest.Prelude+readXYJS, map[string]any{"dir": lanceDir, "table": demoDataset, "limit": 1 << 20}, &got)
	if got.Version != head.Version() || got.Count != int(res.headRows) || len(got.X) != got.Count {
		t.Fatalf("LanceDB: version %d, %d rows counted, %d read; want version %d, %d rows", got.Version, got.Count, len(got.X), head.Version(), res.headRows)
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
}

// writeHeadManifest writes m as the dataset's only Lance manifest, with an
// inline transaction that creates it.
func writeHeadManifest(t *testing.T, dir string, m *table.Manifest) {
	t.Helper()
	pb := proto.CloneOf(m.Proto())
	pb.WriterVersion = &lancepb.Manifest_WriterVersion{Library: "lance", Version: "8.0.0"}
	var frags []*lancepb.DataFragment
	for f := range m.Fragments() {
		frags = append(frags, f.Proto())
	}
	txn := &lancepb.Transaction{
		ReadVersion: m.Version() - 1,
		Uuid:        "0d6f1c2a-7b3e-4c5d-8e9f-a0b1c2d3e4f5",
		Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{
			Fragments: frags, Schema: pb.GetFields()}},
	}
	b, err := table.WriteManifestFile(&table.ManifestFile{Manifest: pb, Transaction: txn})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "_versions"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "_versions", table.ManifestFileName(m.Version(), true)), b, 0o644); err != nil {
		t.Fatal(err)
	}
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
	for b, err := range s.Scan(t.Context(), m, []int32{fieldX}) {
		if err != nil {
			t.Fatal(err)
		}
		col := b.Columns[fieldX].(*array.Int64)
		for i := range b.Len() {
			xs = append(xs, col.Value(i))
		}
	}
	return xs
}
