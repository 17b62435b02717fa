package table_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// The index grid: ours (row) is staged at version 1 and decided after
// theirs (column) committed at version 2. Version 1 has fragments 1, 2, 3
// and two indices, xi on field x (uuid a1) and yi on field y (uuid b1),
// both covering {1,2}. Each cell is ours' resolution after Rebase and, when
// it commits, the index section of the version it makes (name:uuid{bitmap},
// in section order): what Apply's index rules and the conflict rules give
// together.
//
// Kinds: App appends a fragment; Del deletes rows of fragment 1; UpC
// rewrites y in fragment 1 in place (Update, REWRITE_COLUMNS); Rew compacts
// fragments 1 and 2 into 200, remapping xi a1→a2 and yi b1→b2; New builds
// index ni on y over {1,2,3}; Rpl replaces xi a1 by xi a3 over {1,2,3};
// Drp drops yi b1; Prj drops field y; DRp replaces y in fragment 1.
const ixGrid = `
App×App ok xi:a1{1,2} yi:b1{1,2}
App×Del ok xi:a1{1,2} yi:b1{1,2}
App×UpC ok xi:a1{1,2} yi:b1{2}
App×Rew ok xi:a2{200} yi:b2{200}
App×New ok xi:a1{1,2} yi:b1{1,2} ni:c1{1,2,3}
App×Rpl ok yi:b1{1,2} xi:a3{1,2,3}
App×Drp ok xi:a1{1,2}
App×Prj ok xi:a1{1,2}
App×DRp ok xi:a1{1,2} yi:b1{2}
Del×App ok xi:a1{1,2} yi:b1{1,2}
Del×Del rb xi:a1{1,2} yi:b1{1,2}
Del×UpC R
Del×Rew R
Del×New ok xi:a1{1,2} yi:b1{1,2} ni:c1{1,2,3}
Del×Rpl ok yi:b1{1,2} xi:a3{1,2,3}
Del×Drp ok xi:a1{1,2}
Del×Prj ok xi:a1{1,2}
Del×DRp R
UpC×App ok xi:a1{1,2} yi:b1{2}
UpC×Del R
UpC×UpC R
UpC×Rew R
UpC×New ok xi:a1{1,2} yi:b1{2} ni:c1{2,3}
UpC×Rpl ok yi:b1{2} xi:a3{1,2,3}
UpC×Drp ok xi:a1{1,2}
UpC×Prj R
UpC×DRp R
Rew×App ok xi:a2{200} yi:b2{200}
Rew×Del R
Rew×UpC R
Rew×Rew R
Rew×New R
Rew×Rpl R
Rew×Drp R
Rew×Prj ok xi:a2{200}
Rew×DRp R
New×App ok xi:a1{1,2} yi:b1{1,2} ni:c1{1,2,3}
New×Del ok xi:a1{1,2} yi:b1{1,2} ni:c1{1,2,3}
New×UpC rb xi:a1{1,2} yi:b1{2} ni:c1{2,3}
New×Rew R
New×New R
New×Rpl ok yi:b1{1,2} xi:a3{1,2,3} ni:c1{1,2,3}
New×Drp ok xi:a1{1,2} ni:c1{1,2,3}
New×Prj X
New×DRp R
Rpl×App ok yi:b1{1,2} xi:a3{1,2,3}
Rpl×Del ok yi:b1{1,2} xi:a3{1,2,3}
Rpl×UpC ok yi:b1{2} xi:a3{1,2,3}
Rpl×Rew R
Rpl×New ok yi:b1{1,2} ni:c1{1,2,3} xi:a3{1,2,3}
Rpl×Rpl R
Rpl×Drp ok xi:a3{1,2,3}
Rpl×Prj ok xi:a3{1,2,3}
Rpl×DRp ok yi:b1{2} xi:a3{1,2,3}
Drp×App ok xi:a1{1,2}
Drp×Del ok xi:a1{1,2}
Drp×UpC ok xi:a1{1,2}
Drp×Rew R
Drp×New ok xi:a1{1,2} ni:c1{1,2,3}
Drp×Rpl ok xi:a3{1,2,3}
Drp×Drp ok xi:a1{1,2}
Drp×Prj ok xi:a1{1,2}
Drp×DRp ok xi:a1{1,2}
Prj×App ok xi:a1{1,2}
Prj×Del ok xi:a1{1,2}
Prj×UpC ok xi:a1{1,2}
Prj×Rew ok xi:a2{200}
Prj×New ok xi:a1{1,2}
Prj×Rpl ok xi:a3{1,2,3}
Prj×Drp ok xi:a1{1,2}
Prj×Prj R
Prj×DRp ok xi:a1{1,2}
DRp×App ok xi:a1{1,2} yi:b1{2}
DRp×Del ok xi:a1{1,2} yi:b1{2}
DRp×UpC R
DRp×Rew R
DRp×New R
DRp×Rpl ok yi:b1{2} xi:a3{1,2,3}
DRp×Drp ok xi:a1{1,2}
DRp×Prj X
DRp×DRp R
`

var ixKinds = []string{"App", "Del", "UpC", "Rew", "New", "Rpl", "Drp", "Prj", "DRp"}

func ixUUID(s string) *lancepb.UUID {
	var b [16]byte
	fmt.Sscanf(s, "%x", &b[0])
	return &lancepb.UUID{Uuid: b[:]}
}

func ixIndex(t testing.TB, name, uuid string, field int32, frags ...uint32) *lancepb.IndexMetadata {
	return &lancepb.IndexMetadata{Name: name, Uuid: ixUUID(uuid), Fields: []int32{field}, FragmentBitmap: cfBitmapBytes(t, frags...), IndexVersion: new(int32)}
}

// ixTxn builds the grid's transaction of kind k.
func ixTxn(w *cfWorld, k string, side string) *lancepb.Transaction {
	t := w.t
	var txn *lancepb.Transaction
	switch k {
	case "App":
		txn = cfTx("", &lancepb.Transaction_Append{Fragments: []*lancepb.DataFragment{cfFragment(0, 5, cfDataFile("new-"+side+".lance", cfID, cfX, cfY))}})
	case "Del":
		id := uint64(7)
		if side == "theirs" {
			id = 8
		}
		txn = cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, id, uint32(id)))))
	case "UpC":
		f := cfBaseFrag(1)
		f.Files = append(f.Files, cfDataFile("y-"+side+".lance", cfY))
		f.Files[0].Fields = []int32{cfID, cfX, -2}
		txn = cfTx("", &lancepb.Transaction_Update{UpdateMode: lancepb.Transaction_REWRITE_COLUMNS, FieldsModified: []uint32{cfY}, UpdatedFragments: cfFrags(f)})
	case "Rew":
		txn = cfRewrite(1, 2)
		txn.GetRewrite().RewrittenIndices = []*lancepb.Transaction_Rewrite_RewrittenIndex{
			{OldId: ixUUID("a1"), NewId: ixUUID("a2")},
			{OldId: ixUUID("b1"), NewId: ixUUID("b2")},
		}
	case "New":
		txn = cfCreateIndex([]*lancepb.IndexMetadata{ixIndex(t, "ni", "c1", cfY, 1, 2, 3)})
	case "Rpl":
		txn = cfCreateIndex([]*lancepb.IndexMetadata{ixIndex(t, "xi", "a3", cfX, 1, 2, 3)}, ixIndex(t, "xi", "a1", cfX, 1, 2))
	case "Drp":
		txn = cfCreateIndex(nil, ixIndex(t, "yi", "b1", cfY, 1, 2))
	case "Prj":
		txn = cfProject(true, cfID, cfX, cfS, cfSA)
	case "DRp":
		txn = cfReplacement(1, cfY)
	default:
		t.Fatalf("kind %s", k)
	}
	txn.Uuid = k + "-" + side
	return txn
}

func ixSection(m *table.Manifest) string {
	var parts []string
	for _, ix := range m.Indices() {
		bm := roaring.New()
		if err := bm.UnmarshalBinary(ix.GetFragmentBitmap()); err != nil {
			return "undecodable"
		}
		var ids []string
		for _, id := range bm.ToArray() {
			ids = append(ids, fmt.Sprint(id))
		}
		parts = append(parts, fmt.Sprintf("%s:%x{%s}", ix.GetName(), ix.GetUuid().GetUuid()[0], strings.Join(ids, ",")))
	}
	return strings.Join(parts, " ")
}

var ixCodes = map[table.Resolution]string{table.Compatible: "ok", table.Rebasable: "rb", table.Retryable: "R", table.Incompatible: "X"}

func TestIndexConflictGrid(t *testing.T) {
	want := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(ixGrid), "\n") {
		pair, rest, _ := strings.Cut(line, " ")
		want[pair] = rest
	}
	if len(want) != len(ixKinds)*len(ixKinds) {
		t.Fatalf("grid has %d cells, want %d", len(want), len(ixKinds)*len(ixKinds))
	}
	for _, ours := range ixKinds {
		for _, theirs := range ixKinds {
			pair := ours + "×" + theirs
			w := cfNewWorld(t, cfBaseFrag(1), cfBaseFrag(2), cfBaseFrag(3))
			base, err := w.versions[0].WithIndices(&lancepb.IndexSection{Indices: []*lancepb.IndexMetadata{
				ixIndex(t, "xi", "a1", cfX, 1, 2), ixIndex(t, "yi", "b1", cfY, 1, 2),
			}}, table.IndexRulesLance8)
			if err != nil {
				t.Fatal(err)
			}
			w.versions[0] = base
			w.commit(ixTxn(w, theirs, "theirs"))
			res := w.rebase(ixTxn(w, ours, "ours"))
			var got string
			if res.Conflict != nil {
				got = ixCodes[res.Conflict.Resolution]
				if got == "ok" || got == "rb" {
					t.Errorf("%s: conflict with resolution %s", pair, got)
				}
			} else {
				code := "ok"
				c, err := table.CheckConflict(ixTxn(w, ours, "ours"), w.committed[0].Txn)
				if err == nil && c.Resolution == table.Rebasable {
					code = "rb"
				}
				for _, nf := range res.NewDeletionFiles {
					w.dv.Put(nf.FragmentID, nf.File, nf.Rows)
				}
				next, err := table.Apply(t.Context(), w.head(), res.Txn, nil)
				if err != nil {
					got = "Apply: " + err.Error()
				} else {
					got = code + " " + ixSection(next)
				}
			}
			if got != want[pair] {
				t.Errorf("%s %s; want %s", pair, got, want[pair])
			}
		}
	}
}
