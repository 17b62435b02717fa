package events_test

import (
	"fmt"
	"testing"

	"cellguard/events"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

func TestSummarize(t *testing.T) {
	file := func(path string, fields ...int32) *lancepb.DataFile {
		idx := make([]int32, len(fields))
		for i := range idx {
			idx[i] = int32(i)
		}
		return &lancepb.DataFile{Path: path, Fields: fields, ColumnIndices: idx, FileMajorVersion: 2, FileMinorVersion: 1}
	}
	frag := func(rows uint64, files ...*lancepb.DataFile) *lancepb.DataFragment {
		return &lancepb.DataFragment{PhysicalRows: rows, Files: files}
	}
	v1, err := table.Create(&lancepb.Transaction{Uuid: "c", Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{
		Schema: fields, Fragments: []*lancepb.DataFragment{frag(10, file("a", 0)), frag(5, file("b", 0))}}}})
	if err != nil {
		t.Fatal(err)
	}
	apply := func(m *table.Manifest, txn *lancepb.Transaction) *table.Manifest {
		t.Helper()
		txn.ReadVersion, txn.Uuid = m.Version(), "u"
		next, err := table.Apply(t.Context(), m, txn, nil)
		if err != nil {
			t.Fatal(err)
		}
		return next
	}
	f0, _ := v1.Fragment(0)
	withDel := f0.Proto()
	withDel = &lancepb.DataFragment{Id: withDel.Id, PhysicalRows: 10, Files: withDel.Files,
		DeletionFile: &lancepb.DeletionFile{FileType: lancepb.DeletionFile_BITMAP, Id: 7, NumDeletedRows: 3}}
	for _, tc := range []struct {
		name       string
		prev, next *table.Manifest
		want       events.Summary
	}{
		{"create", nil, v1, events.Summary{FragmentsAdded: []uint64{0, 1}, Written: map[uint64][]int32{0: {0}, 1: {0}}, RowsAdded: 15, SchemaChanged: true}},
		{"append", v1, apply(v1, &lancepb.Transaction{Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{
			Fragments: []*lancepb.DataFragment{frag(4, file("c", 0))}}}}),
			events.Summary{FragmentsAdded: []uint64{2}, Written: map[uint64][]int32{2: {0}}, RowsAdded: 4}},
		{"replace y", v1, apply(v1, &lancepb.Transaction{Operation: &lancepb.Transaction_DataReplacement_{DataReplacement: &lancepb.Transaction_DataReplacement{
			Replacements: []*lancepb.Transaction_DataReplacementGroup{{FragmentId: 1, NewFile: file("y", 1)}}}}}),
			events.Summary{FragmentsUpdated: []uint64{1}, Written: map[uint64][]int32{1: {1}}}},
		{"delete rows and a fragment", v1, apply(v1, &lancepb.Transaction{Operation: &lancepb.Transaction_Delete_{Delete: &lancepb.Transaction_Delete{
			UpdatedFragments: []*lancepb.DataFragment{withDel}, DeletedFragmentIds: []uint64{1}}}}),
			events.Summary{FragmentsUpdated: []uint64{0}, FragmentsRemoved: []uint64{1}, Written: map[uint64][]int32{}, RowsDeleted: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := events.Summarize(tc.prev, tc.next)
			if got, want := show(got), show(tc.want); got != want {
				t.Errorf("Summarize = %s, want %s", got, want)
			}
		})
	}
}

// show renders every field of a summary; nil and empty print alike.
func show(s events.Summary) string {
	return fmt.Sprintf("added %v removed %v updated %v written %v rows +%d -%d schema %v",
		s.FragmentsAdded, s.FragmentsRemoved, s.FragmentsUpdated, s.Written, s.RowsAdded, s.RowsDeleted, s.SchemaChanged)
}
