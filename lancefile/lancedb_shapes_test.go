package lancefile_test

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"cellguard/internal/lancedbtest"
)

//go:embed testdata/write_shapes.mjs
var writeShapesJS string

// shapesRows is the number of rows write_shapes.mjs writes: enough for
// LanceDB to choose its compressive encodings (several 1,024-value
// bit-packed chunks, dictionaries, FSST).
const shapesRows = 3000

var shapesDir = filepath.Join("testdata", "lancedb", "shapes")

// TestReadLanceDBShapes has LanceDB write a 2.1 table whose columns
// trigger each of its compressive encodings, and checks that the reader
// returns what LanceDB reads back (or UnsupportedEncodingError). With
// -lancefile.update it refreshes the committed fixture.
func TestReadLanceDBShapes(t *testing.T) {
	var out written
	lancedbtest.Run(t, lancedbtest.Prelude+writeShapesJS, map[string]any{"dir": t.TempDir(), "rows": shapesRows}, &out)
	if len(out.Files) != 1 {
		t.Fatalf("LanceDB wrote %d data files; want 1", len(out.Files))
	}
	file, err := os.ReadFile(out.Files[0])
	if err != nil {
		t.Fatal(err)
	}
	decoded := checkLanceDBFile(t, "2.1", file, out.Rows)
	t.Logf("decoded columns %v", decoded)
	if *update {
		saveShapes(t, file, out.Rows)
	}
}

// TestReadLanceDBShapesFixture reads the committed shapes fixture.
func TestReadLanceDBShapesFixture(t *testing.T) {
	file, err := os.ReadFile(filepath.Join(shapesDir, "data.lance"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(shapesDir, "rows.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	requireAllDecoded(t, file, checkLanceDBFile(t, "2.1", file, rows))
}

func saveShapes(t *testing.T, file []byte, rows []map[string]any) {
	if err := os.MkdirAll(shapesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rows)
	if err != nil {
		t.Fatal(err)
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shapesDir, "rows.json.gz"), z.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shapesDir, "data.lance"), file, 0o644); err != nil {
		t.Fatal(err)
	}
}
