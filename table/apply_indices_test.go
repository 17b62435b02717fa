package table_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// ixBase is version 1 of fragments 1, 2, 3 with xi (field x, uuid a1) and
// yi (field y, uuid b1), both covering {1,2}.
func ixBase(t *testing.T) *table.Manifest {
	t.Helper()
	w := cfNewWorld(t, cfBaseFrag(1), cfBaseFrag(2), cfBaseFrag(3))
	m, err := w.versions[0].WithIndices(&lancepb.IndexSection{Indices: []*lancepb.IndexMetadata{
		ixIndex(t, "xi", "a1", cfX, 1, 2), ixIndex(t, "yi", "b1", cfY, 1, 2),
	}}, table.IndexRulesLance8)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func ixApply(t *testing.T, m *table.Manifest, txn *lancepb.Transaction) (*table.Manifest, error) {
	t.Helper()
	txn = proto.CloneOf(txn)
	txn.ReadVersion = m.Version()
	return table.Apply(t.Context(), m, txn, nil)
}

// TestApplyIndexRules: what each operation cellguard carries out beyond
// the fixtures does to the index section.
func TestApplyIndexRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		txn  func(t *testing.T) *lancepb.Transaction
		want string
	}{
		{"overlay of y on fragment 2 leaves yi", func(t *testing.T) *lancepb.Transaction { return cfOverlayTxn(t, 2, []int32{cfY}, 0) }, "xi:a1{1,2} yi:b1{1}"},
		{"replacement of x on fragment 1 leaves xi", func(t *testing.T) *lancepb.Transaction { return cfReplacement(1, cfX) }, "xi:a1{2} yi:b1{1,2}"},
		{"replacement on an unindexed fragment", func(t *testing.T) *lancepb.Transaction { return cfReplacement(3, cfX) }, "xi:a1{1,2} yi:b1{1,2}"},
		{"overwrite empties the list", func(t *testing.T) *lancepb.Transaction { return cfOverwrite(nil) }, ""},
		{"project dropping y drops yi", func(t *testing.T) *lancepb.Transaction { return cfProject(true, cfID, cfX, cfS, cfSA) }, "xi:a1{1,2}"},
		{"delete of fragments 1 and 2 keeps the empty definitions", func(t *testing.T) *lancepb.Transaction { return cfDeleteTxn(nil, 1, 2) }, "xi:a1{1,2} yi:b1{1,2}"},
		{"merge that rewrites x's file in fragment 1", func(t *testing.T) *lancepb.Transaction {
			f1 := cfBaseFrag(1)
			f1.Files = []*lancepb.DataFile{cfDataFile("f1.lance", cfID, -2, cfY), cfDataFile("x-new.lance", cfX)}
			return cfTx("merge", &lancepb.Transaction_Merge{Fragments: []*lancepb.DataFragment{f1, cfBaseFrag(2), cfBaseFrag(3)}, Schema: cfTestFields(), PreservesNullability: true})
		}, "xi:a1{2} yi:b1{1,2}"},
		{"append leaves coverage alone", func(t *testing.T) *lancepb.Transaction { return cfRepresentative(t, table.OpAppend, 1) }, "xi:a1{1,2} yi:b1{1,2}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, err := ixApply(t, ixBase(t), tc.txn(t))
			if err != nil {
				t.Fatal(err)
			}
			if got := ixSection(next); got != tc.want {
				t.Errorf("index section %q, want %q", got, tc.want)
			}
		})
	}
}

// TestApplyIndexVectorEmpty: a vector index none of whose fragments is
// left leaves the manifest under Lance 8's rules and stays under Lance 12's.
func TestApplyIndexVectorEmpty(t *testing.T) {
	for _, rules := range []table.IndexRules{table.IndexRulesLance8, table.IndexRulesLance12} {
		vi := ixIndex(t, "vi", "c1", cfY, 1)
		vi.IndexDetails = &anypb.Any{TypeUrl: "/lance.index.pb.VectorIndexDetails"}
		m, err := ixBase(t).WithIndices(&lancepb.IndexSection{Indices: []*lancepb.IndexMetadata{vi}}, rules)
		if err != nil {
			t.Fatal(err)
		}
		next, err := ixApply(t, m, cfDeleteTxn(nil, 1))
		if err != nil {
			t.Fatal(err)
		}
		want := map[table.IndexRules]string{table.IndexRulesLance8: "", table.IndexRulesLance12: "vi:c1{1}"}[rules]
		if got := ixSection(next); got != want || next.IndexRules() != rules {
			t.Errorf("%s: %q (%s), want %q", rules, got, next.IndexRules(), want)
		}
	}
}

// TestApplyIndexRefusals: what the model cannot carry on as Lance would
// is an invalid transaction, never a silently wrong index section.
func TestApplyIndexRefusals(t *testing.T) {
	noBitmap := ixIndex(t, "ni", "c1", cfY)
	noBitmap.FragmentBitmap = nil
	rewrite := func(old, new string, frags ...uint64) *lancepb.Transaction {
		txn := cfRewrite(frags...)
		txn.GetRewrite().RewrittenIndices = []*lancepb.Transaction_Rewrite_RewrittenIndex{{OldId: ixUUID(old), NewId: ixUUID(new)}}
		return txn
	}
	twice := rewrite("a1", "a2", 1, 2)
	twice.GetRewrite().RewrittenIndices = append(twice.GetRewrite().RewrittenIndices, &lancepb.Transaction_Rewrite_RewrittenIndex{OldId: ixUUID("a1"), NewId: ixUUID("a3")})
	for _, tc := range []struct {
		name, msg string
		txn       *lancepb.Transaction
	}{
		{"new index without a bitmap", "no fragment bitmap", cfCreateIndex([]*lancepb.IndexMetadata{noBitmap})},
		{"new segment overlapping a live one", "covers fragments [2]", cfCreateIndex([]*lancepb.IndexMetadata{ixIndex(t, "xi", "a9", cfX, 2, 3)})},
		{"new index uuid twice", "appears twice", cfCreateIndex([]*lancepb.IndexMetadata{ixIndex(t, "ni", "c1", cfY, 3), ixIndex(t, "mi", "c1", cfY, 3)})},
		{"compaction splitting a covered group", "splits", rewrite("a1", "a2", 2, 3)},
		{"index remapped twice", "rewritten twice", twice},
		{"rewritten index without a new uuid", "16-byte new uuid", rewrite("a1", "", 1, 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "rewritten index without a new uuid" {
				tc.txn.GetRewrite().RewrittenIndices[0].NewId = nil
			}
			_, err := ixApply(t, ixBase(t), tc.txn)
			if !errors.Is(err, table.ErrInvalidTransaction) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Apply = %v, want ErrInvalidTransaction mentioning %q", err, tc.msg)
			}
		})
	}
	if _, err := ixBase(t).WithIndices(&lancepb.IndexSection{Indices: []*lancepb.IndexMetadata{ixIndex(t, "xi", "a1", cfX, 1), ixIndex(t, "yi", "a1", cfY, 1)}}, table.IndexRulesLance8); !errors.Is(err, table.ErrMalformed) {
		t.Errorf("WithIndices(duplicate uuid) = %v, want ErrMalformed", err)
	}
	bad := ixIndex(t, "xi", "a1", cfX, 1)
	bad.FragmentBitmap = []byte{1, 2, 3}
	if _, err := ixBase(t).WithIndices(&lancepb.IndexSection{Indices: []*lancepb.IndexMetadata{bad}}, table.IndexRulesLance8); !errors.Is(err, table.ErrMalformed) {
		t.Errorf("WithIndices(undecodable bitmap) = %v, want ErrMalformed", err)
	}
}

// TestIndexRulesFromWriter: a manifest's rules come from its writer.
func TestIndexRulesFromWriter(t *testing.T) {
	for v, want := range map[string]table.IndexRules{"8.0.0": table.IndexRulesLance8, "12.0.0": table.IndexRulesLance12, "13.1.0": table.IndexRulesLance12, "": table.IndexRulesLance8, "x": table.IndexRulesLance8} {
		m, err := table.FromProto(&lancepb.Manifest{Version: 1, Fields: cfTestFields(), WriterVersion: &lancepb.Manifest_WriterVersion{Library: "lance", Version: v}})
		if err != nil {
			t.Fatal(err)
		}
		if m.IndexRules() != want {
			t.Errorf("writer lance %q: rules %s, want %s", v, m.IndexRules(), want)
		}
	}
}
