package data_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"

	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

// TestOverlayPrecedence checks Lance's resolution rules on a hand-built
// fragment whose overlay list is not in committed-version order.
func TestOverlayPrecedence(t *testing.T) {
	ctx := context.Background()
	s := openMem(t)
	schema := testSchema(t)
	int64s := func(v ...any) arrow.Array { return toArray(fieldArrowType(fY), v) }

	base, err := s.WriteFragment(ctx, schema, map[int32]arrow.Array{fY: int64s(int64(10), int64(20), int64(30), int64(40))})
	if err != nil {
		t.Fatal(err)
	}
	base.Id = 7
	frag := table.NewFragment(base)
	ov := func(version uint64, offsets []uint32, vals ...any) *lancepb.DataOverlayFile {
		t.Helper()
		o, err := s.WriteOverlay(ctx, schema, frag, map[int32]data.Cells{fY: {Offsets: offsets, Values: int64s(vals...)}})
		if err != nil {
			t.Fatal(err)
		}
		o.CommittedVersion = version
		return o
	}
	a := ov(5, []uint32{1, 0}, int64(101), int64(100)) // given out of order
	b := ov(3, []uint32{0, 1, 2}, int64(200), int64(201), int64(202))
	c := ov(5, []uint32{1}, nil)
	d := ov(9, []uint32{3}, int64(400))
	d.DataFile.Fields[0] = table.Tombstone // superseded: must be ignored
	base.Overlays = []*lancepb.DataOverlayFile{a, b, c, d}

	m, err := table.FromProto(&lancepb.Manifest{Version: 9, Fields: testFields, Fragments: []*lancepb.DataFragment{base}})
	if err != nil {
		t.Fatal(err)
	}
	// Offset 0: a (version 5) beats b (version 3) though b is later in the
	// list. Offset 1: c beats a, same version, later entry; its value is
	// null. Offset 2: only b. Offset 3: d is tombstoned, so the base.
	want := []any{int64(100), nil, int64(202), int64(40)}
	b1, err := s.ReadFragment(ctx, m, 7, []int32{fY, fX})
	if err != nil {
		t.Fatal(err)
	}
	if got := fromArray(b1.Columns[fY]); !reflect.DeepEqual(got, want) {
		t.Errorf("y = %v; want %v", got, want)
	}
	if got := fromArray(b1.Columns[fX]); !reflect.DeepEqual(got, []any{nil, nil, nil, nil}) {
		t.Errorf("x (in no file) = %v; want all null", got)
	}
	if got, want := b1.RowAddress(3), uint64(7)<<32|3; got != want {
		t.Errorf("RowAddress(3) = %#x; want %#x", got, want)
	}
	cells, err := s.ReadCells(ctx, m, fY, 7, []uint32{3, 1, 0, 2, 0})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fromArray(cells), []any{int64(40), nil, int64(100), int64(202), int64(100)}; !reflect.DeepEqual(got, want) {
		t.Errorf("ReadCells(3, 1, 0, 2, 0) = %v; want %v", got, want)
	}

	// Deleting offset 0 hides it, overlays notwithstanding.
	del, err := s.DeleteRows(ctx, m, 7, []uint32{0})
	if err != nil {
		t.Fatal(err)
	}
	withDel := cloneFragment(base)
	withDel.DeletionFile = del
	m2, err := table.FromProto(&lancepb.Manifest{Version: 10, Fields: testFields, Fragments: []*lancepb.DataFragment{withDel}})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := s.ReadFragment(ctx, m2, 7, []int32{fY})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b2.Offsets, []uint32{1, 2, 3}) || !reflect.DeepEqual(fromArray(b2.Columns[fY]), want[1:]) {
		t.Errorf("after delete: offsets %v, y %v; want [1 2 3], %v", b2.Offsets, fromArray(b2.Columns[fY]), want[1:])
	}
}

// TestOverlayCoverage checks the coverage form WriteOverlay picks and that
// values sit at the rank of their offset.
func TestOverlayCoverage(t *testing.T) {
	ctx := context.Background()
	s := openMem(t)
	schema := testSchema(t)
	frag := table.NewFragment(&lancepb.DataFragment{Id: 1, PhysicalRows: 10})

	shared, err := s.WriteOverlay(ctx, schema, frag, map[int32]data.Cells{
		fY: {Offsets: []uint32{9, 2}, Values: toArray(fieldArrowType(fY), []any{int64(9), int64(2)})},
		fS: {Offsets: []uint32{2, 9}, Values: toArray(fieldArrowType(fS), []any{"two", "nine"})},
	})
	if err != nil {
		t.Fatal(err)
	}
	bm := roaring.BitmapOf(2, 9)
	if got := shared.GetSharedOffsetBitmap(); got == nil || !decode(t, got).Equals(bm) {
		t.Errorf("shared coverage = %v; want bitmap {2, 9}", shared.GetCoverage())
	}
	if got, want := shared.GetDataFile().GetFields(), []int32{fS, fY}; !slices.Equal(got, want) {
		t.Errorf("fields = %v; want %v", got, want)
	}
	if v := shared.GetDataFile(); v.GetFileMajorVersion() != 2 || v.GetFileMinorVersion() != 2 || !strings.HasSuffix(v.GetPath(), ".lance") ||
		!slices.Equal(v.GetColumnIndices(), []int32{0, 1}) || v.GetFileSizeBytes() == 0 || shared.GetCommittedVersion() != 0 {
		t.Errorf("overlay data file = %v", v)
	}

	sparse, err := s.WriteOverlay(ctx, schema, frag, map[int32]data.Cells{
		fY: {Offsets: []uint32{4}, Values: toArray(fieldArrowType(fY), []any{int64(4)})},
		fS: {Offsets: []uint32{8, 0, 3}, Values: toArray(fieldArrowType(fS), []any{"eight", "zero", "three"})},
	})
	if err != nil {
		t.Fatal(err)
	}
	fc := sparse.GetFieldCoverage().GetOffsetBitmaps()
	if len(fc) != 2 || !decode(t, fc[0]).Equals(roaring.BitmapOf(0, 3, 8)) || !decode(t, fc[1]).Equals(roaring.BitmapOf(4)) {
		t.Fatalf("field coverage = %v; want [{0 3 8} {4}]", sparse.GetCoverage())
	}
	pb := cloneFragment(frag.Proto())
	pb.Overlays = []*lancepb.DataOverlayFile{shared, sparse}
	m, err := table.FromProto(&lancepb.Manifest{Version: 2, Fields: testFields, Fragments: []*lancepb.DataFragment{pb}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.ReadFragment(ctx, m, 1, []int32{fS, fY})
	if err != nil {
		t.Fatal(err)
	}
	wantS := []any{"zero", nil, "two", "three", nil, nil, nil, nil, "eight", "nine"}
	wantY := []any{nil, nil, int64(2), nil, int64(4), nil, nil, nil, nil, int64(9)}
	if got := fromArray(b.Columns[fS]); !reflect.DeepEqual(got, wantS) {
		t.Errorf("s = %v; want %v", got, wantS)
	}
	if got := fromArray(b.Columns[fY]); !reflect.DeepEqual(got, wantY) {
		t.Errorf("y = %v; want %v", got, wantY)
	}
}

func decode(t *testing.T, b []byte) *roaring.Bitmap {
	t.Helper()
	bm, err := table.DecodeBitmap(b)
	if err != nil {
		t.Fatal(err)
	}
	return bm
}
