package logrec_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

var schema = []*lancepb.Field{{Id: 0, Name: "id", ParentId: -1, LogicalType: "int64"}}

func fragment(path string) *lancepb.DataFragment {
	return &lancepb.DataFragment{PhysicalRows: 10, Files: []*lancepb.DataFile{{Path: path, Fields: []int32{0}, ColumnIndices: []int32{0}, FileMajorVersion: 2}}}
}

// committed returns the committed decision of version v of ds.
func committed(t *testing.T, ds string, v uint64) *cellguardpb.Decision {
	t.Helper()
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", v)
	txn := &lancepb.Transaction{Uuid: id, ReadVersion: v - 1, Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{
		Fragments: []*lancepb.DataFragment{fragment(id + ".lance")},
	}}}
	if v == 1 {
		txn.Operation = &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{Schema: schema, Fragments: []*lancepb.DataFragment{fragment(id + ".lance")}}}
	}
	b, err := proto.Marshal(txn)
	if err != nil {
		t.Fatal(err)
	}
	return &cellguardpb.Decision{Dataset: ds, TxnUuid: id, TxnSeq: v, Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED, Version: v, Transaction: b}
}
