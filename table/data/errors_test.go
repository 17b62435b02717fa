package data_test

import (
	"context"
	"errors"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"gocloud.dev/blob/memblob"

	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

func manifestOf(t *testing.T, fields []*lancepb.Field, frags ...*lancepb.DataFragment) *table.Manifest {
	t.Helper()
	m, err := table.FromProto(&lancepb.Manifest{Version: 3, Fields: fields, Fragments: frags})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func int64Col(vals ...int64) arrow.Array {
	v := make([]any, len(vals))
	for i, x := range vals {
		v[i] = x
	}
	return toArray(fieldArrowType(fY), v)
}

// TestReadErrors plants broken files and manifests that disagree with
// their files, and checks that every read fails with the right error
// instead of panicking or returning wrong values.
func TestReadErrors(t *testing.T) {
	ctx := context.Background()
	bucket := memblob.OpenBucket(nil)
	s := data.NewStore(bucket, data.Options{CacheBytes: -1})
	defer s.Close()
	schema := testSchema(t)

	good, err := s.WriteFragment(ctx, schema, map[int32]arrow.Array{fY: int64Col(1, 2, 3)})
	if err != nil {
		t.Fatal(err)
	}
	goodFile := good.GetFiles()[0]
	five, err := s.WriteFragment(ctx, schema, map[int32]arrow.Array{fY: int64Col(1, 2, 3, 4, 5)})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := bucket.ReadAll(ctx, "data/"+goodFile.GetPath())
	if err != nil {
		t.Fatal(err)
	}
	plant := func(name string, b []byte) *lancepb.DataFile {
		if err := bucket.WriteAll(ctx, "data/"+name, b, nil); err != nil {
			t.Fatal(err)
		}
		return &lancepb.DataFile{Path: name, Fields: []int32{fY}, ColumnIndices: []int32{0}, FileMajorVersion: 2, FileMinorVersion: 1}
	}
	frag := func(rows uint64, files ...*lancepb.DataFile) *lancepb.DataFragment {
		return &lancepb.DataFragment{Id: 1, PhysicalRows: rows, Files: files}
	}
	ov := func(df *lancepb.DataFile, cov *roaring.Bitmap) *lancepb.DataOverlayFile {
		b, _ := cov.ToBytes()
		return &lancepb.DataOverlayFile{DataFile: df, Coverage: &lancepb.DataOverlayFile_SharedOffsetBitmap{SharedOffsetBitmap: b}, CommittedVersion: 2}
	}
	withOverlay := func(f *lancepb.DataFragment, o *lancepb.DataOverlayFile) *lancepb.DataFragment {
		f.Overlays = append(f.Overlays, o)
		return f
	}
	withDeletion := func(f *lancepb.DataFragment, d *lancepb.DeletionFile) *lancepb.DataFragment {
		f.DeletionFile = d
		return f
	}
	edit := func(df *lancepb.DataFile, fn func(*lancepb.DataFile)) *lancepb.DataFile {
		c := cloneFragment(&lancepb.DataFragment{Files: []*lancepb.DataFile{df}}).Files[0]
		fn(c)
		return c
	}
	strSchema := []*lancepb.Field{{Name: "y", Id: fY, ParentId: -1, LogicalType: "string", Nullable: true}}
	structSchema := []*lancepb.Field{{Name: "y", Id: fY, ParentId: -1, LogicalType: "timestamp:us", Nullable: true}}
	badBitmap := &lancepb.DeletionFile{FileType: lancepb.DeletionFile_BITMAP, ReadVersion: 1, Id: 1, NumDeletedRows: 1}
	if err := bucket.WriteAll(ctx, "_deletions/"+table.DeletionFilePath(1, badBitmap), []byte("not a bitmap"), nil); err != nil {
		t.Fatal(err)
	}
	beyond, err := s.WriteDeletionFile(ctx, 1, 1, roaring.BitmapOf(7))
	if err != nil {
		t.Fatal(err)
	}
	arrowDel := &lancepb.DeletionFile{FileType: lancepb.DeletionFile_ARROW_ARRAY, ReadVersion: 1, Id: 2, NumDeletedRows: 3}
	if err := bucket.WriteAll(ctx, "_deletions/"+table.DeletionFilePath(1, arrowDel), raw, nil); err != nil {
		t.Fatal(err) // an int64 column, not uint32 offsets
	}

	tests := []struct {
		name   string
		fields []*lancepb.Field
		frag   *lancepb.DataFragment
		want   error // a sentinel; nil means a *FormatError
	}{
		{"missing file", testFields, frag(3, edit(goodFile, func(d *lancepb.DataFile) { d.Path = "gone.lance" })), data.ErrNotFound},
		{"garbage", testFields, frag(3, plant("garbage.lance", []byte("definitely not lance"))), nil},
		{"truncated", testFields, frag(3, plant("truncated.lance", raw[:len(raw)/2])), nil},
		{"tail only", testFields, frag(3, plant("tail.lance", raw[len(raw)-100:])), nil},
		{"empty file", testFields, frag(3, plant("empty.lance", nil)), nil},
		{"legacy garbage", testFields, frag(3, plant("garbage.arrow", []byte("definitely not arrow"))), nil},
		{"Lance bytes named .arrow", testFields, frag(3, plant("lance.arrow", raw)), nil},
		{"wrong length", testFields, frag(4, goodFile), nil},
		{"wrong type", strSchema, frag(3, goodFile), nil},
		{"column out of range", testFields, frag(3, edit(goodFile, func(d *lancepb.DataFile) { d.ColumnIndices = []int32{5} })), nil},
		{"other field's column", testFields, frag(3, edit(goodFile, func(d *lancepb.DataFile) { d.Fields = []int32{fX}; d.ColumnIndices = []int32{0} })), nil},
		{"base path", testFields, frag(3, edit(goodFile, func(d *lancepb.DataFile) { d.BaseId = new(uint32(2)) })), data.ErrUnsupported},
		{"unsupported type", structSchema, frag(3, goodFile), data.ErrUnsupported},
		{"coverage past the end", testFields, withOverlay(frag(3, goodFile), ov(goodFile, roaring.BitmapOf(3))), nil},
		{"coverage beyond values", testFields, withOverlay(frag(5, five.GetFiles()[0]), ov(goodFile, roaring.BitmapOf(0, 1, 2, 4))), nil},
		{"bad coverage", testFields, withOverlay(frag(3, goodFile), &lancepb.DataOverlayFile{DataFile: goodFile,
			Coverage: &lancepb.DataOverlayFile_SharedOffsetBitmap{SharedOffsetBitmap: []byte{1, 2, 3}}}), nil},
		{"no coverage", testFields, withOverlay(frag(3, goodFile), &lancepb.DataOverlayFile{DataFile: goodFile}), nil},
		{"bad deletion file", testFields, withDeletion(frag(3, goodFile), badBitmap), nil},
		{"deletion past the end", testFields, withDeletion(frag(3, goodFile), beyond), nil},
		{"arrow deletion that is a Lance file", testFields, withDeletion(frag(3, goodFile), arrowDel), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := manifestOf(t, tc.fields, tc.frag)
			check := func(what string, err error) {
				t.Helper()
				var fe *data.FormatError
				switch {
				case err == nil:
					t.Errorf("%s: no error", what)
				case tc.want == nil && (!errors.As(err, &fe) || !errors.Is(err, table.ErrMalformed)):
					t.Errorf("%s: error = %v; want a *FormatError", what, err)
				case tc.want != nil && !errors.Is(err, tc.want):
					t.Errorf("%s: error = %v; want %v", what, err, tc.want)
				}
			}
			field := fY
			if tc.frag.GetFiles()[0].GetFields()[0] == fX {
				field = fX
			}
			_, err := s.ReadFragment(ctx, m, 1, []int32{field})
			check("ReadFragment", err)
			_, err = s.ReadCells(ctx, m, field, 1, []uint32{0})
			check("ReadCells", err)
			for b, err := range s.Scan(ctx, m, []int32{field}) {
				if b != nil {
					t.Errorf("Scan yielded a batch")
				}
				check("Scan", err)
			}
		})
	}
}

func TestLookupErrors(t *testing.T) {
	ctx := context.Background()
	s := openMem(t)
	m := manifestOf(t, testFields, &lancepb.DataFragment{Id: 1, PhysicalRows: 2})
	if _, err := s.ReadFragment(ctx, m, 2, []int32{fX}); !errors.Is(err, data.ErrNotFound) {
		t.Errorf("ReadFragment(unknown fragment) error = %v; want ErrNotFound", err)
	}
	if _, err := s.ReadFragment(ctx, m, 1, []int32{99}); !errors.Is(err, data.ErrNotFound) {
		t.Errorf("ReadFragment(unknown field) error = %v; want ErrNotFound", err)
	}
	if _, err := s.ReadCells(ctx, m, fX, 1, []uint32{2}); !errors.Is(err, data.ErrOutOfRange) {
		t.Errorf("ReadCells(offset 2 of 2) error = %v; want ErrOutOfRange", err)
	}
	if _, err := s.DeleteRows(ctx, m, 1, []uint32{2}); !errors.Is(err, data.ErrOutOfRange) {
		t.Errorf("DeleteRows(offset 2 of 2) error = %v; want ErrOutOfRange", err)
	}
	for _, err := range s.Scan(ctx, m, []int32{99}) {
		if !errors.Is(err, data.ErrNotFound) {
			t.Errorf("Scan(unknown field) error = %v; want ErrNotFound", err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, err := range s.Scan(cancelled, m, []int32{fX}) {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Scan(cancelled) error = %v; want context.Canceled", err)
		}
	}
}

func TestWriteErrors(t *testing.T) {
	ctx := context.Background()
	s := openMem(t)
	schema := testSchema(t)
	frag := table.NewFragment(&lancepb.DataFragment{Id: 1, PhysicalRows: 3})
	xs := toArray(fieldArrowType(fX), []any{int64(1), int64(2), int64(3)})
	strs := toArray(fieldArrowType(fS), []any{"a", "b", "c"})
	cells := func(offsets []uint32, vals arrow.Array) map[int32]data.Cells {
		return map[int32]data.Cells{fX: {Offsets: offsets, Values: vals}}
	}
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"no columns", second(s.WriteFragment(ctx, schema, nil)), data.ErrInvalidArgument},
		{"unequal lengths", second(s.WriteFragment(ctx, schema, map[int32]arrow.Array{fX: xs, fY: int64Col(1)})), data.ErrInvalidArgument},
		{"wrong type", second(s.WriteFragment(ctx, schema, map[int32]arrow.Array{fX: strs})), data.ErrInvalidArgument},
		{"null in non-nullable", second(s.WriteFragment(ctx, schema, map[int32]arrow.Array{fX: toArray(fieldArrowType(fX), []any{nil})})), data.ErrInvalidArgument},
		{"unknown field", second(s.WriteFragment(ctx, schema, map[int32]arrow.Array{42: xs})), data.ErrNotFound},
		{"no rows", second(s.WriteFragment(ctx, schema, map[int32]arrow.Array{fY: int64Col()})), data.ErrInvalidArgument},
		{"nil array", second(s.WriteFragment(ctx, schema, map[int32]arrow.Array{fX: nil})), data.ErrInvalidArgument},
		{"column length", second(s.WriteColumns(ctx, schema, frag, map[int32]arrow.Array{fY: int64Col(1, 2)})), data.ErrInvalidArgument},
		{"overlay without cells", second(s.WriteOverlay(ctx, schema, frag, nil)), data.ErrInvalidArgument},
		{"overlay duplicate offset", second(s.WriteOverlay(ctx, schema, frag, cells([]uint32{1, 1}, int64Col(1, 2)))), data.ErrInvalidArgument},
		{"overlay offset out of range", second(s.WriteOverlay(ctx, schema, frag, cells([]uint32{3}, int64Col(1)))), data.ErrOutOfRange},
		{"overlay count mismatch", second(s.WriteOverlay(ctx, schema, frag, cells([]uint32{0, 1}, int64Col(1)))), data.ErrInvalidArgument},
		{"overlay null in non-nullable", second(s.WriteOverlay(ctx, schema, frag, cells([]uint32{0}, toArray(fieldArrowType(fX), []any{nil})))), data.ErrInvalidArgument},
		{"overlay nil values", second(s.WriteOverlay(ctx, schema, frag, cells([]uint32{0}, nil))), data.ErrInvalidArgument},
		{"overlay empty", second(s.WriteOverlay(ctx, schema, frag, cells(nil, int64Col()))), data.ErrInvalidArgument},
	}
	for _, tc := range tests {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: error = %v; want %v", tc.name, tc.err, tc.want)
		}
	}
}

func second[T any](_ T, err error) error { return err }
