package data_test

import (
	"context"
	"fmt"
	"log"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

// A worker writes a fragment with a column x, publishes y = 2x as a column
// file, a corrected x as an overlay (for cellguard readers only: Lance 8
// has no overlay reader), a deletion and a new fragment, and scans the
// versions that the transactions make.
func Example() {
	ctx := context.Background()
	s, err := data.Open(ctx, "mem://")
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	fields := []*lancepb.Field{
		{Name: "x", Id: 0, ParentId: -1, LogicalType: "int64"},
		{Name: "y", Id: 1, ParentId: -1, LogicalType: "int64", Nullable: true},
	}
	schema, err := table.NewSchema(fields)
	if err != nil {
		log.Fatal(err)
	}
	mem := memory.NewGoAllocator()
	int64s := func(v ...int64) arrow.Array {
		b := array.NewInt64Builder(mem)
		defer b.Release()
		b.AppendValues(v, nil)
		return b.NewArray()
	}

	// Version 1: a table of one fragment with x; y reads as null.
	frag, err := s.WriteFragment(ctx, schema, map[int32]arrow.Array{0: int64s(1, 2, 3, 4)})
	if err != nil {
		log.Fatal(err)
	}
	v1, err := table.Create(&lancepb.Transaction{Operation: &lancepb.Transaction_Overwrite_{
		Overwrite: &lancepb.Transaction_Overwrite{Fragments: []*lancepb.DataFragment{frag}, Schema: fields}}})
	if err != nil {
		log.Fatal(err)
	}

	// Version 2: y = 2x, computed from what was read at version 1.
	f0, _ := v1.Fragment(0)
	y, err := s.WriteColumns(ctx, schema, f0, map[int32]arrow.Array{1: int64s(2, 4, 6, 8)})
	if err != nil {
		log.Fatal(err)
	}
	v2 := commit(ctx, v1, &lancepb.Transaction{Operation: &lancepb.Transaction_DataReplacement_{
		DataReplacement: &lancepb.Transaction_DataReplacement{
			Replacements: []*lancepb.Transaction_DataReplacementGroup{{FragmentId: 0, NewFile: y}}}}})

	// Version 3: x at offset 2 becomes 30, as an overlay.
	ov, err := s.WriteOverlay(ctx, schema, f0, map[int32]data.Cells{0: {Offsets: []uint32{2}, Values: int64s(30)}})
	if err != nil {
		log.Fatal(err)
	}
	v3 := commit(ctx, v2, &lancepb.Transaction{Operation: &lancepb.Transaction_DataOverlay_{
		DataOverlay: &lancepb.Transaction_DataOverlay{
			Groups: []*lancepb.Transaction_DataOverlayGroup{{FragmentId: 0, Overlays: []*lancepb.DataOverlayFile{ov}}}}}})

	// Version 4: row 0 is deleted.
	del, err := s.DeleteRows(ctx, v3, 0, []uint32{0})
	if err != nil {
		log.Fatal(err)
	}
	f3, _ := v3.Fragment(0)
	post := proto.CloneOf(f3.Proto()) // the fragment as read, with its new deletion file
	post.DeletionFile = del
	v4 := commit(ctx, v3, &lancepb.Transaction{Operation: &lancepb.Transaction_Delete_{
		Delete: &lancepb.Transaction_Delete{UpdatedFragments: []*lancepb.DataFragment{post}}}})

	// Version 5: a new fragment, in the file version v4 records (2.1).
	more, err := s.WriteFragmentFor(ctx, v4, nil, map[int32]arrow.Array{0: int64s(5, 6)})
	if err != nil {
		log.Fatal(err)
	}
	v5 := commit(ctx, v4, &lancepb.Transaction{Operation: &lancepb.Transaction_Append_{
		Append: &lancepb.Transaction_Append{Fragments: []*lancepb.DataFragment{more}}}})

	for _, m := range []*table.Manifest{v1, v2, v3, v4, v5} {
		for b, err := range s.Scan(ctx, m, []int32{0, 1}) {
			if err != nil {
				log.Fatal(err)
			}
			fmt.Printf("v%d fragment %d offsets %v x %v y %v\n", m.Version(), b.FragmentID, b.Offsets, b.Columns[0], b.Columns[1])
		}
	}
	// Output:
	// v1 fragment 0 offsets [0 1 2 3] x [1 2 3 4] y [(null) (null) (null) (null)]
	// v2 fragment 0 offsets [0 1 2 3] x [1 2 3 4] y [2 4 6 8]
	// v3 fragment 0 offsets [0 1 2 3] x [1 2 30 4] y [2 4 6 8]
	// v4 fragment 0 offsets [1 2 3] x [2 30 4] y [4 6 8]
	// v5 fragment 0 offsets [1 2 3] x [2 30 4] y [4 6 8]
	// v5 fragment 1 offsets [0 1] x [5 6] y [(null) (null)]
}

// commit applies a transaction read at head, as the committer would.
func commit(ctx context.Context, head *table.Manifest, txn *lancepb.Transaction) *table.Manifest {
	txn.ReadVersion = head.Version()
	next, err := table.Apply(ctx, head, txn, nil)
	if err != nil {
		log.Fatal(err)
	}
	return next
}
