package lancefile_test

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"cellguard/lancefile"
)

// benchRecord is 1M rows of an int64 and a float32 column (12 MB), the
// data the Arrow IPC data files of table/data are compared on.
func benchRecord(b *testing.B) arrow.Record {
	const n = 1 << 20
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "x", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	}, nil)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer rb.Release()
	for i := range n {
		rb.Field(0).(*array.Int64Builder).Append(int64(i) * 7)
		rb.Field(1).(*array.Float32Builder).Append(float32(i) / 3)
	}
	return rb.NewRecord()
}

const benchBytes = (1 << 20) * 12

func BenchmarkWriteLance(b *testing.B) {
	rec := benchRecord(b)
	for _, v := range versions {
		b.Run(v.String(), func(b *testing.B) {
			b.SetBytes(benchBytes)
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				w, err := lancefile.NewWriter(&buf, rec.Schema(), nil, lancefile.WriterOptions{Version: v})
				if err != nil {
					b.Fatal(err)
				}
				if err := w.Write(rec); err != nil {
					b.Fatal(err)
				}
				if _, err := w.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkWriteIPC(b *testing.B) {
	rec := benchRecord(b)
	b.SetBytes(benchBytes)
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(rec.Schema()))
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Write(rec); err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadLance(b *testing.B) {
	rec := benchRecord(b)
	for _, v := range versions {
		b.Run(v.String(), func(b *testing.B) {
			file, _ := writeFile(b, rec.Schema(), []arrow.Record{rec}, lancefile.WriterOptions{Version: v})
			b.SetBytes(benchBytes)
			for b.Loop() {
				r, err := lancefile.Open(bytes.NewReader(file), int64(len(file)))
				if err != nil {
					b.Fatal(err)
				}
				out, err := r.ReadRange(nil, 0, r.NumRows())
				if err != nil {
					b.Fatal(err)
				}
				out.Release()
			}
		})
	}
}

func BenchmarkReadIPC(b *testing.B) {
	rec := benchRecord(b)
	var buf bytes.Buffer
	w, _ := ipc.NewFileWriter(&buf, ipc.WithSchema(rec.Schema()))
	if err := w.Write(rec); err != nil {
		b.Fatal(err)
	}
	w.Close()
	file := buf.Bytes()
	b.SetBytes(benchBytes)
	for b.Loop() {
		r, err := ipc.NewFileReader(bytes.NewReader(file))
		if err != nil {
			b.Fatal(err)
		}
		got, err := r.Record(0)
		if err != nil {
			b.Fatal(err)
		}
		_ = got
		r.Close()
	}
}

// benchStrings is 1M short strings (about 11 bytes each) with a null in
// every 16 rows.
func benchStrings(b *testing.B) (arrow.Record, int64) {
	const n = 1 << 20
	schema := arrow.NewSchema([]arrow.Field{{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
	rb := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer rb.Release()
	sb := rb.Field(0).(*array.StringBuilder)
	for i := range n {
		if i%16 == 5 {
			sb.AppendNull()
			continue
		}
		sb.Append("user-" + strconv.Itoa(i*7919%1000003))
	}
	rec := rb.NewRecord()
	return rec, int64(len(rec.Column(0).Data().Buffers()[2].Bytes()) + 4*(n+1))
}

func BenchmarkWriteStrings(b *testing.B) {
	rec, size := benchStrings(b)
	for _, v := range versions {
		b.Run("lance"+v.String(), func(b *testing.B) {
			b.SetBytes(size)
			var buf bytes.Buffer
			for b.Loop() {
				buf.Reset()
				w, err := lancefile.NewWriter(&buf, rec.Schema(), nil, lancefile.WriterOptions{Version: v})
				if err != nil {
					b.Fatal(err)
				}
				if err := w.Write(rec); err != nil {
					b.Fatal(err)
				}
				if _, err := w.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("ipc", func(b *testing.B) {
		b.SetBytes(size)
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(rec.Schema()))
			if err != nil {
				b.Fatal(err)
			}
			if err := w.Write(rec); err != nil {
				b.Fatal(err)
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
