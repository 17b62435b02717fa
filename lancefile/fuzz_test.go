package lancefile_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"cellguard/lancefile"
)

// fuzzSeeds are tiny files our writer makes — one column of two or
// three rows each, in both versions and every page layout (mini-block with
// and without nulls, full-zip fixed and variable, all-null). They must stay
// tiny: the fuzzer minimizes every new interesting input, and Go's byte
// minimizer tries removing every sub-slice, O(n²) runs, so inputs of a few
// kilobytes spend the whole minimization budget (a minute each by default)
// and the fuzzer shows 0 execs/s meanwhile. `make fuzz` also caps it with
// -fuzzminimizetime.
func fuzzSeeds(f *testing.F) [][]byte { return fuzzSeedsT(f) }

func fuzzSeedsT(f testing.TB) [][]byte {
	all := allTypes()
	shapes := []struct {
		name string
		rows int
		long bool
	}{
		{"i8_n", 3, false}, {"u64", 2, false}, {"b_n", 3, false}, {"s_n", 3, false},
		{"bin", 1, true}, {"s_n", 2, true}, {"v4_n", 2, false}, {"v96_n", 2, false},
	}
	var seeds [][]byte
	for _, v := range versions {
		for _, sh := range shapes {
			schema := arrow.NewSchema([]arrow.Field{all.Field(all.FieldIndices(sh.name)[0])}, nil)
			recs := []arrow.Record{makeRecord(schema, 0, sh.rows, someNulls, sh.long)}
			if sh.name == "i8_n" {
				recs = append(recs, makeRecord(schema, 3, 2, allNulls, false))
			}
			file, _ := writeFile(f, schema, recs, lancefile.WriterOptions{Version: v, PageBytes: 16})
			seeds = append(seeds, file)
		}
	}
	return append(seeds, lanceDBSeeds(f)...)
}

// lanceDBSeeds are single columns cut out of the LanceDB-written fixtures,
// in the compressed encodings LanceDB chose (bit-packing, bit-packed
// definition levels, dictionary, run-length, FSST, nullable list items),
// the ones under 4 KiB so that they stay cheap to minimize.
func lanceDBSeeds(f testing.TB) [][]byte {
	var seeds [][]byte
	for _, name := range []string{filepath.Join("2.0", "data.lance"), filepath.Join("2.1", "data.lance"), filepath.Join("shapes", "data.lance"),
		filepath.Join("2.2", "data.lance"), filepath.Join("shapes-2.2", "data.lance"), filepath.Join("nested-2.2", "data.lance")} {
		file, err := os.ReadFile(filepath.Join("testdata", "lancedb", name))
		if err != nil {
			f.Fatal(err)
		}
		r, err := lancefile.Open(bytes.NewReader(file), int64(len(file)))
		if err != nil {
			f.Fatal(err)
		}
		for c := range r.Schema().NumFields() {
			seed, err := lancefile.ExtractColumn(file, c)
			if err != nil {
				f.Fatal(err)
			}
			if len(seed) <= 4<<10 {
				seeds = append(seeds, seed)
			}
		}
	}
	return seeds
}

// FuzzOpen feeds arbitrary bytes to Open and, when they open, reads up to
// 64 rows of every column. Any failure must be a typed error; a panic, a
// hang or an allocation far beyond the file's size fails the fuzzer.
// TestReadLanceDBFixtures covers the larger LanceDB-written files; the
// committed inputs under testdata/fuzz/FuzzOpen are the cases that once
// failed.
func FuzzOpen(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := lancefile.Open(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			checkTyped(t, err)
			return
		}
		end := min(r.NumRows(), 64)
		for c := range r.Schema().NumFields() {
			a, err := r.ReadColumn(c, 0, end)
			if err != nil {
				checkTyped(t, err)
				continue
			}
			a.Release()
		}
	})
}

// FuzzReadColumn opens a file and reads one column three ways — a row
// range, the same rows by Take, and a full read sliced — and requires
// that they agree whenever they succeed. Seeds are our small files (the
// 100 KB LanceDB fixtures would make minimization stall the fuzzer; the
// tests read those).
func FuzzReadColumn(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s, uint16(1), uint16(0), uint16(3))
	}
	f.Fuzz(func(t *testing.T, b []byte, col, start, n uint16) {
		r, err := lancefile.Open(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			checkTyped(t, err)
			return
		}
		nc := r.Schema().NumFields()
		if nc == 0 || r.NumRows() == 0 {
			return
		}
		c := int(col) % nc
		lo := uint64(start) % r.NumRows()
		hi := min(r.NumRows(), lo+uint64(n%256))
		rng, err := r.ReadColumn(c, lo, hi)
		if err != nil {
			checkTyped(t, err)
			return
		}
		defer rng.Release()
		var rows []uint64
		for i := hi; i > lo; i-- { // reversed, to exercise the row order
			rows = append(rows, i-1)
		}
		tk, err := r.Take([]int{c}, rows)
		if err != nil {
			t.Fatalf("ReadColumn succeeded but Take failed: %v", err)
		}
		defer tk.Release()
		for i, row := range rows {
			j := int(row - lo)
			if !sameValue(rng, j, tk.Column(0), i) {
				t.Fatalf("row %d: ReadColumn and Take disagree", row)
			}
		}
	})
}

// sameValue reports whether a[i] and b[j] are equal (both null, or equal
// values).
func sameValue(a arrow.Array, i int, b arrow.Array, j int) bool {
	if a.IsNull(i) || b.IsNull(j) {
		return a.IsNull(i) == b.IsNull(j)
	}
	return array.SliceEqual(a, int64(i), int64(i+1), b, int64(j), int64(j+1))
}

func checkTyped(t *testing.T, err error) {
	var ue *lancefile.UnsupportedEncodingError
	var ut *lancefile.UnsupportedTypeError
	var uv *lancefile.UnsupportedVersionError
	if errors.Is(err, lancefile.ErrMalformed) || errors.As(err, &ue) || errors.As(err, &ut) || errors.As(err, &uv) {
		return
	}
	t.Fatalf("untyped error: %v", err)
}

// TestRepeatedBuffersRejected: page buffers that add up to more than the
// file (here the same bytes listed 100 times) are refused by Open, so
// reading stays linear in the file size. The file is also a committed
// FuzzOpen input (testdata/fuzz/FuzzOpen/repeated_buffers).
func TestRepeatedBuffersRejected(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	file, _ := writeFile(t, schema, []arrow.Record{makeRecord(schema, 0, 20, noNulls, false)}, lancefile.WriterOptions{})
	bad, err := lancefile.RepeatBuffers(file, 100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lancefile.Open(bytes.NewReader(bad), int64(len(bad))); !errors.Is(err, lancefile.ErrMalformed) {
		t.Fatalf("Open: %v, want ErrMalformed", err)
	}
	ok, err := lancefile.RepeatBuffers(file, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lancefile.Open(bytes.NewReader(ok), int64(len(ok))); err != nil {
		t.Fatalf("Open of the file rewritten once: %v", err)
	}
	if os.Getenv("LANCEFILE_WRITE_SEED") != "" {
		seed := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", bad)
		if err := os.WriteFile(filepath.Join("testdata", "fuzz", "FuzzOpen", "repeated_buffers"), []byte(seed), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
