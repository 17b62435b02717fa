package data

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"gocloud.dev/blob"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// The data plane no longer writes Arrow IPC files; tests still make them
// to check that datasets written by an older cellguard stay readable, and
// the benchmarks to compare the Lance files with what they replaced.

// legacyField returns the Arrow field of a column holding Lance field f,
// as the Arrow IPC files of older cellguards recorded it.
func legacyField(f *lancepb.Field, t arrow.DataType) arrow.Field {
	md := arrow.NewMetadata([]string{fieldIDKey}, []string{strconv.FormatInt(int64(f.GetId()), 10)})
	return arrow.Field{Name: f.GetName(), Type: t, Nullable: f.GetNullable(), Metadata: md}
}

// encodeIPC writes cols, which must have nrows rows each, as an Arrow IPC
// file of one record batch, as older cellguards did.
func encodeIPC(fields []arrow.Field, cols []arrow.Array, nrows int) ([]byte, error) {
	schema := arrow.NewSchema(fields, nil)
	rec := array.NewRecordBatch(schema, cols, int64(nrows))
	defer rec.Release()
	var buf bytes.Buffer
	w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(schema), ipc.WithAllocator(alloc))
	if err != nil {
		return nil, err
	}
	if err := w.Write(rec); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteLegacyFragment writes cols as the Arrow IPC data file
// (data/<random>.arrow) an older cellguard wrote, and returns its
// fragment, exactly as the data plane did before it wrote Lance files.
func (s *Store) WriteLegacyFragment(ctx context.Context, schema *table.Schema, cols map[int32]arrow.Array) (*lancepb.DataFragment, error) {
	const op = "write legacy fragment"
	rows, err := commonLength(op, cols)
	if err != nil {
		return nil, err
	}
	ids := slices.Sorted(maps.Keys(cols))
	fields := make([]arrow.Field, len(ids))
	arrays := make([]arrow.Array, len(ids))
	colIdx := make([]int32, len(ids))
	for i, id := range ids {
		if err := checkValues(op, schema, id, cols[id]); err != nil {
			return nil, err
		}
		f, _ := schema.Field(id)
		t, _ := ArrowType(f.GetLogicalType())
		fields[i], arrays[i], colIdx[i] = legacyField(f, t), cols[id], int32(i)
	}
	b, err := encodeIPC(fields, arrays, rows)
	if err != nil {
		return nil, err
	}
	name := newFileName()
	name = name[:len(name)-len(fileExt)] + legacyExt
	if err := s.write(ctx, op, dataDir+name, b); err != nil {
		return nil, err
	}
	df := &lancepb.DataFile{Path: name, Fields: ids, ColumnIndices: colIdx, FileMajorVersion: 2, FileMinorVersion: 1, FileSizeBytes: uint64(len(b))}
	return &lancepb.DataFragment{Files: []*lancepb.DataFile{df}, PhysicalRows: uint64(rows)}, nil
}

// Bucket returns the Store's bucket, for tests that look at the bytes.
func (s *Store) Bucket() *blob.Bucket { return s.bucket }
