package data_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"gocloud.dev/blob/memblob"

	"cellguard/lancefile"
	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

// allTypes is one nullable field of every logical type the data plane
// stores, plus a non-nullable int64 (field 0).
var allTypes = []string{
	"int64", "bool", "int8", "int16", "int32", "uint8", "uint16", "uint32", "uint64",
	"float", "double", "string", "large_string", "binary", "large_binary",
	"fixed_size_list:float:8", "fixed_size_list:int16:3",
}

func allTypesFields() []*lancepb.Field {
	var fs []*lancepb.Field
	for i, lt := range allTypes {
		fs = append(fs, &lancepb.Field{Name: fmt.Sprintf("c%d", i), Id: int32(i), ParentId: -1, LogicalType: lt, Nullable: i > 0})
	}
	return fs
}

// randomArray returns n random values of type t, about one in nullEvery
// null (never, with nullEvery 0).
func randomArray(t arrow.DataType, n, nullEvery int, rng *rand.Rand) arrow.Array {
	b := array.NewBuilder(memory.NewGoAllocator(), t)
	defer b.Release()
	for i := range n {
		if nullEvery > 0 && rng.IntN(nullEvery) == 0 {
			b.AppendNull()
			continue
		}
		appendRandom(b, rng, i)
	}
	return b.NewArray()
}

func appendRandom(b array.Builder, rng *rand.Rand, i int) {
	switch b := b.(type) {
	case *array.BooleanBuilder:
		b.Append(rng.IntN(2) == 0)
	case *array.Int8Builder:
		b.Append(int8(rng.Int()))
	case *array.Int16Builder:
		b.Append(int16(rng.Int()))
	case *array.Int32Builder:
		b.Append(int32(rng.Int()))
	case *array.Int64Builder:
		b.Append(rng.Int64() - rng.Int64())
	case *array.Uint8Builder:
		b.Append(uint8(rng.Int()))
	case *array.Uint16Builder:
		b.Append(uint16(rng.Int()))
	case *array.Uint32Builder:
		b.Append(rng.Uint32())
	case *array.Uint64Builder:
		b.Append(rng.Uint64())
	case *array.Float32Builder:
		b.Append(rng.Float32()*2 - 1)
	case *array.Float64Builder:
		b.Append(rng.NormFloat64())
	case *array.StringBuilder:
		b.Append(fmt.Sprintf("s%d-%x", i, rng.Uint32()>>rng.IntN(32)))
	case *array.LargeStringBuilder:
		b.Append(fmt.Sprintf("large %d", rng.IntN(1000)))
	case *array.BinaryBuilder:
		v := make([]byte, rng.IntN(12))
		for k := range v {
			v[k] = byte(rng.Int())
		}
		b.Append(v)
	case *array.FixedSizeListBuilder:
		b.Append(true)
		d := int(b.Type().(*arrow.FixedSizeListType).Len())
		for range d {
			appendRandom(b.ValueBuilder(), rng, i)
		}
	default:
		panic(fmt.Sprintf("appendRandom: %T", b))
	}
}

// TestLanceRoundTrip writes a fragment with a column of every type
// (nulls included) in both Lance versions, and reads it back whole, by
// sparse cells, with deletions, through a column replacement and through
// an overlay; every file written must be a Lance file of the dataset's
// version.
func TestLanceRoundTrip(t *testing.T) {
	for _, v := range []lancefile.Version{lancefile.V2_1, lancefile.V2_0} {
		t.Run(v.String(), func(t *testing.T) {
			backends(t, func(t *testing.T, s *data.Store) { roundTrip(t, s, v) })
		})
	}
}

func roundTrip(t *testing.T, s *data.Store, v lancefile.Version) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(v), 9))
	fields := allTypesFields()
	const rows = 3000
	cols := map[int32]arrow.Array{}
	for _, f := range fields {
		at, ok := data.ArrowType(f.GetLogicalType())
		if !ok {
			t.Fatalf("ArrowType(%q) not supported", f.GetLogicalType())
		}
		if lt, ok := data.LogicalType(at); !ok || lt != f.GetLogicalType() {
			t.Errorf("LogicalType(%s) = %q, %v; want %q", at, lt, ok, f.GetLogicalType())
		}
		nulls := 7
		if !f.GetNullable() {
			nulls = 0
		}
		cols[f.GetId()] = randomArray(at, rows, nulls, rng)
	}
	empty := manifestWithFormat(t, fields, v)
	frag, err := s.WriteFragmentFor(ctx, empty, nil, cols)
	if err != nil {
		t.Fatal(err)
	}
	frag.Id = 1
	checkLanceFile(t, s, frag.GetFiles()[0], v, uint64(rows))
	m := manifestWithFormat(t, fields, v, frag)
	ids := make([]int32, len(fields))
	for i, f := range fields {
		ids[i] = f.GetId()
	}

	b, err := s.ReadFragment(ctx, m, 1, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !array.Equal(b.Columns[id], cols[id]) {
			t.Errorf("field %d (%s): read back differs", id, allTypes[id])
		}
	}

	// A few cells, in any order: only their pages are decoded.
	offs := []uint32{2999, 0, 1500, 7, 1500}
	for _, id := range ids {
		got, err := s.ReadCells(ctx, m, id, 1, offs)
		if err != nil {
			t.Fatal(err)
		}
		if want := take(cols[id], offs); !array.Equal(got, want) {
			t.Errorf("ReadCells field %d (%s) = %v; want %v", id, allTypes[id], got, want)
		}
	}

	// Replace two columns, overlay a vector and a string, delete rows.
	vec, str := int32(15), int32(11)
	newCols := map[int32]arrow.Array{
		vec: randomArray(cols[vec].DataType(), rows, 5, rng),
		3:   randomArray(cols[3].DataType(), rows, 5, rng),
	}
	mf, _ := m.Fragment(1)
	df, err := s.WriteColumns(ctx, m.Schema(), mf, newCols)
	if err != nil {
		t.Fatal(err)
	}
	checkLanceFile(t, s, df, v, uint64(rows))
	ovVals := map[int32]data.Cells{
		vec: {Offsets: []uint32{10, 4}, Values: randomArray(cols[vec].DataType(), 2, 0, rng)},
		str: {Offsets: []uint32{4}, Values: randomArray(cols[str].DataType(), 1, 0, rng)},
	}
	ov, err := s.WriteOverlay(ctx, m.Schema(), mf, ovVals)
	if err != nil {
		t.Fatal(err)
	}
	checkLanceFile(t, s, ov.GetDataFile(), v, 2)
	ov.CommittedVersion = 4
	del, err := s.WriteDeletionFile(ctx, 1, 4, roaring.BitmapOf(0, 5, 2999))
	if err != nil {
		t.Fatal(err)
	}
	pb := cloneFragment(frag)
	pb.Files[0].Fields = []int32{0, 1, 2, -2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, -2, 16}
	df.ColumnIndices = []int32{0, 1} // fields 3, 15 in field id order
	pb.Files = append(pb.Files, df)
	pb.Overlays = []*lancepb.DataOverlayFile{ov}
	pb.DeletionFile = del
	m2 := manifestWithFormat(t, fields, v, pb)

	b2, err := s.ReadFragment(ctx, m2, 1, ids)
	if err != nil {
		t.Fatal(err)
	}
	live := roaring.New()
	live.AddRange(0, rows)
	live.AndNot(roaring.BitmapOf(0, 5, 2999))
	if !slices.Equal(b2.Offsets, live.ToArray()) {
		t.Fatalf("live offsets: %d, want %d", len(b2.Offsets), live.GetCardinality())
	}
	for _, id := range ids {
		want := cols[id]
		if nc, ok := newCols[id]; ok {
			want = nc
		}
		want = take(want, b2.Offsets)
		if c, ok := ovVals[id]; ok { // overlay values win at their offsets
			want = overlaid(want, b2.Offsets, c)
		}
		if !array.Equal(b2.Columns[id], want) {
			t.Errorf("after replace/overlay/delete: field %d (%s) differs", id, allTypes[id])
		}
	}
}

// manifestWithFormat is a manifest of the given fields and fragments
// whose data format is Lance version v.
func manifestWithFormat(t *testing.T, fields []*lancepb.Field, v lancefile.Version, frags ...*lancepb.DataFragment) *table.Manifest {
	t.Helper()
	m, err := table.FromProto(&lancepb.Manifest{Version: 3, Fields: fields, Fragments: frags,
		DataFormat: &lancepb.Manifest_DataStorageFormat{FileFormat: "lance", Version: v.String()}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// checkLanceFile checks that the file df names is a Lance file of version
// v with rows rows, and that df says so.
func checkLanceFile(t *testing.T, s *data.Store, df *lancepb.DataFile, v lancefile.Version, rows uint64) {
	t.Helper()
	major, minor := v.Numbers()
	if df.GetFileMajorVersion() != major || df.GetFileMinorVersion() != minor {
		t.Errorf("%s: DataFile version %d.%d; want %d.%d", df.GetPath(), df.GetFileMajorVersion(), df.GetFileMinorVersion(), major, minor)
	}
	b, err := s.Bucket().ReadAll(context.Background(), "data/"+df.GetPath())
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(b)) != df.GetFileSizeBytes() {
		t.Errorf("%s: %d bytes, DataFile says %d", df.GetPath(), len(b), df.GetFileSizeBytes())
	}
	rd, err := lancefile.Open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatalf("%s: %v", df.GetPath(), err)
	}
	if rd.Version() != v || rd.NumRows() != rows {
		t.Errorf("%s: Lance %s file of %d rows; want %s, %d rows", df.GetPath(), rd.Version(), rd.NumRows(), v, rows)
	}
	for i, f := range rd.Fields() {
		if f.GetId() != df.GetFields()[i] {
			t.Errorf("%s: column %d holds field %d, DataFile says %d", df.GetPath(), i, f.GetId(), df.GetFields()[i])
		}
	}
}

// take returns the values of a at offs.
func take(a arrow.Array, offs []uint32) arrow.Array {
	var parts []arrow.Array
	for _, o := range offs {
		parts = append(parts, array.NewSlice(a, int64(o), int64(o)+1))
	}
	if len(parts) == 0 {
		return array.NewSlice(a, 0, 0)
	}
	out, err := array.Concatenate(parts, memory.NewGoAllocator())
	if err != nil {
		panic(err)
	}
	return out
}

// overlaid returns want (values at offsets) with the cells of c replaced.
func overlaid(want arrow.Array, offsets []uint32, c data.Cells) arrow.Array {
	var parts []arrow.Array
	for i, o := range offsets {
		k := slices.Index(c.Offsets, o)
		if k >= 0 {
			parts = append(parts, array.NewSlice(c.Values, int64(k), int64(k)+1))
		} else {
			parts = append(parts, array.NewSlice(want, int64(i), int64(i)+1))
		}
	}
	out, err := array.Concatenate(parts, memory.NewGoAllocator())
	if err != nil {
		panic(err)
	}
	return out
}

// TestFileVersions checks which version each writer picks: a new table's
// fragments are 2.1, a dataset's files follow its data format, a
// fragment's new files follow its old ones, and what cannot be written
// is refused.
func TestFileVersions(t *testing.T) {
	ctx := context.Background()
	s := openMem(t)
	schema := testSchema(t)
	cols := map[int32]arrow.Array{fY: int64Col(1, 2)}
	f, err := s.WriteFragment(ctx, schema, cols)
	if err != nil {
		t.Fatal(err)
	}
	if df := f.GetFiles()[0]; df.GetFileMajorVersion() != 2 || df.GetFileMinorVersion() != 2 {
		t.Errorf("new table file version %d.%d; want 2.2", df.GetFileMajorVersion(), df.GetFileMinorVersion())
	}
	// The table model records what the files say when the table is created.
	created, err := table.Create(&lancepb.Transaction{Uuid: "u", Operation: &lancepb.Transaction_Overwrite_{
		Overwrite: &lancepb.Transaction_Overwrite{Schema: testFields, Fragments: []*lancepb.DataFragment{f}}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := created.Header().GetDataFormat().GetVersion(); got != "2.2" {
		t.Errorf("created table data format %q; want 2.2", got)
	}
	for _, tc := range []struct {
		format string
		want   lancefile.Version
		err    error
	}{
		{"2.0", lancefile.V2_0, nil}, {"2.1", lancefile.V2_1, nil}, {"", 0, data.ErrUnsupported},
		{"0.1", 0, data.ErrUnsupported}, {"2.2", lancefile.V2_2, nil}, {"2.3", 0, data.ErrUnsupported}, {"none", 0, data.ErrUnsupported},
		{"none, 2.0 files", lancefile.V2_0, nil}, {"none, 2.1 files", lancefile.V2_1, nil}, {"none, 2.2 files", lancefile.V2_2, nil},
	} {
		pb := &lancepb.Manifest{Version: 2, Fields: testFields,
			DataFormat: &lancepb.Manifest_DataStorageFormat{FileFormat: "lance", Version: tc.format}}
		if strings.HasPrefix(tc.format, "none") {
			pb.DataFormat = nil
		}
		if minor, ok := map[string]uint32{"none, 2.0 files": 0, "none, 2.1 files": 1, "none, 2.2 files": 2}[tc.format]; ok {
			pb.Fragments = []*lancepb.DataFragment{{Id: 1, PhysicalRows: 2, Files: []*lancepb.DataFile{
				{Path: "a.lance", Fields: []int32{fX}, FileMajorVersion: 2, FileMinorVersion: minor}}}}
		}
		m, err := table.FromProto(pb)
		if err != nil {
			t.Fatal(err)
		}
		got, err := data.FileVersion(m)
		if !errors.Is(err, tc.err) || (err == nil && got != tc.want) {
			t.Errorf("FileVersion(%q) = %v, %v; want %v, %v", tc.format, got, err, tc.want, tc.err)
		}
		frag, err := s.WriteFragmentFor(ctx, m, nil, cols)
		if !errors.Is(err, tc.err) {
			t.Errorf("WriteFragmentFor(%q): %v; want %v", tc.format, err, tc.err)
		}
		if err == nil {
			major, minor := tc.want.Numbers()
			if df := frag.GetFiles()[0]; df.GetFileMajorVersion() != major || df.GetFileMinorVersion() != minor {
				t.Errorf("WriteFragmentFor(%q) wrote %d.%d", tc.format, df.GetFileMajorVersion(), df.GetFileMinorVersion())
			}
		}
	}
	mixed := table.NewFragment(&lancepb.DataFragment{Id: 1, PhysicalRows: 2, Files: []*lancepb.DataFile{
		{Path: "a.lance", Fields: []int32{fX}, FileMajorVersion: 2, FileMinorVersion: 0},
		{Path: "b.lance", Fields: []int32{fS}, FileMajorVersion: 2, FileMinorVersion: 1},
	}})
	if _, err := s.WriteColumns(ctx, schema, mixed, cols); !errors.Is(err, data.ErrUnsupported) {
		t.Errorf("WriteColumns on a fragment mixing versions: %v; want ErrUnsupported", err)
	}
	legacy := table.NewFragment(&lancepb.DataFragment{Id: 1, PhysicalRows: 2, Files: []*lancepb.DataFile{
		{Path: "a.lance", Fields: []int32{fX}, FileMajorVersion: 0, FileMinorVersion: 1}}})
	if _, err := s.WriteOverlay(ctx, schema, legacy, map[int32]data.Cells{fY: {Offsets: []uint32{0}, Values: int64Col(1)}}); !errors.Is(err, data.ErrUnsupported) {
		t.Errorf("WriteOverlay on a legacy fragment: %v; want ErrUnsupported", err)
	}
	for _, v := range lancefile.Versions {
		f, err := s.WriteFragmentVersion(ctx, v, schema, cols)
		major, minor := v.Numbers()
		if err != nil || f.GetFiles()[0].GetFileMajorVersion() != major || f.GetFiles()[0].GetFileMinorVersion() != minor {
			t.Errorf("WriteFragmentVersion(%v): %v, %v; want a %v file", v, f, err, v)
		}
	}
	if _, err := s.WriteFragmentVersion(ctx, lancefile.Version(9), schema, cols); !errors.Is(err, data.ErrInvalidArgument) {
		t.Errorf("WriteFragmentVersion(9): %v; want ErrInvalidArgument", err)
	}
	v20 := table.NewFragment(&lancepb.DataFragment{Id: 1, PhysicalRows: 2, Files: []*lancepb.DataFile{
		{Path: "a.lance", Fields: []int32{fX}, FileMajorVersion: 2, FileMinorVersion: 0}}})
	df, err := s.WriteColumns(ctx, schema, v20, cols)
	if err != nil || df.GetFileMajorVersion() != 2 || df.GetFileMinorVersion() != 0 {
		t.Errorf("WriteColumns on a 2.0 fragment: %v, %v; want a 2.0 file", df, err)
	}
}

// TestLegacyArrowFiles checks that Arrow IPC data files written by an
// older cellguard still read, and that bytes of one format under the
// other's name fail cleanly.
func TestLegacyArrowFiles(t *testing.T) {
	ctx := context.Background()
	bucket := memblob.OpenBucket(nil)
	s := data.NewStore(bucket, data.Options{})
	defer s.Close()
	schema := testSchema(t)
	xs := int64Col(5, 6, 7)
	strs := toArray(fieldArrowType(fS), []any{"a", nil, "c"})
	old, err := s.WriteLegacyFragment(ctx, schema, map[int32]arrow.Array{fX: xs, fS: strs})
	if err != nil {
		t.Fatal(err)
	}
	old.Id = 1
	m := manifestOf(t, testFields, old)
	b, err := s.ReadFragment(ctx, m, 1, []int32{fX, fS})
	if err != nil {
		t.Fatal(err)
	}
	if !array.Equal(b.Columns[fX], xs) || !array.Equal(b.Columns[fS], strs) {
		t.Errorf("legacy read: %v %v", b.Columns[fX], b.Columns[fS])
	}
	// New columns for a legacy fragment are Lance files.
	mf, _ := m.Fragment(1)
	df, err := s.WriteColumns(ctx, schema, mf, map[int32]arrow.Array{fY: int64Col(1, 2, 3)})
	if err != nil {
		t.Fatal(err)
	}
	checkLanceFile(t, s, df, lancefile.V2_1, 3)

	// Arrow bytes under a Lance name are refused, not misread.
	raw, err := bucket.ReadAll(ctx, "data/"+old.GetFiles()[0].GetPath())
	if err != nil {
		t.Fatal(err)
	}
	if err := bucket.WriteAll(ctx, "data/ipc.lance", raw, nil); err != nil {
		t.Fatal(err)
	}
	bad := cloneFragment(old)
	bad.Files[0].Path = "ipc.lance"
	var fe *data.FormatError
	if _, err := s.ReadFragment(ctx, manifestOf(t, testFields, bad), 1, []int32{fX}); !errors.As(err, &fe) || !errors.Is(err, lancefile.ErrMalformed) {
		t.Errorf("Arrow IPC bytes named .lance: %v; want a *FormatError wrapping lancefile.ErrMalformed", err)
	}
}

// TestLargeFragment reads a fragment whose columns span several pages,
// whole and by a few cells, with the cache off (so each read goes to the
// file's pages).
func TestLargeFragment(t *testing.T) {
	ctx := context.Background()
	for _, cache := range []int64{0, -1} {
		s := data.NewStore(memblob.OpenBucket(nil), data.Options{CacheBytes: cache})
		defer s.Close()
		rng := rand.New(rand.NewPCG(1, 2))
		const rows = 700_000 // 5.6 MB of int64: two pages
		ys := randomArray(arrow.PrimitiveTypes.Int64, rows, 50, rng)
		f, err := s.WriteFragment(ctx, testSchema(t), map[int32]arrow.Array{fY: ys})
		if err != nil {
			t.Fatal(err)
		}
		f.Id = 1
		m := manifestOf(t, testFields, f)
		for range 2 {
			b, err := s.ReadFragment(ctx, m, 1, []int32{fY, fX})
			if err != nil {
				t.Fatal(err)
			}
			if !array.Equal(b.Columns[fY], ys) || b.Columns[fX].NullN() != rows {
				t.Fatalf("cache %d: large fragment read back differs", cache)
			}
			offs := []uint32{rows - 1, 3, 600_000, 524_288, 524_287}
			got, err := s.ReadCells(ctx, m, fY, 1, offs)
			if err != nil {
				t.Fatal(err)
			}
			if !array.Equal(got, take(ys, offs)) {
				t.Errorf("cache %d: cells %v = %v; want %v", cache, offs, got, take(ys, offs))
			}
		}
	}
}

// TestFailedWriteLeavesNothing makes the Lance writer refuse a column
// after it has already streamed pages of another one (a vector holding a
// null item), and checks that the write is aborted: an ErrInvalidArgument
// error and no object left in the store.
func TestFailedWriteLeavesNothing(t *testing.T) {
	backends(t, func(t *testing.T, s *data.Store) {
		ctx := context.Background()
		fields := []*lancepb.Field{
			{Name: "x", Id: 0, ParentId: -1, LogicalType: "int64"},
			{Name: "v", Id: 1, ParentId: -1, LogicalType: "fixed_size_list:float:2", Nullable: true},
		}
		schema, err := table.NewSchema(fields)
		if err != nil {
			t.Fatal(err)
		}
		const rows = 700_000 // more than one page of x
		xs := randomArray(arrow.PrimitiveTypes.Int64, rows, 0, rand.New(rand.NewPCG(1, 1)))
		vt, _ := data.ArrowType("fixed_size_list:float:2")
		vb := array.NewFixedSizeListBuilderWithField(memory.NewGoAllocator(), 2, vt.(*arrow.FixedSizeListType).ElemField())
		for i := range rows {
			vb.Append(true)
			vb.ValueBuilder().(*array.Float32Builder).Append(float32(i))
			if i == rows-1 {
				vb.ValueBuilder().AppendNull() // a null item: Lance cannot store it
			} else {
				vb.ValueBuilder().(*array.Float32Builder).Append(1)
			}
		}
		_, err = s.WriteFragment(ctx, schema, map[int32]arrow.Array{0: xs, 1: vb.NewArray()})
		if !errors.Is(err, data.ErrInvalidArgument) {
			t.Fatalf("write with a null vector item: %v; want ErrInvalidArgument", err)
		}
		it := s.Bucket().List(nil)
		for {
			obj, err := it.Next(ctx)
			if err != nil {
				break
			}
			t.Errorf("failed write left %s behind", obj.Key)
		}
	})
}
