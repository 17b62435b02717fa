package evaluator_test

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"cellguard/evaluator"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// A worker read x at version 41 to compute y = f(x). Before its commit
// lands, transaction "7f3a…" overlays new values of x on rows 17 and 18 of
// fragment 3 (version 42), and another writer republishes z in fragment 1
// (version 43). The precondition on x rejects, naming the cells, the
// version and the transaction.
func ExampleEvaluate() {
	field := func(id int32, name string) *lancepb.Field {
		return &lancepb.Field{Type: lancepb.Field_LEAF, Id: id, ParentId: -1, Name: name, LogicalType: "double", Nullable: true}
	}
	file := func(path string, fields ...int32) *lancepb.DataFile {
		return &lancepb.DataFile{Path: path, Fields: fields, ColumnIndices: []int32{0}, FileMajorVersion: 2, FileMinorVersion: 1}
	}
	var frags []*lancepb.DataFragment
	for id := range uint64(4) {
		frags = append(frags, &lancepb.DataFragment{Id: id, PhysicalRows: 100, Files: []*lancepb.DataFile{
			file(fmt.Sprintf("x-%d.lance", id), 0), file(fmt.Sprintf("y-%d.lance", id), 1), file(fmt.Sprintf("z-%d.lance", id), 2),
		}})
	}
	v41, _ := table.FromProto(&lancepb.Manifest{Version: 41, Fields: []*lancepb.Field{field(0, "x"), field(1, "y"), field(2, "z")}, Fragments: frags})

	// Version 42: an overlay with new x values at rows 17 and 18 of fragment 3.
	b := v41.Edit()
	b.Header().Version = 42
	f3, _ := b.Fragment(3)
	pb := proto.CloneOf(f3.Proto())
	pb.Overlays = []*lancepb.DataOverlayFile{{
		DataFile:         file("x-overlay.lance", 0),
		Coverage:         &lancepb.DataOverlayFile_SharedOffsetBitmap{SharedOffsetBitmap: evaluator.Offsets(3, 17, 18).Proto()[0].GetOffsetBitmap()},
		CommittedVersion: 42,
	}}
	_ = b.Replace(table.NewFragment(pb))
	v42 := b.Build()

	// Version 43: z republished in fragment 1 (the old file is replaced).
	b = v42.Edit()
	b.Header().Version = 43
	f1, _ := b.Fragment(1)
	pb = proto.CloneOf(f1.Proto())
	pb.Files[2] = file("z-1-v43.lance", 2)
	_ = b.Replace(table.NewFragment(pb))
	v43 := b.Build()

	// The precondition: x unchanged in fragments 0–3 since version 41.
	pre := []evaluator.Precondition{evaluator.CellsUnchanged(evaluator.WholeFragments(0, 1, 2, 3), 0)}
	opts := evaluator.Options{} // ProtectedRows
	v, err := evaluator.Evaluate(context.Background(), v41, v43, pre, opts)
	if err != nil {
		panic(err)
	}
	v = evaluator.Blame(context.Background(), v41, []evaluator.Step{
		{Version: 42, TxnUUID: "7f3a…", Manifest: v42},
		{Version: 43, TxnUUID: "c01d…", Manifest: v43},
	}, pre, v, opts)
	fmt.Println(v.Outcome)
	for _, x := range v.Violations {
		fmt.Printf("field %d, fragment %d, rows %v: %v at version %d by %s\n",
			x.FieldID, x.FragmentID, x.Rows, x.Reason, x.Version, x.TxnUUID)
	}

	// A precondition on z in fragments 0, 2 and 3 holds: neither the x
	// overlay nor fragment 1's new z file touches those cells.
	pre = []evaluator.Precondition{evaluator.CellsUnchanged(evaluator.WholeFragments(0, 2, 3), 2)}
	v, _ = evaluator.Evaluate(context.Background(), v41, v43, pre, opts)
	fmt.Println(v.Outcome)
	// Output:
	// reject
	// field 0, fragment 3, rows [17 18]: OverlayChanged at version 42 by 7f3a…
	// accept
}
