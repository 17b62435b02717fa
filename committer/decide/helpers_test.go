package decide

import (
	"cellguard/proto/lancepb"
	"cellguard/table"
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
)

// Helpers the decision core's tests share with the committer's
// (committer/harness_test.go, stale_test.go, badinput_test.go).

func appendTxn(id string, rv uint64) *lancepb.Transaction {
	return &lancepb.Transaction{Uuid: id, ReadVersion: rv, Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{
		Fragments: []*lancepb.DataFragment{dataFragment("data/"+id+".lance", 10)},
	}}}
}

func createTxn(id string) *lancepb.Transaction {
	return &lancepb.Transaction{Uuid: id, Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{
		Schema: testSchema, Fragments: []*lancepb.DataFragment{dataFragment("data/"+id+".lance", 100)},
	}}}
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func dataFragment(path string, rows uint64) *lancepb.DataFragment {
	return &lancepb.DataFragment{
		PhysicalRows: rows,
		Files:        []*lancepb.DataFile{{Path: path, Fields: []int32{0, 1}, ColumnIndices: []int32{0, 1}, FileMajorVersion: 2, FileMinorVersion: 0}},
	}
}

var testSchema = []*lancepb.Field{
	{Id: 0, Name: "id", ParentId: -1, LogicalType: "int64"},
	{Id: 1, Name: "x", ParentId: -1, LogicalType: "int64", Nullable: true},
}

func cellsUnchanged(fields []int32, rows ...*lancepb.FragmentRows) *lancepb.Precondition {
	return &lancepb.Precondition{Kind: &lancepb.Precondition_CellsUnchanged{CellsUnchanged: &lancepb.CellsUnchanged{FieldIds: fields, Rows: rows}}}
}

func wholeFragment(id uint64) *lancepb.FragmentRows {
	return &lancepb.FragmentRows{FragmentId: id, Selection: &lancepb.FragmentRows_WholeFragment{WholeFragment: true}}
}

// countingHistory is a memHistory that counts what the decision core
// asks of it: every manifest or transaction read from "older" history is
// work a committer does against checkpoints and the log.
type countingHistory struct {
	memHistory
	manifests, committed int
}

func newCountingHistory() *countingHistory {
	return &countingHistory{memHistory: memHistory{ms: map[uint64]*table.Manifest{}, txns: map[uint64]*lancepb.Transaction{}}}
}

func (h *countingHistory) Manifest(ctx context.Context, v uint64) (*table.Manifest, error) {
	h.manifests++
	return h.memHistory.Manifest(ctx, v)
}

func (h *countingHistory) Committed(ctx context.Context, v uint64) (*lancepb.Transaction, error) {
	h.committed++
	return h.memHistory.Committed(ctx, v)
}

func (h *countingHistory) reset() { h.manifests, h.committed = 0, 0 }

func deleteFragmentTxn(id string, rv, frag uint64) *lancepb.Transaction {
	return &lancepb.Transaction{Uuid: id, ReadVersion: rv, Operation: &lancepb.Transaction_Delete_{Delete: &lancepb.Transaction_Delete{
		DeletedFragmentIds: []uint64{frag}, Predicate: "true",
	}}}
}

// staleTxn protects fragment 1 as read at version 2: version 3 deleted it.
func staleTxn() *lancepb.Transaction {
	return withPre(appendTxn(newUUID(), 2), cellsUnchanged([]int32{1}, wholeFragment(1)))
}

func staleLimits() Limits {
	return Limits{MaxTxnBytes: 1 << 20, Window: 16, MaxLag: 100000, MaxRebaseLag: 1000, IndexBytes: 8 << 20}
}
func withPre(txn *lancepb.Transaction, pre ...*lancepb.Precondition) *lancepb.Transaction {
	txn.Preconditions = pre
	return txn
}
