// Package decidetest holds the test helpers the committer's tests and
// the decision core's (committer/decide) share: transactions on a
// two-column table, preconditions, and in-memory histories.
package decidetest

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// Schema is the tests' table: id int64, x int64 (nullable).
var Schema = []*lancepb.Field{
	{Id: 0, Name: "id", ParentId: -1, LogicalType: "int64"},
	{Id: 1, Name: "x", ParentId: -1, LogicalType: "int64", Nullable: true},
}

// DataFragment is a fragment of rows rows in one data file at path,
// holding both fields of Schema.
func DataFragment(path string, rows uint64) *lancepb.DataFragment {
	return &lancepb.DataFragment{
		PhysicalRows: rows,
		Files:        []*lancepb.DataFile{{Path: path, Fields: []int32{0, 1}, ColumnIndices: []int32{0, 1}, FileMajorVersion: 2, FileMinorVersion: 0}},
	}
}

// CreateTxn creates the table: an Overwrite of Schema with one fragment
// of 100 rows.
func CreateTxn(id string) *lancepb.Transaction {
	return &lancepb.Transaction{Uuid: id, Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{
		Schema: Schema, Fragments: []*lancepb.DataFragment{DataFragment("data/"+id+".lance", 100)},
	}}}
}

// AppendTxn appends one fragment of 10 rows, read at version rv.
func AppendTxn(id string, rv uint64) *lancepb.Transaction {
	return &lancepb.Transaction{Uuid: id, ReadVersion: rv, Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{
		Fragments: []*lancepb.DataFragment{DataFragment("data/"+id+".lance", 10)},
	}}}
}

// DeleteFragmentTxn deletes fragment frag whole, read at version rv.
func DeleteFragmentTxn(id string, rv, frag uint64) *lancepb.Transaction {
	return &lancepb.Transaction{Uuid: id, ReadVersion: rv, Operation: &lancepb.Transaction_Delete_{Delete: &lancepb.Transaction_Delete{
		DeletedFragmentIds: []uint64{frag}, Predicate: "true",
	}}}
}

// WithPre sets txn's preconditions and returns it.
func WithPre(txn *lancepb.Transaction, pre ...*lancepb.Precondition) *lancepb.Transaction {
	txn.Preconditions = pre
	return txn
}

// CellsUnchanged protects the cells of fields in rows.
func CellsUnchanged(fields []int32, rows ...*lancepb.FragmentRows) *lancepb.Precondition {
	return &lancepb.Precondition{Kind: &lancepb.Precondition_CellsUnchanged{CellsUnchanged: &lancepb.CellsUnchanged{FieldIds: fields, Rows: rows}}}
}

// WholeFragment selects every row of fragment id.
func WholeFragment(id uint64) *lancepb.FragmentRows {
	return &lancepb.FragmentRows{FragmentId: id, Selection: &lancepb.FragmentRows_WholeFragment{WholeFragment: true}}
}

// StaleTxn protects fragment 1 as read at version 2: in the tests' stale
// log, version 3 deleted it.
func StaleTxn() *lancepb.Transaction {
	return WithPre(AppendTxn(NewUUID(), 2), CellsUnchanged([]int32{1}, WholeFragment(1)))
}

// NewUUID is a random (version 4) UUID.
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// MustMarshal encodes m or fails the test.
func MustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// MemHistory serves versions outside a state's window from a full copy.
type MemHistory struct {
	Manifests map[uint64]*table.Manifest
	Txns      map[uint64]*lancepb.Transaction
}

// NewMemHistory is an empty MemHistory.
func NewMemHistory() *MemHistory {
	return &MemHistory{Manifests: map[uint64]*table.Manifest{}, Txns: map[uint64]*lancepb.Transaction{}}
}

func (h *MemHistory) Manifest(_ context.Context, v uint64) (*table.Manifest, error) {
	if m, ok := h.Manifests[v]; ok {
		return m, nil
	}
	return nil, table.ErrVersionNotFound
}

func (h *MemHistory) Committed(_ context.Context, v uint64) (*lancepb.Transaction, error) {
	if t, ok := h.Txns[v]; ok {
		return t, nil
	}
	return nil, table.ErrVersionNotFound
}

// CountingHistory is a MemHistory that counts what the decision core
// asks of it: every manifest or transaction read from "older" history is
// work a committer does against checkpoints and the log.
type CountingHistory struct {
	MemHistory
	ManifestReads, CommittedReads int
}

// NewCountingHistory is an empty CountingHistory.
func NewCountingHistory() *CountingHistory {
	return &CountingHistory{MemHistory: *NewMemHistory()}
}

func (h *CountingHistory) Manifest(ctx context.Context, v uint64) (*table.Manifest, error) {
	h.ManifestReads++
	return h.MemHistory.Manifest(ctx, v)
}

func (h *CountingHistory) Committed(ctx context.Context, v uint64) (*lancepb.Transaction, error) {
	h.CommittedReads++
	return h.MemHistory.Committed(ctx, v)
}

// Reset sets the counts to 0.
func (h *CountingHistory) Reset() { h.ManifestReads, h.CommittedReads = 0, 0 }
