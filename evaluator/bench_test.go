package evaluator

import (
	"fmt"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// Benchmarks evaluate preconditions read at version 1 against a head at
// version 2 on tables of 10, 10k and 100k fragments. Fragment 0 has 2M
// physical rows, the others 1000; twelve fields live in two files per
// fragment (0–5 and 6–11). Heads:
//
//   - elsewhere: another fragment, not named, changed (the common case:
//     the named fragments are shared by both manifests);
//   - other-field: every named fragment got a new file for field 11 (a
//     field-disjoint writer; the per-field comparison runs);
//   - unrelated-delete: every named fragment deleted its last row, which
//     the point-cell and bitmap preconditions do not protect (the
//     ProtectedRows comparison of deletion vectors runs and accepts); the
//     whole-fragment shapes do protect it, so they measure the reject path.
//
// Cost must not grow with the fragments not named: compare frags=10 with
// frags=100000 in each group.

type benchTable struct {
	pinned *table.Manifest
	dv     table.MemDeletions
	heads  map[string]*table.Manifest
}

var benchTables = map[int]*benchTable{}

const benchFields = 12

func benchFragment(id uint64, rows uint64) *lancepb.DataFragment {
	return &lancepb.DataFragment{
		Id:           id,
		PhysicalRows: rows,
		Files: []*lancepb.DataFile{
			dataFile(fmt.Sprintf("%d-a.lance", id), 0, 1, 2, 3, 4, 5),
			dataFile(fmt.Sprintf("%d-b.lance", id), 6, 7, 8, 9, 10, 11),
		},
	}
}

// named are the fragments the benchmarks name: the first 100.
func benchNamed(n int) []uint64 {
	var ids []uint64
	for i := range min(n, 100) {
		ids = append(ids, uint64(i))
	}
	return ids
}

func getBenchTable(b *testing.B, n int) *benchTable {
	if t, ok := benchTables[n]; ok {
		return t
	}
	pb := &lancepb.Manifest{Version: 1}
	for id := range int32(benchFields) {
		pb.Fields = append(pb.Fields, testField(id, -1, fmt.Sprintf("f%d", id), "int64", true))
	}
	for i := range n {
		rows := uint64(1000)
		if i == 0 {
			rows = 2 << 20
		}
		pb.Fragments = append(pb.Fragments, benchFragment(uint64(i), rows))
	}
	pinned, err := table.FromProto(pb)
	if err != nil {
		b.Fatal(err)
	}
	t := &benchTable{pinned: pinned, dv: table.MemDeletions{}, heads: map[string]*table.Manifest{}}
	edit := func(ids []uint64, change func(*lancepb.DataFragment)) *table.Manifest {
		bl := pinned.Edit()
		bl.Header().Version = 2
		for _, id := range ids {
			f, _ := bl.Fragment(id)
			c := proto.CloneOf(f.Proto())
			change(c)
			if err := bl.Replace(table.NewFragment(c)); err != nil {
				b.Fatal(err)
			}
		}
		return bl.Build()
	}
	t.heads["elsewhere"] = edit([]uint64{uint64(n - 1)}, func(f *lancepb.DataFragment) {
		f.Files[1].Fields[5] = table.Tombstone
		f.Files = append(f.Files, dataFile("new-11.lance", 11))
	})
	t.heads["other-field"] = edit(benchNamed(n), func(f *lancepb.DataFragment) {
		f.Files[1].Fields[5] = table.Tombstone
		f.Files = append(f.Files, dataFile(fmt.Sprintf("%d-new-11.lance", f.Id), 11))
	})
	t.heads["unrelated-delete"] = edit(benchNamed(n), func(f *lancepb.DataFragment) {
		f.DeletionFile = &lancepb.DeletionFile{ReadVersion: 1, Id: f.Id + 1, NumDeletedRows: 1}
		t.dv.Put(f.Id, f.DeletionFile, roaring.BitmapOf(uint32(f.PhysicalRows-1)))
	})
	benchTables[n] = t
	return t
}

func BenchmarkEvaluate(b *testing.B) {
	everyOther := roaring.New()
	for i := uint32(0); i < 2<<20; i += 2 {
		everyOther.Add(i) // 1M offsets, not a run: bitmap containers
	}
	var manyFrags SelectionBuilder
	for _, id := range benchNamed(100) {
		manyFrags.AddWhole(id)
	}
	tenFields := []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	shapes := []struct {
		name string
		pre  []Precondition
	}{
		{"point-cell", []Precondition{CellsUnchanged(Offsets(0, 17), 3)}},
		{"whole-fragment", []Precondition{CellsUnchanged(WholeFragments(0), 3)}},
		{"1M-row-bitmap", []Precondition{CellsUnchanged(FragmentBitmap(0, everyOther), 3)}},
		{"100frags-x-10fields", []Precondition{CellsUnchanged(manyFrags.Build(), tenFields...)}},
	}
	for _, shape := range shapes {
		for _, head := range []string{"elsewhere", "other-field", "unrelated-delete"} {
			for _, n := range []int{10, 10_000, 100_000} {
				if shape.name == "100frags-x-10fields" && n < 100 {
					continue
				}
				b.Run(fmt.Sprintf("%s/%s/frags=%d", shape.name, head, n), func(b *testing.B) {
					t := getBenchTable(b, n)
					h := t.heads[head]
					opts := Options{Deletions: t.dv}
					// A deleted row of a whole fragment is protected: those
					// cases measure the reject path.
					wantAccept := head != "unrelated-delete" || shape.name == "point-cell" || shape.name == "1M-row-bitmap"
					v, err := Evaluate(b.Context(), t.pinned, h, shape.pre, opts)
					if err != nil || v.Accepted() != wantAccept {
						b.Fatalf("%v %v", v, err)
					}
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						v, _ = Evaluate(b.Context(), t.pinned, h, shape.pre, opts)
					}
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "evals/s")
				})
			}
		}
	}
}

// BenchmarkPrepare measures decoding and validating a point-cell
// precondition from its wire form.
func BenchmarkPrepare(b *testing.B) {
	t := getBenchTable(b, 10_000)
	txn := &lancepb.Transaction{ReadVersion: 1, Uuid: "u",
		Operation:     &lancepb.Transaction_DataReplacement_{DataReplacement: &lancepb.Transaction_DataReplacement{}},
		Preconditions: Protos([]Precondition{CellsUnchanged(Offsets(5, 17), 3)})}
	b.ReportAllocs()
	for range b.N {
		if _, err := Prepare(t.pinned, txn, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBlame measures naming the culprit of a point-cell violation
// across a history of 100 versions, the change at the last one.
func BenchmarkBlame(b *testing.B) {
	t := getBenchTable(b, 10_000)
	steps := make([]Step, 0, 100)
	m := t.pinned
	for v := uint64(2); v <= 101; v++ {
		bl := m.Edit()
		bl.Header().Version = v
		id := 50 + v%50 // never fragment 5, until the last version
		if v == 101 {
			id = 5
		}
		f, _ := bl.Fragment(id)
		c := proto.CloneOf(f.Proto())
		c.Files[0].Path = fmt.Sprintf("v%d.lance", v)
		if err := bl.Replace(table.NewFragment(c)); err != nil {
			b.Fatal(err)
		}
		m = bl.Build()
		steps = append(steps, Step{Version: v, TxnUUID: fmt.Sprint(v), Manifest: m})
	}
	pre := []Precondition{CellsUnchanged(Offsets(5, 17), 3)}
	v, err := Evaluate(b.Context(), t.pinned, m, pre, Options{})
	if err != nil || v.Accepted() {
		b.Fatal(v, err)
	}
	b.ReportAllocs()
	for range b.N {
		if got := Blame(b.Context(), t.pinned, steps, pre, v, Options{}); got.Violations[0].Version == 0 {
			b.Fatal(got)
		}
	}
}
