package evaluator

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// A transaction's preconditions in wire form, for validation tests.
func cells(fields []int32, rows ...*lancepb.FragmentRows) *lancepb.Precondition {
	return &lancepb.Precondition{Kind: &lancepb.Precondition_CellsUnchanged{
		CellsUnchanged: &lancepb.CellsUnchanged{FieldIds: fields, Rows: rows},
	}}
}

func treeMap(fields []int32, tree []byte) *lancepb.Precondition {
	return &lancepb.Precondition{Kind: &lancepb.Precondition_CellsUnchanged{
		CellsUnchanged: &lancepb.CellsUnchanged{FieldIds: fields, RowAddrTreeMap: tree},
	}}
}

func whole(id uint64) *lancepb.FragmentRows {
	return &lancepb.FragmentRows{FragmentId: id, Selection: &lancepb.FragmentRows_WholeFragment{WholeFragment: true}}
}

func offs(id uint64, offsets ...uint32) *lancepb.FragmentRows {
	return &lancepb.FragmentRows{FragmentId: id, Selection: &lancepb.FragmentRows_OffsetBitmap{OffsetBitmap: bitmapOf(offsets...)}}
}

func rawRows(id uint64, b []byte) *lancepb.FragmentRows {
	return &lancepb.FragmentRows{FragmentId: id, Selection: &lancepb.FragmentRows_OffsetBitmap{OffsetBitmap: b}}
}

// withUnknown returns pb with an unknown field number n appended.
func withUnknown[M proto.Message](pb M, n protowire.Number) M {
	b := protowire.AppendTag(nil, n, protowire.VarintType)
	b = protowire.AppendVarint(b, 1)
	pb.ProtoReflect().SetUnknown(b)
	return pb
}

func tree(entries ...any) []byte {
	// entries: fragment id (uint32), then bitmap bytes (nil = whole)
	b := binary.LittleEndian.AppendUint32(nil, uint32(len(entries)/2))
	for i := 0; i < len(entries); i += 2 {
		b = binary.LittleEndian.AppendUint32(b, entries[i].(uint32))
		bm, _ := entries[i+1].([]byte)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(bm)))
		b = append(b, bm...)
	}
	return b
}

func txnWith(op string, readVersion uint64, pre ...*lancepb.Precondition) *lancepb.Transaction {
	txn := &lancepb.Transaction{ReadVersion: readVersion, Uuid: "u", Preconditions: pre}
	switch op {
	case "append":
		txn.Operation = &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{}}
	case "replace":
		txn.Operation = &lancepb.Transaction_DataReplacement_{DataReplacement: &lancepb.Transaction_DataReplacement{}}
	case "overwrite":
		txn.Operation = &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{}}
	case "restore":
		txn.Operation = &lancepb.Transaction_Restore_{Restore: &lancepb.Transaction_Restore{Version: 3}}
	case "clone":
		txn.Operation = &lancepb.Transaction_Clone_{Clone: &lancepb.Transaction_Clone{}}
	case "memwal":
		txn.Operation = &lancepb.Transaction_UpdateMemWalState_{UpdateMemWalState: &lancepb.Transaction_UpdateMemWalState{}}
	case "none":
	}
	return txn
}

// TestValidation lists every way a precondition is invalid. Each is a
// non-retryable *InvalidError naming the precondition and the reason.
func TestValidation(t *testing.T) {
	x := []int32{fX}
	tight := Limits{MaxPreconditions: 2, MaxFields: 3, MaxFragments: 2, MaxCellGroups: 5, MaxSelectionBytes: 64}
	tests := []struct {
		name  string
		txn   *lancepb.Transaction
		lim   Limits
		index int
		want  InvalidReason
	}{
		{"unknown kind: nothing set", txnWith("replace", 41, &lancepb.Precondition{}), Limits{}, 0, InvalidKind},
		{"unknown kind: a newer kind at field 2", txnWith("replace", 41, withUnknown(&lancepb.Precondition{}, 2)), Limits{}, 0, InvalidKind},
		{"unknown kind: an unknown field beside cells_unchanged", txnWith("replace", 41, cells(x, whole(3)), withUnknown(cells(x, whole(3)), 9)), Limits{}, 1, InvalidKind},
		{"unknown field in CellsUnchanged", txnWith("replace", 41, &lancepb.Precondition{Kind: &lancepb.Precondition_CellsUnchanged{
			CellsUnchanged: withUnknown(&lancepb.CellsUnchanged{FieldIds: x, Rows: []*lancepb.FragmentRows{whole(3)}}, 7)}}), Limits{}, 0, InvalidEncoding},
		{"unknown field in FragmentRows", txnWith("replace", 41, cells(x, withUnknown(whole(3), 5))), Limits{}, 0, InvalidEncoding},
		{"both row forms set", txnWith("replace", 41, &lancepb.Precondition{Kind: &lancepb.Precondition_CellsUnchanged{
			CellsUnchanged: &lancepb.CellsUnchanged{FieldIds: x, Rows: []*lancepb.FragmentRows{whole(3)}, RowAddrTreeMap: tree(uint32(3), nil)}}}), Limits{}, 0, InvalidEncoding},
		{"no rows in either form", txnWith("replace", 41, cells(x)), Limits{}, 0, InvalidEmptySelection},
		{"empty field list", txnWith("replace", 41, cells(nil, whole(3))), Limits{}, 0, InvalidEmptyFields},
		{"negative field id", txnWith("replace", 41, cells([]int32{fX, -2}, whole(3))), Limits{}, 0, InvalidNegativeField},
		{"field not in the schema at the read version", txnWith("replace", 41, cells([]int32{42}, whole(3))), Limits{}, 0, InvalidUnknownField},
		{"fragment not in the read version", txnWith("replace", 41, cells(x, whole(3)), cells(x, whole(9))), Limits{}, 1, InvalidUnknownFragment},
		{"row address map names a fragment not in the read version", txnWith("replace", 41, treeMap(x, tree(uint32(7), nil))), Limits{}, 0, InvalidUnknownFragment},
		{"offset at the fragment's physical row count", txnWith("replace", 41, cells(x, offs(3, 1, rows))), Limits{}, 0, InvalidOffset},
		{"malformed bitmap", txnWith("replace", 41, cells(x, rawRows(3, []byte{1, 2, 3}))), Limits{}, 0, InvalidEncoding},
		{"bitmap with trailing bytes", txnWith("replace", 41, cells(x, rawRows(3, append(bitmapOf(1), 0)))), Limits{}, 0, InvalidEncoding},
		{"empty bitmap", txnWith("replace", 41, cells(x, rawRows(3, bitmapOf()))), Limits{}, 0, InvalidEmptySelection},
		{"whole_fragment = false", txnWith("replace", 41, cells(x, &lancepb.FragmentRows{FragmentId: 3,
			Selection: &lancepb.FragmentRows_WholeFragment{}})), Limits{}, 0, InvalidEncoding},
		{"fragment rows with no selection", txnWith("replace", 41, cells(x, &lancepb.FragmentRows{FragmentId: 3})), Limits{}, 0, InvalidEncoding},
		{"fragment selected twice", txnWith("replace", 41, cells(x, offs(3, 1), offs(3, 2))), Limits{}, 0, InvalidEncoding},
		{"malformed row address map", txnWith("replace", 41, treeMap(x, []byte{1, 0, 0, 0, 3})), Limits{}, 0, InvalidEncoding},
		{"row address map with an empty bitmap", txnWith("replace", 41, treeMap(x, tree(uint32(3), bitmapOf()))), Limits{}, 0, InvalidEncoding},
		{"row address map selecting no fragment", txnWith("replace", 41, treeMap(x, tree())), Limits{}, 0, InvalidEmptySelection},
		{"preconditions on Overwrite", txnWith("overwrite", 41, cells(x, whole(3))), Limits{}, -1, InvalidOperation},
		{"preconditions on Restore", txnWith("restore", 41, cells(x, whole(3))), Limits{}, -1, InvalidOperation},
		{"preconditions on Clone", txnWith("clone", 41, cells(x, whole(3))), Limits{}, -1, InvalidOperation},
		{"preconditions on dataset creation (read version 0)", txnWith("append", 0, cells(x, whole(3))), Limits{}, -1, InvalidOperation},
		{"preconditions on a detached read version", txnWith("append", 1<<63|41, cells(x, whole(3))), Limits{}, -1, InvalidOperation},
		{"preconditions on an unsupported operation", txnWith("memwal", 41, cells(x, whole(3))), Limits{}, -1, InvalidOperation},
		{"preconditions on a transaction without operation", txnWith("none", 41, cells(x, whole(3))), Limits{}, -1, InvalidOperation},
		{"limit: preconditions", txnWith("replace", 41, cells(x, whole(3)), cells(x, whole(3)), cells(x, whole(3))), tight, -1, InvalidLimit},
		{"limit: fields", txnWith("replace", 41, cells([]int32{0, 1, 2, 3}, whole(3))), tight, 0, InvalidLimit},
		{"limit: fragments", txnWith("replace", 41, cells(x, whole(0), whole(1), whole(2))), tight, 0, InvalidLimit},
		{"limit: fragments in a row address map, before decoding", txnWith("replace", 41, treeMap(x, tree(uint32(0), nil, uint32(1), nil, uint32(2), nil))), tight, 0, InvalidLimit},
		{"limit: fields × fragments", txnWith("replace", 41, cells([]int32{0, 1, 2}, whole(0), whole(1))), tight, 0, InvalidLimit},
		{"limit: selection bytes", txnWith("replace", 41, cells(x, offs(3, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31, 33, 35, 37, 39, 41, 43, 45, 47, 49))), tight, 0, InvalidLimit},
	}
	pinned := newHist(t).pinned()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Prepare(pinned, tc.txn, tc.lim)
			var inv *InvalidError
			if !errors.As(err, &inv) {
				t.Fatalf("err = %v, want *InvalidError", err)
			}
			if !errors.Is(err, ErrInvalidPrecondition) {
				t.Errorf("errors.Is(%v, ErrInvalidPrecondition) = false", err)
			}
			if inv.Reason != tc.want || inv.Precondition != tc.index {
				t.Errorf("got %v (index %d), want reason %v index %d", err, inv.Precondition, tc.want, tc.index)
			}
			if !strings.Contains(err.Error(), tc.want.String()) {
				t.Errorf("message %q does not name the reason", err)
			}
		})
	}
}

func TestPrepareValid(t *testing.T) {
	pinned := newHist(t).pinned()
	// No preconditions: valid on any operation.
	for _, op := range []string{"overwrite", "restore", "clone", "append"} {
		if pre, err := Prepare(pinned, txnWith(op, 0), Limits{}); err != nil || len(pre) != 0 {
			t.Errorf("%s without preconditions: %v, %v", op, pre, err)
		}
	}
	// Both row forms decode to the same selection; duplicate fields merge.
	txn := txnWith("replace", 41,
		cells([]int32{fX, fY, fX}, offs(3, 17, 18), whole(1)),
		treeMap([]int32{fX}, tree(uint32(1), nil, uint32(3), bitmapOf(17, 18))),
	)
	pre, err := Prepare(pinned, txn, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got := pre[0].Fields; len(got) != 2 || got[0] != fX || got[1] != fY {
		t.Errorf("fields %v, want [1 2]", got)
	}
	if !pre[0].Rows.Equal(pre[1].Rows) {
		t.Errorf("structured %v != tree map %v", pre[0].Rows, pre[1].Rows)
	}
	if got := pre[0].Rows.String(); got != "{1:all 3:[17 18]}" {
		t.Errorf("rows %s", got)
	}
	// A pinned manifest at another version is misuse, not invalid input.
	err = Validate(pinned, txnWith("replace", 40), pre, Limits{})
	if err == nil || errors.Is(err, ErrInvalidPrecondition) {
		t.Errorf("wrong pin: err = %v", err)
	}
	// Round trip through the wire form.
	back, err := Decode(Protos(pre), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pre {
		if !back[i].Rows.Equal(pre[i].Rows) || len(back[i].Fields) != len(pre[i].Fields) {
			t.Errorf("round trip %d: %v %v", i, back[i], pre[i])
		}
	}
}

func TestDefaultLimits(t *testing.T) {
	if got := (Limits{}).withDefaults(); got != DefaultLimits() {
		t.Errorf("zero limits = %+v", got)
	}
	if got := (Limits{MaxFields: 3}).withDefaults(); got.MaxFields != 3 || got.MaxFragments != DefaultLimits().MaxFragments {
		t.Errorf("partial limits = %+v", got)
	}
}
