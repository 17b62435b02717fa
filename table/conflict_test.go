package table_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// The matrix, as implemented. Rows are ours (the transaction being
// committed), columns theirs (committed after ours' read version). Each
// kind is represented by one small transaction (see cfRepresentative): the
// fragment-level kinds touch fragment 1 (ours) and fragment 1 or 2
// (theirs); CreateIndex indexes field 2 over fragment {1|2}; DataReplacement
// replaces field 2; DataOverlay overlays field 1; Update is a row-moving
// REWRITE_ROWS update; UpdateConfig sets config key "k"; UpdateBases adds
// base id 1; Merge and Project preserve nullability (the 2026 pre-checks
// have their own tests).
//
// ok = Compatible, rb = Rebasable, R = Retryable, X = Incompatible.

// Theirs touches the same fragment as ours.
const cfOverlappingMatrix = `
      App Del Upd Ovw CrI Rew Mrg Rst Rsv Prj UCf DRp UBs DOv
App   ok  ok  ok  X   ok  ok  ok  X   ok  ok  ok  ok  ok  ok
Del   ok  rb  rb  X   ok  R   R   X   ok  ok  ok  R   ok  ok
Upd   ok  rb  rb  X   ok  R   R   X   ok  ok  ok  R   ok  rb
Ovw   ok  ok  ok  R   ok  ok  ok  ok  ok  ok  ok  ok  ok  ok
CrI   ok  ok  ok  X   R   R   ok  X   ok  ok  ok  R   ok  ok
Rew   ok  R   R   X   R   R   R   X   ok  ok  ok  R   ok  R
Mrg   R   R   R   X   ok  R   R   X   ok  X   ok  R   ok  R
Rst   ok  ok  ok  ok  ok  ok  ok  ok  ok  ok  ok  ok  ok  ok
Rsv   ok  ok  ok  X   ok  ok  ok  X   ok  ok  ok  ok  ok  ok
Prj   ok  ok  ok  X   ok  ok  R   X   ok  R   ok  ok  ok  ok
UCf   ok  ok  ok  ok  ok  ok  ok  ok  ok  ok  X   ok  ok  ok
DRp   ok  ok  R   X   R   R   R   X   ok  ok  ok  R   ok  ok
UBs   ok  ok  ok  ok  ok  ok  ok  ok  ok  ok  ok  ok  X   ok
DOv   ok  ok  rb  X   ok  R   R   X   ok  ok  ok  ok  ok  ok
`

// Theirs touches fragment 2, ours fragment 1. Only the fragment-level
// cells change (R? and rb in reference D.2 become ok); field- and
// name-level conflicts (CreateIndex × CreateIndex, × DataReplacement) stay.
const cfDisjointMatrix = `
      App Del Upd Ovw CrI Rew Mrg Rst Rsv Prj UCf DRp UBs DOv
App   ok  ok  ok  X   ok  ok  ok  X   ok  ok  ok  ok  ok  ok
Del   ok  ok  ok  X   ok  ok  R   X   ok  ok  ok  ok  ok  ok
Upd   ok  ok  ok  X   ok  ok  R   X   ok  ok  ok  ok  ok  ok
Ovw   ok  ok  ok  R   ok  ok  ok  ok  ok  ok  ok  ok  ok  ok
CrI   ok  ok  ok  X   R   ok  ok  X   ok  ok  ok  R   ok  ok
Rew   ok  ok  ok  X   ok  ok  R   X   ok  ok  ok  ok  ok  ok
Mrg   R   R   R   X   ok  R   R   X   ok  X   ok  R   ok  R
Rst   ok  ok  ok  ok  ok  ok  ok  ok  ok  ok  ok  ok  ok  ok
Rsv   ok  ok  ok  X   ok  ok  ok  X   ok  ok  ok  ok  ok  ok
Prj   ok  ok  ok  X   ok  ok  R   X   ok  R   ok  ok  ok  ok
UCf   ok  ok  ok  ok  ok  ok  ok  ok  ok  ok  X   ok  ok  ok
DRp   ok  ok  ok  X   R   ok  R   X   ok  ok  ok  ok  ok  ok
UBs   ok  ok  ok  ok  ok  ok  ok  ok  ok  ok  ok  ok  X   ok
DOv   ok  ok  ok  X   ok  ok  R   X   ok  ok  ok  ok  ok  ok
`

var cfMatrixKinds = map[string]table.Op{
	"App": table.OpAppend,
	"Del": table.OpDelete,
	"Upd": table.OpUpdate,
	"Ovw": table.OpOverwrite,
	"CrI": table.OpCreateIndex,
	"Rew": table.OpRewrite,
	"Mrg": table.OpMerge,
	"Rst": table.OpRestore,
	"Rsv": table.OpReserveFragments,
	"Prj": table.OpProject,
	"UCf": table.OpUpdateConfig,
	"DRp": table.OpDataReplacement,
	"UBs": table.OpUpdateBases,
	"DOv": table.OpDataOverlay,
}

var cfMatrixCodes = map[string]table.Resolution{
	"ok": table.Compatible,
	"rb": table.Rebasable,
	"R":  table.Retryable,
	"X":  table.Incompatible,
}

func TestConflictMatrix(t *testing.T) {
	for _, tc := range []struct {
		name         string
		grid         string
		theirsOnFrag uint64
	}{
		{"overlapping", cfOverlappingMatrix, 1},
		{"disjoint", cfDisjointMatrix, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := strings.Split(strings.TrimSpace(tc.grid), "\n")
			cols := strings.Fields(lines[0])
			if len(cols) != len(cfMatrixKinds) || len(lines)-1 != len(cfMatrixKinds) {
				t.Fatalf("grid is %d×%d, want %d×%d", len(lines)-1, len(cols), len(cfMatrixKinds), len(cfMatrixKinds))
			}
			rowsSeen := map[string]bool{}
			for _, line := range lines[1:] {
				cells := strings.Fields(line)
				if len(cells) != len(cols)+1 {
					t.Fatalf("row %q has %d cells, want %d", line, len(cells)-1, len(cols))
				}
				row := cells[0]
				rowsSeen[row] = true
				for j, code := range cells[1:] {
					oursOp, theirsOp, want := cfMatrixKinds[row], cfMatrixKinds[cols[j]], cfMatrixCodes[code]
					ours := cfRepresentative(t, oursOp, 1)
					theirs := cfRepresentative(t, theirsOp, tc.theirsOnFrag)
					got, err := table.CheckConflict(ours, theirs)
					if err != nil {
						t.Errorf("CheckConflict(%s, %s): %v", oursOp, theirsOp, err)
						continue
					}
					if got.Resolution != want {
						t.Errorf("CheckConflict(%s, %s) = %s (%s); want %s", oursOp, theirsOp, got.Resolution, got.Reason, want)
					}
					if got.Ours != oursOp || got.Theirs != theirsOp {
						t.Errorf("CheckConflict(%s, %s) names ops %s, %s", oursOp, theirsOp, got.Ours, got.Theirs)
					}
					if got.Resolution != table.Compatible && got.Reason == "" {
						t.Errorf("CheckConflict(%s, %s) = %s without a reason", oursOp, theirsOp, got.Resolution)
					}
					if got.TheirsUUID != theirs.GetUuid() {
						t.Errorf("CheckConflict(%s, %s).TheirsUUID = %q; want %q", oursOp, theirsOp, got.TheirsUUID, theirs.GetUuid())
					}
				}
			}
			// Every supported operation has a row (and, the grid being
			// square over matrixKinds, a column).
			for op := table.OpUnknown; op <= table.OpAppendFRITransitions; op++ {
				if !op.Supported() {
					continue
				}
				found := false
				for abbr, k := range cfMatrixKinds {
					if k == op && rowsSeen[abbr] {
						found = true
					}
				}
				if !found {
					t.Errorf("supported operation %s has no row in the matrix", op)
				}
			}
		})
	}
}

// Schema of the test table: id, x, y, and a struct s{a}.
const (
	cfID = 0
	cfX  = 1
	cfY  = 2
	cfS  = 3
	cfSA = 4
)

func cfTestFields() []*lancepb.Field {
	return []*lancepb.Field{
		{Id: cfID, ParentId: -1, Name: "id", LogicalType: "int64", Type: lancepb.Field_LEAF},
		{Id: cfX, ParentId: -1, Name: "x", LogicalType: "int64", Nullable: true, Type: lancepb.Field_LEAF},
		{Id: cfY, ParentId: -1, Name: "y", LogicalType: "int64", Nullable: true, Type: lancepb.Field_LEAF},
		{Id: cfS, ParentId: -1, Name: "s", LogicalType: "struct", Nullable: true, Type: lancepb.Field_PARENT},
		{Id: cfSA, ParentId: cfS, Name: "a", LogicalType: "int64", Nullable: true, Type: lancepb.Field_LEAF},
	}
}

func cfBitmapBytes(t testing.TB, vals ...uint32) []byte {
	t.Helper()
	b, err := roaring.BitmapOf(vals...).ToBytes()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func cfDataFile(path string, fields ...int32) *lancepb.DataFile {
	cols := make([]int32, len(fields))
	for i := range cols {
		cols[i] = int32(i)
	}
	return &lancepb.DataFile{Path: path, Fields: fields, ColumnIndices: cols, FileMajorVersion: 2, FileMinorVersion: 0}
}

func cfFragment(id uint64, rows uint64, files ...*lancepb.DataFile) *lancepb.DataFragment {
	return &lancepb.DataFragment{Id: id, Files: files, PhysicalRows: rows}
}

func cfWithDeletion(f *lancepb.DataFragment, df *lancepb.DeletionFile) *lancepb.DataFragment {
	c := proto.CloneOf(f)
	c.DeletionFile = df
	return c
}

func cfTx(uuid string, op any) *lancepb.Transaction {
	t := &lancepb.Transaction{Uuid: uuid, ReadVersion: 1}
	switch o := op.(type) {
	case *lancepb.Transaction_Append:
		t.Operation = &lancepb.Transaction_Append_{Append: o}
	case *lancepb.Transaction_Delete:
		t.Operation = &lancepb.Transaction_Delete_{Delete: o}
	case *lancepb.Transaction_Overwrite:
		t.Operation = &lancepb.Transaction_Overwrite_{Overwrite: o}
	case *lancepb.Transaction_CreateIndex:
		t.Operation = &lancepb.Transaction_CreateIndex_{CreateIndex: o}
	case *lancepb.Transaction_Rewrite:
		t.Operation = &lancepb.Transaction_Rewrite_{Rewrite: o}
	case *lancepb.Transaction_Merge:
		t.Operation = &lancepb.Transaction_Merge_{Merge: o}
	case *lancepb.Transaction_Restore:
		t.Operation = &lancepb.Transaction_Restore_{Restore: o}
	case *lancepb.Transaction_ReserveFragments:
		t.Operation = &lancepb.Transaction_ReserveFragments_{ReserveFragments: o}
	case *lancepb.Transaction_Update:
		t.Operation = &lancepb.Transaction_Update_{Update: o}
	case *lancepb.Transaction_Project:
		t.Operation = &lancepb.Transaction_Project_{Project: o}
	case *lancepb.Transaction_UpdateConfig:
		t.Operation = &lancepb.Transaction_UpdateConfig_{UpdateConfig: o}
	case *lancepb.Transaction_DataReplacement:
		t.Operation = &lancepb.Transaction_DataReplacement_{DataReplacement: o}
	case *lancepb.Transaction_UpdateBases:
		t.Operation = &lancepb.Transaction_UpdateBases_{UpdateBases: o}
	case *lancepb.Transaction_DataOverlay:
		t.Operation = &lancepb.Transaction_DataOverlay_{DataOverlay: o}
	case *lancepb.Transaction_Clone:
		t.Operation = &lancepb.Transaction_Clone_{Clone: o}
	case *lancepb.Transaction_UpdateMemWalState:
		t.Operation = &lancepb.Transaction_UpdateMemWalState_{UpdateMemWalState: o}
	case nil:
	default:
		panic("tx: unknown operation type")
	}
	return t
}

func cfDel(frag uint64, readVersion, id, n uint64) *lancepb.DeletionFile {
	return &lancepb.DeletionFile{FileType: lancepb.DeletionFile_BITMAP, ReadVersion: readVersion, Id: id, NumDeletedRows: n}
}

func cfBaseFrag(id uint64) *lancepb.DataFragment {
	return cfFragment(id, 10, cfDataFile("f"+string(rune('0'+id))+".lance", cfID, cfX, cfY))
}

func cfIndex(name string, uuid byte, fields []int32, bitmap []byte) *lancepb.IndexMetadata {
	return &lancepb.IndexMetadata{Name: name, Uuid: &lancepb.UUID{Uuid: []byte{uuid, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}, Fields: fields, FragmentBitmap: bitmap}
}

func cfOverlay(t testing.TB, fields []int32, rows ...uint32) *lancepb.DataOverlayFile {
	return &lancepb.DataOverlayFile{
		DataFile: cfDataFile("overlay.lance", fields...),
		Coverage: &lancepb.DataOverlayFile_SharedOffsetBitmap{SharedOffsetBitmap: cfBitmapBytes(t, rows...)},
	}
}

func cfStr(s string) *string { return &s }

// cfRepresentative builds the matrix's transaction of kind op on fragment f.
func cfRepresentative(t testing.TB, op table.Op, f uint64) *lancepb.Transaction {
	uuid := op.String() + "-" + string(rune('0'+f))
	switch op {
	case table.OpAppend:
		return cfTx(uuid, &lancepb.Transaction_Append{Fragments: []*lancepb.DataFragment{cfFragment(0, 5, cfDataFile("new.lance", cfID, cfX, cfY))}})
	case table.OpDelete:
		return cfTx(uuid, &lancepb.Transaction_Delete{
			UpdatedFragments: []*lancepb.DataFragment{cfWithDeletion(cfBaseFrag(f), cfDel(f, 1, 7, 1))},
			Predicate:        "x > 5",
		})
	case table.OpUpdate:
		return cfTx(uuid, &lancepb.Transaction_Update{
			UpdatedFragments: []*lancepb.DataFragment{cfWithDeletion(cfBaseFrag(f), cfDel(f, 1, 8, 1))},
			NewFragments:     []*lancepb.DataFragment{cfFragment(0, 1, cfDataFile("moved.lance", cfID, cfX, cfY))},
			UpdateMode:       lancepb.Transaction_REWRITE_ROWS,
		})
	case table.OpOverwrite:
		return cfTx(uuid, &lancepb.Transaction_Overwrite{Fragments: []*lancepb.DataFragment{cfBaseFrag(0)}, Schema: cfTestFields()})
	case table.OpCreateIndex:
		return cfTx(uuid, &lancepb.Transaction_CreateIndex{NewIndices: []*lancepb.IndexMetadata{
			cfIndex("idx_y", byte(f), []int32{cfY}, cfBitmapBytes(t, uint32(f))),
		}})
	case table.OpRewrite:
		return cfTx(uuid, &lancepb.Transaction_Rewrite{Groups: []*lancepb.Transaction_Rewrite_RewriteGroup{{
			OldFragments: []*lancepb.DataFragment{cfBaseFrag(f)},
			NewFragments: []*lancepb.DataFragment{cfBaseFrag(100 + f)},
		}}})
	case table.OpMerge:
		return cfTx(uuid, &lancepb.Transaction_Merge{Fragments: []*lancepb.DataFragment{cfBaseFrag(f)}, Schema: cfTestFields(), PreservesNullability: true})
	case table.OpRestore:
		return cfTx(uuid, &lancepb.Transaction_Restore{Version: 1})
	case table.OpReserveFragments:
		return cfTx(uuid, &lancepb.Transaction_ReserveFragments{NumFragments: 3})
	case table.OpProject:
		return cfTx(uuid, &lancepb.Transaction_Project{Schema: cfTestFields(), PreservesNullability: true})
	case table.OpUpdateConfig:
		return cfTx(uuid, &lancepb.Transaction_UpdateConfig{ConfigUpdates: &lancepb.Transaction_UpdateMap{
			UpdateEntries: []*lancepb.Transaction_UpdateMapEntry{{Key: "k", Value: cfStr("v")}},
		}})
	case table.OpDataReplacement:
		return cfTx(uuid, &lancepb.Transaction_DataReplacement{Replacements: []*lancepb.Transaction_DataReplacementGroup{
			{FragmentId: f, NewFile: cfDataFile("y-new.lance", cfY)},
		}})
	case table.OpUpdateBases:
		return cfTx(uuid, &lancepb.Transaction_UpdateBases{NewBases: []*lancepb.BasePath{{Id: 1, Name: cfStr("b1"), Path: "s3://b1"}}})
	case table.OpDataOverlay:
		return cfTx(uuid, &lancepb.Transaction_DataOverlay{Groups: []*lancepb.Transaction_DataOverlayGroup{
			{FragmentId: f, Overlays: []*lancepb.DataOverlayFile{cfOverlay(t, []int32{cfX}, 0, 1, 2)}},
		}})
	}
	t.Fatalf("no representative for %s", op)
	return nil
}

// Builders for the targeted cases.

func cfDeleteTxn(updated []*lancepb.DataFragment, removed ...uint64) *lancepb.Transaction {
	return cfTx("delete", &lancepb.Transaction_Delete{UpdatedFragments: updated, DeletedFragmentIds: removed, Predicate: "p"})
}

func cfUpdateRows(updated []*lancepb.DataFragment, moved bool, removed ...uint64) *lancepb.Transaction {
	u := &lancepb.Transaction_Update{UpdatedFragments: updated, RemovedFragmentIds: removed, UpdateMode: lancepb.Transaction_REWRITE_ROWS}
	if moved {
		u.NewFragments = []*lancepb.DataFragment{cfFragment(0, 1, cfDataFile("moved.lance", cfID, cfX, cfY))}
	}
	return cfTx("update-rows", u)
}

func cfUpdateCols(ids []uint64, fields ...uint32) *lancepb.Transaction {
	u := &lancepb.Transaction_Update{UpdateMode: lancepb.Transaction_REWRITE_COLUMNS, FieldsModified: fields}
	for _, f := range ids {
		u.UpdatedFragments = append(u.UpdatedFragments, cfBaseFrag(f))
	}
	return cfTx("update-cols", u)
}

func cfReplacement(frag uint64, fields ...int32) *lancepb.Transaction {
	return cfTx("replace", &lancepb.Transaction_DataReplacement{Replacements: []*lancepb.Transaction_DataReplacementGroup{
		{FragmentId: frag, NewFile: cfDataFile("repl.lance", fields...)},
	}})
}

func cfOverlayTxn(t testing.TB, frag uint64, fields []int32, rows ...uint32) *lancepb.Transaction {
	return cfTx("overlay", &lancepb.Transaction_DataOverlay{Groups: []*lancepb.Transaction_DataOverlayGroup{
		{FragmentId: frag, Overlays: []*lancepb.DataOverlayFile{cfOverlay(t, fields, rows...)}},
	}})
}

func cfCreateIndex(newIdx []*lancepb.IndexMetadata, removed ...*lancepb.IndexMetadata) *lancepb.Transaction {
	return cfTx("index", &lancepb.Transaction_CreateIndex{NewIndices: newIdx, RemovedIndices: removed})
}

func cfRewrite(old ...uint64) *lancepb.Transaction {
	g := &lancepb.Transaction_Rewrite_RewriteGroup{}
	for _, id := range old {
		g.OldFragments = append(g.OldFragments, cfBaseFrag(id))
	}
	g.NewFragments = []*lancepb.DataFragment{cfBaseFrag(200)}
	return cfTx("rewrite", &lancepb.Transaction_Rewrite{Groups: []*lancepb.Transaction_Rewrite_RewriteGroup{g}})
}

func cfProject(preserves bool, fields ...int32) *lancepb.Transaction {
	var schema []*lancepb.Field
	for _, f := range cfTestFields() {
		for _, keep := range fields {
			if f.GetId() == keep {
				schema = append(schema, f)
			}
		}
	}
	return cfTx("project", &lancepb.Transaction_Project{Schema: schema, PreservesNullability: preserves})
}

func cfMerge(preserves bool) *lancepb.Transaction {
	return cfTx("merge", &lancepb.Transaction_Merge{Fragments: []*lancepb.DataFragment{cfBaseFrag(1)}, Schema: cfTestFields(), PreservesNullability: preserves})
}

func cfEntries(kv ...string) []*lancepb.Transaction_UpdateMapEntry {
	var out []*lancepb.Transaction_UpdateMapEntry
	for i := 0; i+1 < len(kv); i += 2 {
		e := &lancepb.Transaction_UpdateMapEntry{Key: kv[i]}
		if kv[i+1] != "<delete>" {
			e.Value = cfStr(kv[i+1])
		}
		out = append(out, e)
	}
	return out
}

func cfConfig(uc *lancepb.Transaction_UpdateConfig) *lancepb.Transaction { return cfTx("config", uc) }

func cfConfigKeys(kv ...string) *lancepb.Transaction {
	return cfConfig(&lancepb.Transaction_UpdateConfig{ConfigUpdates: &lancepb.Transaction_UpdateMap{UpdateEntries: cfEntries(kv...)}})
}

func cfOverwrite(cfConfig map[string]string) *lancepb.Transaction {
	return cfTx("overwrite", &lancepb.Transaction_Overwrite{Fragments: []*lancepb.DataFragment{cfBaseFrag(0)}, Schema: cfTestFields(), ConfigUpsertValues: cfConfig})
}

func cfBases(b ...*lancepb.BasePath) *lancepb.Transaction {
	return cfTx("bases", &lancepb.Transaction_UpdateBases{NewBases: b})
}

func cfWithFilter(t *lancepb.Transaction) *lancepb.Transaction {
	t = proto.CloneOf(t)
	t.GetUpdate().InsertedRows = []byte{1}
	return t
}

func cfWithOffsets(t *lancepb.Transaction, frag uint64, rows []byte) *lancepb.Transaction {
	t = proto.CloneOf(t)
	t.GetUpdate().UpdatedFragmentOffsetBitmaps = map[uint64][]byte{frag: rows}
	return t
}

type cfConflictCase struct {
	name      string
	ours      *lancepb.Transaction
	theirs    *lancepb.Transaction
	want      table.Resolution
	wantFrags []uint64 // checked when not nil
	reason    string   // a substring of the reason, checked when not empty
}

func cfRunConflictCases(t *testing.T, cases []cfConflictCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := table.CheckConflict(tc.ours, tc.theirs)
			if err != nil {
				t.Fatalf("CheckConflict: %v", err)
			}
			if got.Resolution != tc.want {
				t.Fatalf("CheckConflict = %s (%s); want %s", got.Resolution, got.Reason, tc.want)
			}
			if tc.wantFrags != nil && !cfEqualIDs(got.Fragments, tc.wantFrags) {
				t.Errorf("Fragments = %v; want %v", got.Fragments, tc.wantFrags)
			}
			if tc.reason != "" && !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("Reason = %q; want it to mention %q", got.Reason, tc.reason)
			}
		})
	}
}

func cfEqualIDs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var (
	cfFrag1Del  = cfWithDeletion(cfBaseFrag(1), cfDel(1, 1, 7, 1))
	cfFrag1Del2 = cfWithDeletion(cfBaseFrag(1), cfDel(1, 1, 9, 2))
	cfFrag2Del  = cfWithDeletion(cfBaseFrag(2), cfDel(2, 1, 7, 1))
)

// Note 1 and its refinements: Delete/Update against Delete/Update.
func TestConflictRowChanges(t *testing.T) {
	cfRunConflictCases(t, []cfConflictCase{
		{"delete×delete same fragment", cfDeleteTxn(cfFrags(cfFrag1Del)), cfDeleteTxn(cfFrags(cfFrag1Del2)), table.Rebasable, []uint64{1}, "deletion vectors of fragments [1]"},
		{"delete×delete other fragment", cfDeleteTxn(cfFrags(cfFrag1Del)), cfDeleteTxn(cfFrags(cfFrag2Del)), table.Compatible, nil, ""},
		{"theirs removed our fragment", cfDeleteTxn(cfFrags(cfFrag1Del)), cfDeleteTxn(nil, 1), table.Retryable, []uint64{1}, "removed by a concurrent Delete"},
		{"theirs removed a fragment we remove", cfDeleteTxn(nil, 1), cfDeleteTxn(nil, 1), table.Retryable, []uint64{1}, "removed"},
		{"we remove a fragment theirs modified", cfDeleteTxn(nil, 1), cfDeleteTxn(cfFrags(cfFrag1Del)), table.Retryable, []uint64{1}, "that Delete removes"},
		{"update rows×delete", cfUpdateRows(cfFrags(cfFrag1Del), true), cfDeleteTxn(cfFrags(cfFrag1Del2)), table.Rebasable, []uint64{1}, ""},
		{"delete×update rows", cfDeleteTxn(cfFrags(cfFrag1Del)), cfUpdateRows(cfFrags(cfFrag1Del2), true), table.Rebasable, []uint64{1}, ""},
		{"delete×update columns: data files changed", cfDeleteTxn(cfFrags(cfFrag1Del)), cfUpdateCols([]uint64{1}, cfY), table.Retryable, []uint64{1}, "rewrote columns [2]"},
		{"update rows×update columns", cfUpdateRows(cfFrags(cfFrag1Del), false), cfUpdateCols([]uint64{1}, cfY), table.Retryable, []uint64{1}, ""},
		{"update columns×delete", cfUpdateCols([]uint64{1}, cfY), cfDeleteTxn(cfFrags(cfFrag1Del)), table.Rebasable, []uint64{1}, ""},
		{"update columns×update columns other fragment", cfUpdateCols([]uint64{1}, cfY), cfUpdateCols([]uint64{2}, cfY), table.Compatible, nil, ""},
		// F.2 / #9043: beyond Lance, which retries.
		{"update columns×update columns disjoint fields", cfUpdateCols([]uint64{1}, cfX), cfUpdateCols([]uint64{1}, cfY), table.Rebasable, []uint64{1}, "carried into this rewrite of fields [1]"},
		{"update columns×update columns same field", cfUpdateCols([]uint64{1}, cfX, cfY), cfUpdateCols([]uint64{1}, cfY), table.Retryable, []uint64{1}, "rewrote fields [2] of fragments [1], overlapping fields [2]"},
		{"update columns×update columns theirs names no field", cfUpdateCols([]uint64{1}, cfX), cfUpdateCols([]uint64{1}), table.Retryable, []uint64{1}, ""},
		{"update columns×replacement disjoint fields", cfUpdateCols([]uint64{1}, cfX), cfReplacement(1, cfY), table.Rebasable, []uint64{1}, "DataReplacement of fields [2]"},
		{"update columns×replacement same field", cfUpdateCols([]uint64{1}, cfY), cfReplacement(1, cfY), table.Retryable, []uint64{1}, ""},
		{"update columns×replacement other fragment", cfUpdateCols([]uint64{1}, cfY), cfReplacement(2, cfY), table.Compatible, nil, ""},
		{"delete×replacement same fragment", cfDeleteTxn(cfFrags(cfFrag1Del)), cfReplacement(1, cfY), table.Retryable, []uint64{1}, ""},
		{"update rows×replacement same fragment", cfUpdateRows(cfFrags(cfFrag1Del), true), cfReplacement(1, cfX), table.Retryable, []uint64{1}, ""},
		{"delete×rewrite", cfDeleteTxn(cfFrags(cfFrag1Del)), cfRewrite(1, 3), table.Retryable, []uint64{1}, "compacted fragments [1]"},
		{"removed fragment×rewrite", cfDeleteTxn(nil, 3), cfRewrite(1, 3), table.Retryable, []uint64{3}, ""},
	})
}

func cfFrags(f ...*lancepb.DataFragment) []*lancepb.DataFragment { return f }

// Update-specific 2026 rules: key filters, #9436, overlays.
func TestConflictUpdateRules(t *testing.T) {
	upd := cfUpdateRows(cfFrags(cfFrag1Del), true)
	cfRunConflictCases(t, []cfConflictCase{
		{"key filters on both sides", cfWithFilter(upd), cfWithFilter(cfUpdateRows(cfFrags(cfFrag2Del), true)), table.Retryable, nil, "key-existence filters"},
		{"key filter against update without one", cfWithFilter(upd), cfUpdateRows(cfFrags(cfFrag2Del), true), table.Retryable, nil, "without a key-existence filter"},
		{"key filter against append", cfWithFilter(upd), cfRepresentative(t, table.OpAppend, 0), table.Retryable, nil, "Append"},
		{"key filter against delete", cfWithFilter(upd), cfDeleteTxn(cfFrags(cfFrag2Del)), table.Compatible, nil, ""},
		{"only theirs has a key filter", upd, cfWithFilter(cfUpdateRows(cfFrags(cfFrag2Del), true)), table.Compatible, nil, ""},
		{"append against filtered update", cfRepresentative(t, table.OpAppend, 0), cfWithFilter(upd), table.Compatible, nil, ""},
		// #9436.
		{"column rewrite×project dropping the field", cfUpdateCols([]uint64{1}, cfY), cfProject(true, cfID, cfX), table.Retryable, []uint64{1}, "dropped fields [2]"},
		{"column rewrite×project dropping another field", cfUpdateCols([]uint64{1}, cfY), cfProject(true, cfID, cfY), table.Compatible, nil, ""},
		{"row rewrite×project dropping a field", upd, cfProject(true, cfID, cfX), table.Compatible, nil, ""},
		// Update (ours) against DataOverlay (theirs).
		{"column rewrite×overlay on the rewritten field", cfUpdateCols([]uint64{1}, cfX), cfOverlayTxn(t, 1, []int32{cfX}, 3), table.Retryable, []uint64{1}, "supplies fields [1]"},
		{"column rewrite×overlay on another field", cfUpdateCols([]uint64{1}, cfY), cfOverlayTxn(t, 1, []int32{cfX}, 3), table.Compatible, nil, ""},
		{"column rewrite×overlay on another fragment", cfUpdateCols([]uint64{1}, cfX), cfOverlayTxn(t, 2, []int32{cfX}, 3), table.Compatible, nil, ""},
		{"moving update×overlay on an updated fragment", upd, cfOverlayTxn(t, 1, []int32{cfX}, 3), table.Rebasable, []uint64{1}, ""},
		{"moving update×overlay on a removed fragment", cfUpdateRows(nil, true, 1), cfOverlayTxn(t, 1, []int32{cfX}, 3), table.Retryable, []uint64{1}, ""},
		{"non-moving update×overlay", cfUpdateRows(cfFrags(cfFrag1Del), false), cfOverlayTxn(t, 1, []int32{cfX}, 3), table.Compatible, nil, ""},
		{"delete×overlay on a removed fragment", cfDeleteTxn(nil, 1), cfOverlayTxn(t, 1, []int32{cfX}, 3), table.Compatible, nil, ""},
	})
}

// The DataOverlay row (2026).
func TestConflictDataOverlay(t *testing.T) {
	ours := cfOverlayTxn(t, 1, []int32{cfX}, 0, 1)
	cfRunConflictCases(t, []cfConflictCase{
		{"delete removed the overlaid fragment", ours, cfDeleteTxn(nil, 1), table.Retryable, []uint64{1}, "removed by a concurrent Delete"},
		{"delete of rows in the overlaid fragment", ours, cfDeleteTxn(cfFrags(cfFrag1Del)), table.Compatible, nil, ""},
		{"update removed the overlaid fragment", ours, cfUpdateRows(nil, false, 1), table.Retryable, []uint64{1}, ""},
		{"moving update of the overlaid fragment", ours, cfUpdateRows(cfFrags(cfFrag1Del), true), table.Rebasable, []uint64{1}, ""},
		{"non-moving update of the overlaid fragment", ours, cfUpdateRows(cfFrags(cfFrag1Del), false), table.Compatible, nil, ""},
		{"column rewrite of the overlaid field", ours, cfUpdateCols([]uint64{1}, cfX), table.Compatible, nil, ""},
		{"rewrite of another fragment", ours, cfRewrite(2), table.Compatible, nil, ""},
		{"overlay×overlay same cells", ours, cfOverlayTxn(t, 1, []int32{cfX}, 0, 1), table.Compatible, nil, ""},
		{"replacement of the overlaid field", ours, cfReplacement(1, cfX), table.Compatible, nil, ""},
		{"index build", ours, cfRepresentative(t, table.OpCreateIndex, 1), table.Compatible, nil, ""},
	})
}

// The DataReplacement row (2026) and notes 6 and 10.
func TestConflictDataReplacement(t *testing.T) {
	ours := cfReplacement(1, cfY)
	cfRunConflictCases(t, []cfConflictCase{
		{"delete removed the target", ours, cfDeleteTxn(nil, 1), table.Incompatible, []uint64{1}, "removed"},
		{"delete of rows in the target", ours, cfDeleteTxn(cfFrags(cfFrag1Del)), table.Compatible, nil, ""},
		{"update removed the target", ours, cfUpdateRows(nil, false, 1), table.Incompatible, []uint64{1}, ""},
		{"update moved rows out of the target", ours, cfUpdateRows(cfFrags(cfFrag1Del), true), table.Retryable, []uint64{1}, "moved rows"},
		{"update deleted rows of the target", ours, cfUpdateRows(cfFrags(cfFrag1Del), false), table.Compatible, nil, ""},
		{"column rewrite of our field", ours, cfUpdateCols([]uint64{1}, cfY), table.Retryable, []uint64{1}, "rewrote fields [2]"},
		{"column rewrite of another field", ours, cfUpdateCols([]uint64{1}, cfX), table.Compatible, nil, ""},
		{"moving update of another fragment", ours, cfUpdateRows(cfFrags(cfFrag2Del), true), table.Compatible, nil, ""},
		{"project dropped our field", ours, cfProject(true, cfID, cfX), table.Incompatible, []uint64{1}, "field 2"},
		{"project kept our field", ours, cfProject(true, cfID, cfY), table.Compatible, nil, ""},
		{"overlay of another field", ours, cfOverlayTxn(t, 1, []int32{cfX}, 1), table.Compatible, nil, ""},
		{"overlay of our field in another fragment", ours, cfOverlayTxn(t, 2, []int32{cfY}, 1), table.Compatible, nil, ""},
		{"overlay of our field (beyond Lance)", ours, cfOverlayTxn(t, 1, []int32{cfY}, 1), table.Retryable, []uint64{1}, "supersede unseen"},
		{"replacement same fragment other field", ours, cfReplacement(1, cfX), table.Compatible, nil, ""},
		{"replacement other fragment same field", ours, cfReplacement(2, cfY), table.Compatible, nil, ""},
		{"replacement same fragment same field", ours, cfReplacement(1, cfY), table.Retryable, []uint64{1}, ""},
		{"index on another field", ours, cfCreateIndex([]*lancepb.IndexMetadata{cfIndex("i", 1, []int32{cfX}, cfBitmapBytes(t, 1))}), table.Compatible, nil, ""},
		{"index carrying our field", ours, cfCreateIndex([]*lancepb.IndexMetadata{{Name: "i", Fields: []int32{cfX}, CoveringFields: []int32{cfY}}}), table.Retryable, []uint64{1}, ""},
		{"index×replacement of an indexed field", cfCreateIndex([]*lancepb.IndexMetadata{cfIndex("i", 1, []int32{cfY}, nil)}), ours, table.Retryable, []uint64{1}, "depends on fields [2]"},
		{"index×replacement of another field", cfCreateIndex([]*lancepb.IndexMetadata{cfIndex("i", 1, []int32{cfX}, nil)}), ours, table.Compatible, nil, ""},
	})
}

// Notes 4, 5, 7 and 8, and the 2026 CreateIndex × CreateIndex and
// CreateIndex × Update rules.
func TestConflictIndexes(t *testing.T) {
	idx := func(name string, uuid byte) *lancepb.IndexMetadata {
		return cfIndex(name, uuid, []int32{cfY}, cfBitmapBytes(t, 1))
	}
	fri := func(uuid byte) *lancepb.IndexMetadata { return cfIndex("__lance_frag_reuse", uuid, nil, nil) }
	memwal := func(uuid byte) *lancepb.IndexMetadata { return cfIndex("__lance_mem_wal", uuid, nil, nil) }
	ci := func(n ...*lancepb.IndexMetadata) *lancepb.Transaction { return cfCreateIndex(n) }
	cfRunConflictCases(t, []cfConflictCase{
		{"different names", ci(idx("a", 1)), ci(idx("b", 2)), table.Compatible, nil, ""},
		{"same name", ci(idx("a", 1)), ci(idx("a", 2)), table.Retryable, nil, `index "a"`},
		{"both install the fragment-reuse index", ci(fri(1)), ci(fri(2)), table.Retryable, nil, "__lance_frag_reuse"},
		{"both install the MemWAL index", ci(memwal(1)), ci(memwal(2)), table.Retryable, nil, "__lance_mem_wal"},
		{"we append a segment theirs dropped", ci(idx("a", 3)), cfCreateIndex(nil, idx("a", 1)), table.Retryable, nil, "dropped"},
		{"we drop an index theirs extended", cfCreateIndex(nil, idx("a", 1)), ci(idx("a", 3)), table.Retryable, nil, "extended"},
		{"we replace a segment theirs dropped", cfCreateIndex([]*lancepb.IndexMetadata{idx("a", 3)}, idx("a", 1)), cfCreateIndex(nil, idx("a", 1)), table.Retryable, nil, "replace segment"},
		{"both drop the same segment", cfCreateIndex(nil, idx("a", 1)), cfCreateIndex(nil, idx("a", 1)), table.Compatible, nil, ""},
		{"both replace different segments", cfCreateIndex([]*lancepb.IndexMetadata{idx("a", 5)}, idx("a", 1)), cfCreateIndex([]*lancepb.IndexMetadata{idx("a", 6)}, idx("a", 2)), table.Retryable, nil, ""},
		// Note 5: CreateIndex × Rewrite.
		{"index×rewrite of indexed fragment", ci(idx("a", 1)), cfRewrite(1), table.Retryable, []uint64{1}, `index "a" covers fragments [1]`},
		{"index×rewrite of other fragment", ci(idx("a", 1)), cfRewrite(2), table.Compatible, nil, ""},
		{"index without bitmap×rewrite", ci(cfIndex("a", 1, []int32{cfY}, nil)), cfRewrite(2), table.Retryable, []uint64{2}, "no fragment bitmap"},
		// Note 7: Rewrite × CreateIndex.
		{"rewrite×index of the fragment", cfRewrite(1), ci(idx("a", 1)), table.Retryable, []uint64{1}, ""},
		{"rewrite×index of another fragment", cfRewrite(2), ci(idx("a", 1)), table.Compatible, nil, ""},
		{"rewrite×index without bitmap", cfRewrite(2), ci(cfIndex("a", 1, []int32{cfY}, nil)), table.Retryable, nil, ""},
		{"rewrite×fragment-reuse cleanup", cfRewrite(1), cfCreateIndex([]*lancepb.IndexMetadata{fri(2)}, fri(1)), table.Compatible, nil, ""},
		{"rewrite×fragment-reuse mixed with other indexes", cfRewrite(1), cfCreateIndex([]*lancepb.IndexMetadata{fri(2), idx("a", 3)}, fri(1)), table.Incompatible, nil, ""},
		// Note 8.
		{"rewrite×rewrite disjoint", cfRewrite(1), cfRewrite(2), table.Compatible, nil, ""},
		{"rewrite×rewrite overlapping", cfRewrite(1, 2), cfRewrite(2, 3), table.Retryable, []uint64{2}, ""},
		// 2026: CreateIndex × Update prunes the index coverage.
		{"index×column rewrite of the indexed field", ci(idx("a", 1)), cfUpdateCols([]uint64{1}, cfY), table.Rebasable, []uint64{1}, "stop covering fragments [1]"},
		{"index×column rewrite outside the bitmap", ci(idx("a", 1)), cfUpdateCols([]uint64{2}, cfY), table.Compatible, nil, ""},
		{"index×column rewrite of another field", ci(idx("a", 1)), cfUpdateCols([]uint64{1}, cfX), table.Compatible, nil, ""},
		{"index without bitmap×column rewrite", ci(cfIndex("a", 1, []int32{cfY}, nil)), cfUpdateCols([]uint64{1}, cfY), table.Retryable, nil, "no fragment bitmap"},
		{"index×delete", ci(idx("a", 1)), cfDeleteTxn(cfFrags(cfFrag1Del)), table.Compatible, nil, ""},
		// MemWAL against Merge, both directions.
		{"MemWAL index×merge", ci(memwal(1)), cfMerge(true), table.Retryable, nil, ""},
		{"merge×MemWAL index", cfMerge(true), ci(memwal(1)), table.Retryable, nil, ""},
		{"merge×regular index", cfMerge(true), ci(idx("a", 1)), table.Compatible, nil, ""},
	})
}

// The 2026 global pre-checks, in both orders.
func TestConflictPreChecks(t *testing.T) {
	schemaMeta := cfConfig(&lancepb.Transaction_UpdateConfig{SchemaMetadataUpdates: &lancepb.Transaction_UpdateMap{UpdateEntries: cfEntries("a", "b")}})
	fieldMeta := cfConfig(&lancepb.Transaction_UpdateConfig{FieldMetadataUpdates: map[int32]*lancepb.Transaction_UpdateMap{cfX: {UpdateEntries: cfEntries("a", "b")}}})
	emptySchemaMeta := cfConfig(&lancepb.Transaction_UpdateConfig{SchemaMetadataUpdates: &lancepb.Transaction_UpdateMap{}})
	cfRunConflictCases(t, []cfConflictCase{
		{"tightening project×append", cfProject(false, cfID, cfX, cfY), cfRepresentative(t, table.OpAppend, 0), table.Retryable, nil, "preserves_nullability"},
		{"append×tightening project", cfRepresentative(t, table.OpAppend, 0), cfProject(false, cfID, cfX, cfY), table.Retryable, nil, "preserves_nullability"},
		{"tightening project×update", cfProject(false, cfID, cfX, cfY), cfUpdateRows(cfFrags(cfFrag1Del), true), table.Retryable, nil, ""},
		{"replacement×tightening project", cfReplacement(1, cfY), cfProject(false, cfID, cfX, cfY), table.Retryable, nil, ""},
		{"overlay×tightening project", cfOverlayTxn(t, 1, []int32{cfX}, 1), cfProject(false, cfID, cfX, cfY), table.Retryable, nil, ""},
		{"tightening project×delete", cfProject(false, cfID, cfX, cfY), cfDeleteTxn(cfFrags(cfFrag1Del)), table.Compatible, nil, ""},
		{"delete×tightening project", cfDeleteTxn(cfFrags(cfFrag1Del)), cfProject(false, cfID, cfX, cfY), table.Compatible, nil, ""},
		{"preserving project×append", cfProject(true, cfID, cfX, cfY), cfRepresentative(t, table.OpAppend, 0), table.Compatible, nil, ""},
		{"reserve×non-preserving merge", cfRepresentative(t, table.OpReserveFragments, 0), cfMerge(false), table.Compatible, nil, ""},
		{"overlay×non-preserving merge", cfOverlayTxn(t, 1, []int32{cfX}, 1), cfMerge(false), table.Retryable, nil, "preserves_nullability"},
		{"merge×schema metadata", cfMerge(true), schemaMeta, table.Retryable, nil, "schema or field metadata"},
		{"schema metadata×merge", schemaMeta, cfMerge(true), table.Retryable, nil, "schema or field metadata"},
		{"merge×field metadata", cfMerge(true), fieldMeta, table.Retryable, nil, ""},
		{"field metadata×merge", fieldMeta, cfMerge(true), table.Retryable, nil, ""},
		{"merge×empty schema metadata update", cfMerge(true), emptySchemaMeta, table.Compatible, nil, ""},
		{"merge×config", cfMerge(true), cfConfigKeys("k", "v"), table.Compatible, nil, ""},
		{"config×merge", cfConfigKeys("k", "v"), cfMerge(true), table.Compatible, nil, ""},
	})
}

// Notes 3, 9 and 13, and Overwrite × Overwrite (2026).
func TestConflictConfigAndBases(t *testing.T) {
	meta := func(uc *lancepb.Transaction_UpdateConfig) *lancepb.Transaction { return cfConfig(uc) }
	table1 := meta(&lancepb.Transaction_UpdateConfig{TableMetadataUpdates: &lancepb.Transaction_UpdateMap{UpdateEntries: cfEntries("t", "1")}})
	table2 := meta(&lancepb.Transaction_UpdateConfig{TableMetadataUpdates: &lancepb.Transaction_UpdateMap{UpdateEntries: cfEntries("u", "1")}})
	tableReplace := meta(&lancepb.Transaction_UpdateConfig{TableMetadataUpdates: &lancepb.Transaction_UpdateMap{Replace: true}})
	schemaMeta := meta(&lancepb.Transaction_UpdateConfig{SchemaMetadataUpdates: &lancepb.Transaction_UpdateMap{UpdateEntries: cfEntries("a", "b")}})
	deprecatedSchemaMeta := meta(&lancepb.Transaction_UpdateConfig{SchemaMetadata: map[string]string{"a": "c"}})
	fieldX := meta(&lancepb.Transaction_UpdateConfig{FieldMetadataUpdates: map[int32]*lancepb.Transaction_UpdateMap{cfX: {UpdateEntries: cfEntries("a", "b")}}})
	fieldY := meta(&lancepb.Transaction_UpdateConfig{FieldMetadataUpdates: map[int32]*lancepb.Transaction_UpdateMap{cfY: {UpdateEntries: cfEntries("a", "b")}}})
	deprecatedFieldX := meta(&lancepb.Transaction_UpdateConfig{FieldMetadata: map[uint32]*lancepb.Transaction_UpdateConfig_FieldMetadataUpdate{cfX: {}}})
	deprecatedUpsert := meta(&lancepb.Transaction_UpdateConfig{UpsertValues: map[string]string{"k": "w"}})
	deprecatedDelete := meta(&lancepb.Transaction_UpdateConfig{DeleteKeys: []string{"k"}})
	replaceConfig := meta(&lancepb.Transaction_UpdateConfig{ConfigUpdates: &lancepb.Transaction_UpdateMap{Replace: true, UpdateEntries: cfEntries("z", "1")}})
	cfRunConflictCases(t, []cfConflictCase{
		{"overwrite×overwrite", cfOverwrite(nil), cfOverwrite(nil), table.Retryable, nil, ""},
		{"overwrite×overwrite same config key", cfOverwrite(map[string]string{"k": "1"}), cfOverwrite(map[string]string{"k": "2"}), table.Incompatible, nil, `"k"`},
		{"overwrite×overwrite other config keys", cfOverwrite(map[string]string{"k": "1"}), cfOverwrite(map[string]string{"j": "2"}), table.Retryable, nil, ""},
		{"overwrite×config same key", cfOverwrite(map[string]string{"k": "1"}), cfConfigKeys("k", "v"), table.Incompatible, nil, ""},
		{"overwrite×config deletes the key", cfOverwrite(map[string]string{"k": "1"}), cfConfigKeys("k", "<delete>"), table.Incompatible, nil, ""},
		{"overwrite×config other key", cfOverwrite(map[string]string{"k": "1"}), cfConfigKeys("j", "v"), table.Compatible, nil, ""},
		{"config×overwrite same key", cfConfigKeys("k", "v"), cfOverwrite(map[string]string{"k": "1"}), table.Incompatible, nil, ""},
		{"config×overwrite other key", cfConfigKeys("k", "v"), cfOverwrite(map[string]string{"j": "1"}), table.Compatible, nil, ""},
		{"schema metadata×overwrite", schemaMeta, cfOverwrite(nil), table.Incompatible, nil, "schema or field metadata"},
		{"field metadata×overwrite", fieldX, cfOverwrite(nil), table.Incompatible, nil, ""},
		{"table metadata×overwrite", table1, cfOverwrite(nil), table.Compatible, nil, ""},
		{"config×config same key", cfConfigKeys("k", "v"), cfConfigKeys("k", "w"), table.Incompatible, nil, `"k"`},
		{"config×config upsert vs delete", cfConfigKeys("k", "v"), cfConfigKeys("k", "<delete>"), table.Incompatible, nil, ""},
		{"config×config delete vs upsert", cfConfigKeys("k", "<delete>"), cfConfigKeys("k", "v"), table.Incompatible, nil, ""},
		{"config×config both delete", cfConfigKeys("k", "<delete>"), cfConfigKeys("k", "<delete>"), table.Compatible, nil, ""},
		{"config×config other keys", cfConfigKeys("k", "v"), cfConfigKeys("j", "v"), table.Compatible, nil, ""},
		{"config×deprecated upsert", cfConfigKeys("k", "v"), deprecatedUpsert, table.Incompatible, nil, ""},
		{"config×deprecated delete", cfConfigKeys("k", "v"), deprecatedDelete, table.Incompatible, nil, ""},
		{"config replace×any key (beyond Lance)", replaceConfig, cfConfigKeys("j", "v"), table.Incompatible, nil, "replaced"},
		{"table metadata same key", table1, table1, table.Incompatible, nil, `"t"`},
		{"table metadata other keys", table1, table2, table.Compatible, nil, ""},
		{"table metadata replaced", tableReplace, table2, table.Incompatible, nil, ""},
		{"schema metadata both", schemaMeta, deprecatedSchemaMeta, table.Incompatible, nil, "schema metadata"},
		{"field metadata same field", fieldX, deprecatedFieldX, table.Incompatible, nil, "field 1"},
		{"field metadata other fields", fieldX, fieldY, table.Compatible, nil, ""},
		{"bases same id", cfBases(&lancepb.BasePath{Id: 1, Path: "a"}), cfBases(&lancepb.BasePath{Id: 1, Path: "b"}), table.Incompatible, nil, "id 1"},
		{"bases same name", cfBases(&lancepb.BasePath{Name: cfStr("n"), Path: "a"}), cfBases(&lancepb.BasePath{Name: cfStr("n"), Path: "b"}), table.Incompatible, nil, `"n"`},
		{"bases same path", cfBases(&lancepb.BasePath{Id: 1, Path: "a"}), cfBases(&lancepb.BasePath{Id: 2, Path: "a"}), table.Incompatible, nil, `"a"`},
		{"bases unassigned ids", cfBases(&lancepb.BasePath{Path: "a"}), cfBases(&lancepb.BasePath{Path: "b"}), table.Compatible, nil, ""},
		{"bases×data", cfBases(&lancepb.BasePath{Path: "a"}), cfDeleteTxn(nil, 1), table.Compatible, nil, ""},
	})
}

func TestConflictErrors(t *testing.T) {
	clone := cfTx("clone", &lancepb.Transaction_Clone{})
	memwal := cfTx("memwal", &lancepb.Transaction_UpdateMemWalState{})
	noOp := cfTx("none", nil)
	badBitmap := cfCreateIndex([]*lancepb.IndexMetadata{cfIndex("a", 1, []int32{cfY}, []byte{1, 2, 3})})
	badOverlay := cfTx("o", &lancepb.Transaction_DataOverlay{Groups: []*lancepb.Transaction_DataOverlayGroup{{FragmentId: 1, Overlays: []*lancepb.DataOverlayFile{{DataFile: cfDataFile("o", cfX)}}}}})
	for _, tc := range []struct {
		name         string
		ours, theirs *lancepb.Transaction
		want         error
	}{
		{"clone ours", clone, cfDeleteTxn(nil, 1), table.ErrUnsupportedOperation},
		{"clone theirs", cfDeleteTxn(nil, 1), clone, table.ErrUnsupportedOperation},
		{"MemWAL theirs", cfRepresentative(t, table.OpAppend, 0), memwal, table.ErrUnsupportedOperation},
		{"no operation", noOp, cfDeleteTxn(nil, 1), table.ErrUnsupportedOperation},
		{"nil ours", nil, cfDeleteTxn(nil, 1), table.ErrMalformed},
		{"nil theirs", cfDeleteTxn(nil, 1), nil, table.ErrMalformed},
		{"malformed index bitmap", badBitmap, cfRewrite(1), table.ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := table.CheckConflict(tc.ours, tc.theirs)
			if !errors.Is(err, tc.want) {
				t.Fatalf("CheckConflict error = %v; want %v", err, tc.want)
			}
		})
	}
	// An overlay without coverage only matters where coverage is read.
	if _, err := table.CheckConflict(badOverlay, cfDeleteTxn(nil, 2)); err != nil {
		t.Errorf("CheckConflict(overlay without coverage, unrelated delete) = %v", err)
	}
}

func TestResolutionString(t *testing.T) {
	for r, want := range map[table.Resolution]string{
		table.Compatible:   "Compatible",
		table.Rebasable:    "Rebasable",
		table.Retryable:    "Retryable",
		table.Incompatible: "Incompatible",
		9:                  "Resolution(9)",
	} {
		if got := r.String(); got != want {
			t.Errorf("Resolution(%d).String() = %q; want %q", r, got, want)
		}
	}
}

// CheckConflict must not panic on any combination of operations with empty
// or odd payloads.
func TestConflictNoPanic(t *testing.T) {
	var txns []*lancepb.Transaction
	for _, op := range []any{
		&lancepb.Transaction_Append{}, &lancepb.Transaction_Delete{}, &lancepb.Transaction_Overwrite{},
		&lancepb.Transaction_CreateIndex{NewIndices: []*lancepb.IndexMetadata{{}}, RemovedIndices: []*lancepb.IndexMetadata{{}}},
		&lancepb.Transaction_Rewrite{Groups: []*lancepb.Transaction_Rewrite_RewriteGroup{{}}}, &lancepb.Transaction_Merge{},
		&lancepb.Transaction_Restore{}, &lancepb.Transaction_ReserveFragments{},
		&lancepb.Transaction_Update{FieldsModified: []uint32{1 << 31}, UpdateMode: 7, UpdatedFragments: []*lancepb.DataFragment{{}}},
		&lancepb.Transaction_Project{}, &lancepb.Transaction_UpdateConfig{}, &lancepb.Transaction_DataReplacement{Replacements: []*lancepb.Transaction_DataReplacementGroup{{}}},
		&lancepb.Transaction_UpdateBases{NewBases: []*lancepb.BasePath{{}}},
		&lancepb.Transaction_DataOverlay{Groups: []*lancepb.Transaction_DataOverlayGroup{{Overlays: []*lancepb.DataOverlayFile{{}}}}},
		// Nil elements, which decoding never produces but Go callers can.
		&lancepb.Transaction_UpdateBases{NewBases: []*lancepb.BasePath{nil}},
		&lancepb.Transaction_UpdateConfig{ConfigUpdates: &lancepb.Transaction_UpdateMap{UpdateEntries: []*lancepb.Transaction_UpdateMapEntry{nil}}},
		&lancepb.Transaction_DataOverlay{Groups: []*lancepb.Transaction_DataOverlayGroup{nil, {Overlays: []*lancepb.DataOverlayFile{nil}}}},
		&lancepb.Transaction_CreateIndex{NewIndices: []*lancepb.IndexMetadata{nil}, RemovedIndices: []*lancepb.IndexMetadata{nil}},
		&lancepb.Transaction_Rewrite{Groups: []*lancepb.Transaction_Rewrite_RewriteGroup{nil}},
		&lancepb.Transaction_DataReplacement{Replacements: []*lancepb.Transaction_DataReplacementGroup{nil}},
		&lancepb.Transaction_Delete{UpdatedFragments: []*lancepb.DataFragment{nil}},
		&lancepb.Transaction_Project{Schema: []*lancepb.Field{nil}},
	} {
		txns = append(txns, cfTx("odd", op))
	}
	for _, a := range txns {
		for _, b := range txns {
			if _, err := table.CheckConflict(a, b); err != nil && !errors.Is(err, table.ErrMalformed) {
				t.Errorf("CheckConflict(%v, %v): %v", a.GetOperation(), b.GetOperation(), err)
			}
		}
	}
}
