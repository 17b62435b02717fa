package lancefile_test

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"cellguard/internal/lancedbtest"
	"cellguard/lancefile"
)

//go:embed testdata/write_tables.mjs
var writeTablesJS string

var update = flag.Bool("lancefile.update", false, "regenerate testdata/lancedb from real LanceDB")

// lancedbRows is the number of rows write_tables.mjs writes: enough for
// several mini-block chunks, small enough for committed fixtures.
const lancedbRows = 100

type written struct {
	Rows  []map[string]any `json:"rows"`
	Files []string         `json:"files"`
}

// fileFixtures are the committed LanceDB-written files: which judge
// wrote each version's.
var fileFixtures = map[string]string{"2.0": "lance8", "2.1": "lance8", "2.2": "lance12"}

// TestReadLanceDBFiles is the judge in the other direction: each LanceDB
// (0.31 and 0.39) writes a 2.0, a 2.1 and a 2.2 table (its default
// encodings) and our reader must return exactly the values LanceDB reads
// back, or, for a column whose encoding is not decoded yet, an
// *UnsupportedEncodingError — never a wrong value. With -lancefile.update
// it also refreshes the committed fixtures that TestReadLanceDBFixtures
// reads without Node.
func TestReadLanceDBFiles(t *testing.T) {
	versions := []string{"2.0", "2.1", "2.2"}
	lancedbtest.Each(t, func(t *testing.T, judge lancedbtest.Version) {
		var out map[string]written
		judge.Run(t, lancedbtest.Prelude+writeTablesJS, map[string]any{
			"dir": t.TempDir(), "rows": lancedbRows, "versions": versions,
		}, &out)
		for _, v := range versions {
			w := out[v]
			if len(w.Files) != 1 {
				t.Fatalf("%s: LanceDB wrote %d data files; want 1", v, len(w.Files))
			}
			file, err := os.ReadFile(w.Files[0])
			if err != nil {
				t.Fatal(err)
			}
			decoded := checkLanceDBFile(t, v, file, w.Rows)
			t.Logf("%s: decoded columns %v", v, decoded)
			requireAllDecoded(t, file, decoded)
			if *update && fileFixtures[v] == judge.Name {
				saveFixture(t, v, file, w.Rows)
			}
		}
	})
}

// TestReadLanceDBFixtures reads the committed LanceDB-written files.
func TestReadLanceDBFixtures(t *testing.T) {
	for _, name := range []string{"2.0", "2.1", "2.2", "nested-2.2"} {
		v := strings.TrimPrefix(name, "nested-")
		dir := filepath.Join("testdata", "lancedb", name)
		file, err := os.ReadFile(filepath.Join(dir, "data.lance"))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "rows.json"))
		if err != nil {
			t.Fatal(err)
		}
		var rows []map[string]any
		if err := json.Unmarshal(b, &rows); err != nil {
			t.Fatal(err)
		}
		requireAllDecoded(t, file, checkLanceDBFile(t, v, file, rows))
	}
}

// requireAllDecoded fails unless every column of the file was decoded:
// the reader decodes all of LanceDB's default encodings, and a
// regression must not hide behind UnsupportedEncodingError.
func requireAllDecoded(t *testing.T, file []byte, decoded []string) {
	t.Helper()
	r, err := lancefile.Open(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		t.Fatal(err)
	}
	if len(decoded) != r.Schema().NumFields() {
		t.Errorf("decoded %d of %d columns: %v", len(decoded), r.Schema().NumFields(), decoded)
	}
}

// checkLanceDBFile reads every column of a LanceDB-written file and
// compares it with the rows LanceDB returned. It returns the names of
// the columns decoded; the others must fail with UnsupportedEncodingError.
func checkLanceDBFile(t *testing.T, v string, file []byte, rows []map[string]any) []string {
	t.Helper()
	r, err := lancefile.Open(bytes.NewReader(file), int64(len(file)))
	if err != nil {
		t.Fatalf("%s: Open: %v", v, err)
	}
	if r.Version().String() != v || r.NumRows() != uint64(len(rows)) {
		t.Fatalf("%s: file version %v with %d rows; want %s with %d", v, r.Version(), r.NumRows(), v, len(rows))
	}
	var decoded []string
	for c, f := range r.Schema().Fields() {
		a, err := r.ReadColumn(c, 0, r.NumRows())
		var ue *lancefile.UnsupportedEncodingError
		if errors.As(err, &ue) {
			t.Logf("%s: column %s: %v", v, f.Name, err)
			continue
		}
		if err != nil {
			t.Errorf("%s: column %s: %v", v, f.Name, err)
			continue
		}
		got := make([]any, a.Len())
		want := make([]any, a.Len())
		for i := range a.Len() {
			got[i] = jsonValue(a, i)
			want[i] = rows[i][f.Name]
		}
		if !reflect.DeepEqual(viaJSON(t, got), want) {
			t.Errorf("%s: column %s differs from LanceDB:\n got %v\nwant %v", v, f.Name, viaJSON(t, got), want)
			continue
		}
		// A range from the middle reads the same rows.
		lo, hi := r.NumRows()/3, min(r.NumRows(), r.NumRows()/3+50)
		part, err := r.ReadColumn(c, lo, hi)
		if err != nil {
			t.Errorf("%s: column %s rows [%d, %d): %v", v, f.Name, lo, hi, err)
			continue
		}
		gotPart := make([]any, part.Len())
		for i := range part.Len() {
			gotPart[i] = jsonValue(part, i)
		}
		if !reflect.DeepEqual(viaJSON(t, gotPart), want[lo:hi]) {
			t.Errorf("%s: column %s rows [%d, %d) differ from the whole column's", v, f.Name, lo, hi)
			continue
		}
		decoded = append(decoded, f.Name)
	}
	sort.Strings(decoded)
	return decoded
}

func viaJSON(t *testing.T, v []any) []any {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func saveFixture(t *testing.T, v string, file []byte, rows []map[string]any) {
	dir := filepath.Join("testdata", "lancedb", v)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rows)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rows.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data.lance"), file, 0o644); err != nil {
		t.Fatal(err)
	}
}
