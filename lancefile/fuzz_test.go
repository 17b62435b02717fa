package lancefile_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"

	"cellguard/lancefile"
)

// FuzzOpen feeds arbitrary bytes to Open and, when they open, reads up to
// 64 rows of every column. Any failure must be a typed error; a panic or
// an allocation beyond the file's size fails the fuzzer. Seeds: small files
// our writer makes (2.0 and 2.1); TestReadLanceDBFixtures covers the
// larger LanceDB-written files.
func FuzzOpen(f *testing.F) {
	schema := allTypes()
	recs := []arrow.Record{makeRecord(schema, 0, 20, someNulls, false), makeRecord(schema, 20, 3, noNulls, true)}
	for _, v := range versions {
		file, _ := writeFile(f, schema, recs, lancefile.WriterOptions{Version: v, PageBytes: 64})
		f.Add(file)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := lancefile.Open(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			checkTyped(t, err)
			return
		}
		end := min(r.NumRows(), 64)
		for c := range r.Schema().NumFields() {
			if _, err := r.ReadColumn(c, 0, end); err != nil {
				checkTyped(t, err)
			}
		}
	})
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
