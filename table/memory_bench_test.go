package table_test

import (
	"fmt"
	"runtime"
	"testing"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// BenchmarkFragmentListBytes reports what a manifest's fragment structures
// (lookup by id and scan order) cost per fragment: the heap a head built by
// appends keeps alive beyond its fragments, which exist beforehand.
// "appended" builds the head one append per version, as the committer does;
// "decoded" builds it from its protobuf form, as a checkpoint load does.
func BenchmarkFragmentListBytes(b *testing.B) {
	const n = 300
	base, err := table.FromProto(&lancepb.Manifest{})
	if err != nil {
		b.Fatal(err)
	}
	pbs := make([]*lancepb.DataFragment, n)
	frags := make([]*table.Fragment, n)
	for i := range frags {
		pbs[i] = apFrag(uint64(i), 1000)
		frags[i] = table.NewFragment(pbs[i])
	}
	build := map[string]func() (*table.Manifest, error){
		"appended": func() (*table.Manifest, error) {
			m := base
			for _, f := range frags {
				bl := m.Edit()
				if err := bl.Append(f); err != nil {
					return nil, err
				}
				m = bl.Build()
			}
			return m, nil
		},
		"decoded": func() (*table.Manifest, error) {
			return table.FromProto(&lancepb.Manifest{Fragments: pbs})
		},
	}
	for _, name := range []string{"appended", "decoded"} {
		b.Run(name, func(b *testing.B) {
			var perFrag float64
			for b.Loop() {
				before := heapInUse()
				m, err := build[name]()
				if err != nil {
					b.Fatal(err)
				}
				perFrag = float64(heapInUse()-before) / n
				runtime.KeepAlive(m)
			}
			b.ReportMetric(perFrag, "B/fragment")
		})
	}
}

// heapInUse returns the live heap after a full collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// BenchmarkPackedHead measures a quiet head's round trip: packing a
// manifest of 256 one-file fragments (Packed) and decoding it at its
// next read, with the bytes the packed form holds; and an Append onto
// it followed by packing the new head, with and without reading the
// head first.
//
//	go test ./table -run '^$' -bench PackedHead
func BenchmarkPackedHead(b *testing.B) {
	pb := &lancepb.Manifest{Fields: []*lancepb.Field{{Id: 0, Name: "id", ParentId: -1, LogicalType: "int64"}}}
	for i := range 256 {
		pb.Fragments = append(pb.Fragments, &lancepb.DataFragment{Id: uint64(i), PhysicalRows: 1000, Files: []*lancepb.DataFile{{
			Path: fmt.Sprintf("%016x%016x.lance", uint64(i)*0x9e3779b97f4a7c15, uint64(i+1)*0xbf58476d1ce4e5b9), Fields: []int32{0}, ColumnIndices: []int32{0}, FileMajorVersion: 2, FileMinorVersion: 1,
		}}})
	}
	m, err := table.FromProto(pb)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("pack", func(b *testing.B) {
		var p *table.Manifest
		for b.Loop() {
			p = m.Packed()
		}
		b.ReportMetric(float64(p.PackedBytes()), "packed-B")
	})
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			p := m.Packed()
			b.StartTimer()
			p.Fragment(0)
		}
	})
	// An Append onto the packed head and the head packed again, as a
	// quiet dataset appended to once in a while goes through, in runs of
	// 64 appends from the 256-fragment head (chunk merges included).
	// decoded: the head read first, so that the Append builds on all
	// its fragments and Packed packs them all; packed: the Append adds
	// to the packed fragments, and Packed packs what it added.
	for _, read := range []bool{true, false} {
		name := "append-packed"
		if read {
			name = "append-decoded"
		}
		b.Run(name, func(b *testing.B) {
			base := m.Packed()
			head, i := base, 0
			for b.Loop() {
				if i%64 == 0 {
					head = base
				}
				if read {
					head.Fragment(0)
				}
				txn := &lancepb.Transaction{ReadVersion: head.Version(), Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{Fragments: []*lancepb.DataFragment{{
					PhysicalRows: 1000, Files: []*lancepb.DataFile{{Path: fmt.Sprintf("%016x.lance", uint64(i)*0x9e3779b97f4a7c15), Fields: []int32{0}, ColumnIndices: []int32{0}, FileMajorVersion: 2, FileMinorVersion: 1}},
				}}}}}
				next, err := table.Apply(b.Context(), head, txn, nil)
				if err != nil {
					b.Fatal(err)
				}
				head = next.Packed()
				i++
			}
			b.ReportMetric(float64(head.PackedBytes()), "packed-B")
		})
	}
}
