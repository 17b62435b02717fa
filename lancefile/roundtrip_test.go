package lancefile_test

import (
	"bytes"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"cellguard/lancefile"
)

var versions = lancefile.Versions

// TestRoundTrip writes every type (some nulls, all-null pages, no-null
// pages, short and long strings) in several batches and pages, and reads
// it back whole, by range and by row.
func TestRoundTrip(t *testing.T) {
	schema := allTypes()
	recs := []arrow.Record{
		makeRecord(schema, 0, 700, someNulls, false),
		makeRecord(schema, 700, 300, allNulls, false),
		makeRecord(schema, 1000, 5000, noNulls, false),
		makeRecord(schema, 6000, 90, someNulls, true),
		makeRecord(schema, 6090, 1, noNulls, true),
	}
	for _, v := range versions {
		for _, pageBytes := range []int{0, 4096} {
			t.Run(v.String()+"/page"+itoa(pageBytes), func(t *testing.T) {
				file, fi := writeFile(t, schema, recs, lancefile.WriterOptions{Version: v, PageBytes: pageBytes})
				if fi.Rows != 6091 {
					t.Fatalf("FileInfo.Rows = %d; want 6091", fi.Rows)
				}
				r, err := lancefile.Open(bytes.NewReader(file), int64(len(file)))
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				if r.Version() != v || r.NumRows() != fi.Rows {
					t.Fatalf("Open: version %v rows %d; want %v %d", r.Version(), r.NumRows(), v, fi.Rows)
				}
				if pageBytes > 0 && r.NumPages(0) < 2 {
					t.Errorf("column 0 has %d pages; want several with PageBytes %d", r.NumPages(0), pageBytes)
				}
				checkColumns(t, r, recs)
				checkRange(t, r, recs, 650, 1100)
				checkTake(t, r, recs, []uint64{6090, 0, 1, 1, 4000, 701, 6050})
			})
		}
	}
}

func itoa(i int) string {
	return string(appendInt(nil, i))
}

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

func checkColumns(t *testing.T, r *lancefile.Reader, recs []arrow.Record) {
	t.Helper()
	for c := range r.Schema().NumFields() {
		got, err := r.ReadColumn(c, 0, r.NumRows())
		if err != nil {
			t.Fatalf("ReadColumn(%d): %v", c, err)
		}
		want := concat(t, recs, c)
		if !array.Equal(got, want) {
			t.Errorf("column %s: read back differs from what was written", r.Schema().Field(c).Name)
		}
	}
}

func checkRange(t *testing.T, r *lancefile.Reader, recs []arrow.Record, start, end int) {
	t.Helper()
	rec, err := r.ReadRange(nil, uint64(start), uint64(end))
	if err != nil {
		t.Fatalf("ReadRange: %v", err)
	}
	for c := range int(rec.NumCols()) {
		want := array.NewSlice(concat(t, recs, c), int64(start), int64(end))
		if !array.Equal(rec.Column(c), want) {
			t.Errorf("ReadRange(%d, %d) column %s differs", start, end, rec.ColumnName(c))
		}
	}
}

func checkTake(t *testing.T, r *lancefile.Reader, recs []arrow.Record, rows []uint64) {
	t.Helper()
	rec, err := r.Take([]int{3, 23, 25, 33}, rows)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	for i, c := range []int{3, 23, 25, 33} {
		all := concat(t, recs, c)
		for j, row := range rows {
			want := array.NewSlice(all, int64(row), int64(row)+1)
			got := array.NewSlice(rec.Column(i), int64(j), int64(j)+1)
			if !array.Equal(got, want) {
				t.Errorf("Take column %d row %d differs: got %v want %v", c, row, got, want)
			}
		}
	}
}

// TestEmptyFile writes a file without rows.
func TestEmptyFile(t *testing.T) {
	for _, v := range versions {
		file, fi := writeFile(t, allTypes(), nil, lancefile.WriterOptions{Version: v})
		r, err := lancefile.Open(bytes.NewReader(file), int64(len(file)))
		if err != nil {
			t.Fatalf("%v: Open: %v", v, err)
		}
		if fi.Rows != 0 || r.NumRows() != 0 {
			t.Fatalf("%v: rows %d/%d; want 0", v, fi.Rows, r.NumRows())
		}
		rec, err := r.ReadRange(nil, 0, 0)
		if err != nil || rec.NumRows() != 0 {
			t.Fatalf("%v: ReadRange = %v, %v", v, rec, err)
		}
	}
}

// TestFooterVersion checks the footer numbers Lance writes and the
// 64-byte alignment of every buffer.
func TestFooterVersion(t *testing.T) {
	schema := allTypes()
	recs := []arrow.Record{makeRecord(schema, 0, 100, someNulls, false)}
	for _, tc := range []struct {
		v            lancefile.Version
		major, minor byte
		dm, dn       uint32
	}{{lancefile.V2_0, 0, 3, 2, 0}, {lancefile.V2_1, 2, 1, 2, 1}, {lancefile.V2_2, 2, 2, 2, 2}} {
		file, fi := writeFile(t, schema, recs, lancefile.WriterOptions{Version: tc.v})
		tail := file[len(file)-8:]
		if tail[0] != tc.major || tail[2] != tc.minor || string(tail[4:]) != "LANC" {
			t.Errorf("%v footer tail = % x; want major %d minor %d LANC", tc.v, tail, tc.major, tc.minor)
		}
		if fi.MajorVersion != tc.dm || fi.MinorVersion != tc.dn {
			t.Errorf("%v FileInfo version = %d.%d; want %d.%d", tc.v, fi.MajorVersion, fi.MinorVersion, tc.dm, tc.dn)
		}
		gbPos := le64(file[len(file)-40-16:])
		if gbPos%64 != 0 {
			t.Errorf("%v: global buffer 0 at %d, not 64-aligned", tc.v, gbPos)
		}
	}
}

func le64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// TestWriterKeepsReleasedBatches writes fixed-width batches without nulls
// (which the writer keeps by reference until their page is written), then
// a batch with nulls in the same page (which makes it copy them), and
// releases every batch right after Write: what is read back must still be
// what was written.
func TestWriterKeepsReleasedBatches(t *testing.T) {
	schema := allTypes()
	for _, v := range versions {
		t.Run(v.String(), func(t *testing.T) {
			var buf bytes.Buffer
			w, err := lancefile.NewWriter(&buf, schema, nil, lancefile.WriterOptions{Version: v})
			if err != nil {
				t.Fatal(err)
			}
			specs := []struct {
				start, n int
				mode     nullMode
			}{{0, 3000, noNulls}, {3000, 7, noNulls}, {3007, 100, someNulls}, {3107, 2000, noNulls}}
			var want []arrow.Record
			for _, s := range specs {
				rec := makeRecord(schema, s.start, s.n, s.mode, false)
				if err := w.Write(rec); err != nil {
					t.Fatal(err)
				}
				rec.Release()
				want = append(want, makeRecord(schema, s.start, s.n, s.mode, false))
			}
			if _, err := w.Close(); err != nil {
				t.Fatal(err)
			}
			r, err := lancefile.Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
			if err != nil {
				t.Fatal(err)
			}
			checkColumns(t, r, want)
			checkTake(t, r, want, []uint64{5106, 0, 2999, 3000, 3006, 3008, 4000})
		})
	}
}

// TestWriterReleasesBatches checks that the writer lets go of every
// batch it kept by reference once the pages are written.
func TestWriterReleasesBatches(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	schema := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	for _, v := range versions {
		var buf bytes.Buffer
		w, err := lancefile.NewWriter(&buf, schema, nil, lancefile.WriterOptions{Version: v, PageBytes: 4096})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			b := array.NewInt64Builder(mem)
			for j := range 1000 {
				b.Append(int64(i*1000 + j))
			}
			arr := b.NewArray()
			b.Release()
			rec := array.NewRecord(schema, []arrow.Array{arr}, 1000)
			arr.Release()
			if err := w.Write(rec); err != nil {
				t.Fatal(err)
			}
			rec.Release()
		}
		if _, err := w.Close(); err != nil {
			t.Fatal(err)
		}
		mem.AssertSize(t, 0)
	}
}
