package data_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
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
