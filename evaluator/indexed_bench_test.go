package evaluator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// BenchmarkStaleRead measures the decision core's work for a stale read
// whose precondition failed: EvaluateIndexed (evaluation at the read
// version through the change index, then culprit search) for a
// transaction read `lag` versions behind head. The history is built with
// table.Apply: 16 fragments of 100 rows, field 0 in one file and field 1 in
// another; then `lag` commits, of which 90% append a one-row fragment and
// 10% replace field 1 of one of the 16 fragments (a derived-column writer:
// a change to the fragment the precondition names that does not touch its
// cells, so the culprit search must look past it). Halfway, one commit
// replaces field 0 of fragment 3: the culprit. The precondition protects
// field 0 of fragment 3, rows 0–9.
//
// The index keeps the whole history (limit 64 MiB; index-bytes reports
// what it holds). The "default-limits" variants keep the default 1 MiB, so
// the read version falls before the horizon: evaluation then uses the
// manifest at the read version (Pin; loading it is the committer's cost,
// here free) and the culprit search stops at the horizon.
//
//	go test ./evaluator -run '^$' -bench StaleRead -benchtime 2000x
func BenchmarkStaleRead(b *testing.B) {
	for _, lag := range []uint64{100, 1000, 10000, 100000} {
		h := staleHistory(b, lag)
		pre := []Precondition{CellsUnchanged(func() RowSelection {
			var sb SelectionBuilder
			sb.AddRange(3, 0, 10)
			return sb.Build()
		}(), 0)}
		for _, variant := range []struct {
			name string
			lim  table.IndexLimits
		}{{"whole-history", table.IndexLimits{MaxBytes: 64 << 20}}, {"default-limits", table.IndexLimits{}}} {
			ix := table.NewChangeIndex(h.mans[1], variant.lim)
			for v := uint64(2); v < uint64(len(h.mans)); v++ {
				if err := ix.Advance(h.mans[v], h.uuids[v]); err != nil {
					b.Fatal(err)
				}
			}
			rv := ix.Head().Version() - lag
			opts := IndexedOptions{Pin: func() (*table.Manifest, error) { return h.mans[rv], nil }}
			b.Run(fmt.Sprintf("lag=%d/%s", lag, variant.name), func(b *testing.B) {
				var v Verdict
				for b.Loop() {
					var err error
					if v, err = EvaluateIndexed(b.Context(), ix, rv, pre, opts); err != nil {
						b.Fatal(err)
					}
				}
				if v.Accepted() || len(v.Violations) != 1 {
					b.Fatalf("verdict %v; want one violation", v)
				}
				if x := v.Violations[0]; variant.lim.MaxBytes > 0 && x.Version != h.culprit {
					b.Fatalf("culprit %v; want version %d", x, h.culprit)
				}
				b.ReportMetric(float64(ix.Bytes()), "index-bytes")
				b.ReportMetric(float64(ix.Horizon()), "horizon")
			})
		}
	}
}

type staleHist struct {
	mans    []*table.Manifest
	uuids   []string
	culprit uint64
}

func (h *staleHist) Manifest(_ context.Context, v uint64) (*table.Manifest, error) {
	return h.mans[v], nil
}

func staleHistory(b *testing.B, lag uint64) *staleHist {
	b.Helper()
	rng := rand.New(rand.NewPCG(lag, 1))
	h := &staleHist{mans: []*table.Manifest{nil}, uuids: []string{""}}
	ow := &lancepb.Transaction_Overwrite{Schema: []*lancepb.Field{
		{Type: lancepb.Field_LEAF, Id: 0, ParentId: -1, Name: "x", LogicalType: "int64"},
		{Type: lancepb.Field_LEAF, Id: 1, ParentId: -1, Name: "y", LogicalType: "int64", Nullable: true},
	}}
	for i := range 16 {
		ow.Fragments = append(ow.Fragments, &lancepb.DataFragment{PhysicalRows: 100, Files: []*lancepb.DataFile{
			dataFile(fmt.Sprintf("x-%d.lance", i), 0), dataFile(fmt.Sprintf("y-%d.lance", i), 1),
		}})
	}
	m, err := table.Create(&lancepb.Transaction{Uuid: "create", Operation: &lancepb.Transaction_Overwrite_{Overwrite: ow}})
	if err != nil {
		b.Fatal(err)
	}
	h.mans, h.uuids = append(h.mans, m), append(h.uuids, "create")
	start := lag / 4 // some history before the read version
	for i := range start + lag {
		head := h.mans[len(h.mans)-1]
		txn := &lancepb.Transaction{ReadVersion: head.Version(), Uuid: fmt.Sprintf("txn-%d", head.Version()+1)}
		switch {
		case i == start+lag/2:
			h.culprit = head.Version() + 1
			txn.Operation = replaceField(3, 0, fmt.Sprintf("x-3-%d.lance", i))
		case rng.IntN(10) == 0:
			txn.Operation = replaceField(rng.Uint64N(16), 1, fmt.Sprintf("y-%d.lance", i))
		default:
			txn.Operation = &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{Fragments: []*lancepb.DataFragment{{
				PhysicalRows: 1, Files: []*lancepb.DataFile{dataFile(fmt.Sprintf("a-%d.lance", i), 0, 1)},
			}}}}
		}
		next, err := table.Apply(b.Context(), head, txn, h)
		if err != nil {
			b.Fatalf("v%d: %v", head.Version()+1, err)
		}
		h.mans, h.uuids = append(h.mans, next), append(h.uuids, txn.GetUuid())
	}
	return h
}

func replaceField(frag uint64, field int32, path string) *lancepb.Transaction_DataReplacement_ {
	return &lancepb.Transaction_DataReplacement_{DataReplacement: &lancepb.Transaction_DataReplacement{
		Replacements: []*lancepb.Transaction_DataReplacementGroup{{FragmentId: frag, NewFile: dataFile(path, field)}},
	}}
}
