package data_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"gocloud.dev/blob/memblob"

	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

// BenchmarkScan scans a table of 8 fragments of 64Ki rows, reading an
// int64, a double and a string column, with the file cache warm or off,
// and with no overlays or deletions (the zero-copy path) or with 1% of rows
// deleted and two overlays per fragment covering 5% of the cells each.
func BenchmarkScan(b *testing.B) {
	const frags, rows = 8, 1 << 16
	for _, overlaid := range []bool{false, true} {
		for _, cache := range []int64{0, -1} {
			name := fmt.Sprintf("overlays=%v/cache=%v", overlaid, cache == 0)
			b.Run(name, func(b *testing.B) {
				ctx := context.Background()
				s := data.NewStore(memblob.OpenBucket(nil), data.Options{CacheBytes: cache})
				defer s.Close()
				m := benchTable(b, s, frags, rows, overlaid)
				fields := []int32{fX, fF, fS}
				b.ResetTimer()
				n := 0
				for b.Loop() {
					for batch, err := range s.Scan(ctx, m, fields) {
						if err != nil {
							b.Fatal(err)
						}
						n += batch.Len()
					}
				}
				b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}

func benchTable(b *testing.B, s *data.Store, frags, rows int, overlaid bool) *table.Manifest {
	ctx := context.Background()
	schema := testSchema(b)
	rng := rand.New(rand.NewPCG(3, 4))
	xs, fs, ss := make([]any, rows), make([]any, rows), make([]any, rows)
	for i := range rows {
		xs[i], fs[i], ss[i] = rng.Int64(), rng.Float64(), fmt.Sprintf("value-%d", i)
	}
	cols := map[int32]arrow.Array{fX: toArray(fieldArrowType(fX), xs), fF: toArray(fieldArrowType(fF), fs), fS: toArray(fieldArrowType(fS), ss)}
	var pbs []*lancepb.DataFragment
	for id := range frags {
		pb, err := s.WriteFragment(ctx, schema, cols)
		if err != nil {
			b.Fatal(err)
		}
		pb.Id = uint64(id)
		if overlaid {
			frag := table.NewFragment(pb)
			for v := range 2 {
				offs := make([]uint32, rows/20)
				vals := make([]any, len(offs))
				for i := range offs {
					offs[i] = uint32(i*20 + v)
					vals[i] = int64(i)
				}
				ov, err := s.WriteOverlay(ctx, schema, frag, map[int32]data.Cells{fX: {Offsets: offs, Values: toArray(fieldArrowType(fX), vals)}})
				if err != nil {
					b.Fatal(err)
				}
				ov.CommittedVersion = uint64(v + 1)
				pb.Overlays = append(pb.Overlays, ov)
			}
			del := roaring.New()
			for i := 0; i < rows; i += 100 {
				del.Add(uint32(i))
			}
			df, err := s.WriteDeletionFile(ctx, pb.Id, 2, del)
			if err != nil {
				b.Fatal(err)
			}
			pb.DeletionFile = df
		}
		pbs = append(pbs, pb)
	}
	m, err := table.FromProto(&lancepb.Manifest{Version: 3, Fields: testFields, Fragments: pbs})
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// benchFields are the columns the Lance files are compared with the Arrow
// IPC files they replace on: an int64 and a float32, 1Mi rows (12 MiB).
var benchFields = []*lancepb.Field{
	{Name: "id", Id: 0, ParentId: -1, LogicalType: "int64"},
	{Name: "x", Id: 1, ParentId: -1, LogicalType: "float", Nullable: true},
}

const benchRows = 1 << 20

func benchColumns() map[int32]arrow.Array {
	ids := array.NewInt64Builder(memory.NewGoAllocator())
	xs := array.NewFloat32Builder(memory.NewGoAllocator())
	for i := range benchRows {
		ids.Append(int64(i) * 7)
		xs.Append(float32(i) / 3)
	}
	return map[int32]arrow.Array{0: ids.NewArray(), 1: xs.NewArray()}
}

// benchStores are the two stores benchmarked: a file:// store in a temp
// dir and a mem:// store, both with the caches off so that every read
// decodes the file.
func benchStores(b *testing.B) map[string]*data.Store {
	file, err := data.OpenWith(context.Background(), "file://"+b.TempDir(), data.Options{CacheBytes: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { file.Close() })
	mem := data.NewStore(memblob.OpenBucket(nil), data.Options{CacheBytes: -1})
	b.Cleanup(func() { mem.Close() })
	return map[string]*data.Store{"file": file, "mem": mem}
}

// benchFormats writes a fragment of cols in one format: Lance 2.1, Lance
// 2.0 (a dataset whose data format is 2.0) or the Arrow IPC file the data
// plane wrote before.
var benchFormats = []struct {
	name  string
	write func(ctx context.Context, s *data.Store, schema *table.Schema, cols map[int32]arrow.Array) (*lancepb.DataFragment, error)
}{
	{"lance2.1", func(ctx context.Context, s *data.Store, schema *table.Schema, cols map[int32]arrow.Array) (*lancepb.DataFragment, error) {
		return s.WriteFragment(ctx, schema, cols)
	}},
	{"lance2.0", func(ctx context.Context, s *data.Store, schema *table.Schema, cols map[int32]arrow.Array) (*lancepb.DataFragment, error) {
		m, err := table.FromProto(&lancepb.Manifest{Version: 1, Fields: benchFields,
			DataFormat: &lancepb.Manifest_DataStorageFormat{FileFormat: "lance", Version: "2.0"}})
		if err != nil {
			return nil, err
		}
		return s.WriteFragmentFor(ctx, m, schema, cols)
	}},
	{"arrow-ipc", func(ctx context.Context, s *data.Store, schema *table.Schema, cols map[int32]arrow.Array) (*lancepb.DataFragment, error) {
		return s.WriteLegacyFragment(ctx, schema, cols)
	}},
}

// BenchmarkWriteFragment writes 1Mi rows of int64 + float32 as one data
// file through the data plane, in each format, to each store.
func BenchmarkWriteFragment(b *testing.B) {
	ctx := context.Background()
	cols := benchColumns()
	schema, err := table.NewSchema(benchFields)
	if err != nil {
		b.Fatal(err)
	}
	for name, s := range benchStores(b) {
		for _, f := range benchFormats {
			b.Run(name+"/"+f.name, func(b *testing.B) {
				b.SetBytes(benchRows * 12)
				for b.Loop() {
					if _, err := f.write(ctx, s, schema, cols); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkReadFragment reads both columns of every row of that fragment
// through the data plane (ReadFragment, caches off), in each format, from
// each store.
func BenchmarkReadFragment(b *testing.B) {
	ctx := context.Background()
	cols := benchColumns()
	schema, err := table.NewSchema(benchFields)
	if err != nil {
		b.Fatal(err)
	}
	for name, s := range benchStores(b) {
		for _, f := range benchFormats {
			b.Run(name+"/"+f.name, func(b *testing.B) {
				pb, err := f.write(ctx, s, schema, cols)
				if err != nil {
					b.Fatal(err)
				}
				m, err := table.FromProto(&lancepb.Manifest{Version: 2, Fields: benchFields, Fragments: []*lancepb.DataFragment{pb}})
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(benchRows * 12)
				for b.Loop() {
					batch, err := s.ReadFragment(ctx, m, 0, []int32{0, 1})
					if err != nil {
						b.Fatal(err)
					}
					if batch.Len() != benchRows {
						b.Fatalf("read %d rows", batch.Len())
					}
				}
			})
		}
	}
}
