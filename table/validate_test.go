package table_test

import (
	"errors"
	"testing"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// Transactions with empty or foreign data: each is an invalid
// transaction, neither committed nor retryable.
func TestApplyRejectsEmptyAndForeignData(t *testing.T) {
	overwrite := func(frags ...*lancepb.DataFragment) *lancepb.Transaction {
		return &lancepb.Transaction{ReadVersion: 3, Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{
			Schema: apSchema()[:2], Fragments: frags,
		}}}
	}
	apRun(t, []apCase{
		{name: "append of no fragments", txn: apAppend(3), wantErr: table.ErrInvalidTransaction},
		{name: "append of a fragment with no rows", txn: apAppend(3, apFrag(0, 5), apFrag(0, 0)), wantErr: table.ErrInvalidTransaction},
		{name: "update adding a fragment with no rows", txn: apUpdate(3, &lancepb.Transaction_Update{
			NewFragments: []*lancepb.DataFragment{apFrag(0, 0)},
		}), wantErr: table.ErrInvalidTransaction},
		{name: "overwrite with a fragment with no rows", txn: overwrite(apFrag(0, 0, apFile("a", 0, 1))), wantErr: table.ErrInvalidTransaction},
		{name: "overwrite whose file holds a field its schema lacks", txn: overwrite(apFrag(0, 3, apFile("a", 0, 1, 2))), wantErr: table.ErrInvalidTransaction},
		{name: "overwrite with no fragments is an empty table", txn: overwrite()},
		{name: "overwrite whose files match its schema", txn: overwrite(apFrag(0, 3, apFile("a", 0, 1)))},
		{name: "restore to version 0", txn: apRestore(3, 0), wantErr: table.ErrInvalidTransaction},
		{name: "restore beyond head", txn: apRestore(3, 4), wantErr: table.ErrInvalidTransaction},
	})
}

func TestApplyMergeChecksNewFilesAgainstItsSchema(t *testing.T) {
	head := apLoad(t, apManifest(3, apFrag(0, 10)))
	f0, _ := head.Fragment(0)
	merge := func(fields []*lancepb.Field, newFile *lancepb.DataFile) *lancepb.Transaction {
		f := apFrag(0, 10, append(append([]*lancepb.DataFile(nil), f0.Files()...), newFile)...)
		return &lancepb.Transaction{ReadVersion: 3, Operation: &lancepb.Transaction_Merge_{Merge: &lancepb.Transaction_Merge{
			Fragments: []*lancepb.DataFragment{f}, Schema: fields,
		}}}
	}
	withE := append(apSchema(), &lancepb.Field{Id: 4, ParentId: -1, Name: "e", LogicalType: "int32", Type: lancepb.Field_LEAF})
	if _, err := table.Apply(t.Context(), head, merge(withE, apFile("e.lance", 4)), nil); err != nil {
		t.Fatalf("merge adding field 4 with its file: %v", err)
	}
	if _, err := table.Apply(t.Context(), head, merge(withE, apFile("e.lance", 5)), nil); !errors.Is(err, table.ErrInvalidTransaction) {
		t.Fatalf("merge whose new file holds field 5, not in its schema: %v; want ErrInvalidTransaction", err)
	}
}

func TestCheckFileFields(t *testing.T) {
	read, err := table.NewSchema(apSchema())
	if err != nil {
		t.Fatal(err)
	}
	foreign := apFrag(0, 5, apFile("x.lance", 0, 7))
	rewrite := &lancepb.Transaction{ReadVersion: 3, Operation: &lancepb.Transaction_Rewrite_{Rewrite: &lancepb.Transaction_Rewrite{
		Groups: []*lancepb.Transaction_Rewrite_RewriteGroup{{OldFragments: []*lancepb.DataFragment{apFrag(1, 5)}, NewFragments: []*lancepb.DataFragment{foreign}}},
	}}}
	for _, c := range []struct {
		name string
		txn  *lancepb.Transaction
		ok   bool
	}{
		{"append of known fields", apAppend(3, apFrag(0, 5)), true},
		{"append naming field 7", apAppend(3, apFrag(0, 5), foreign), false},
		{"update adding a fragment naming field 7", apUpdate(3, &lancepb.Transaction_Update{NewFragments: []*lancepb.DataFragment{foreign}}), false},
		{"rewrite producing a fragment naming field 7", rewrite, false},
		{"tombstones are Apply's to judge", apAppend(3, apFrag(0, 5, apFile("t.lance", 0, -2))), true},
		{"delete carries no new files", &lancepb.Transaction{ReadVersion: 3, Operation: &lancepb.Transaction_Delete_{Delete: &lancepb.Transaction_Delete{}}}, true},
	} {
		err := table.CheckFileFields(c.txn, read)
		if c.ok && err != nil || !c.ok && !errors.Is(err, table.ErrInvalidTransaction) {
			t.Errorf("%s: CheckFileFields = %v; want ok=%t", c.name, err, c.ok)
		}
	}
	// A column dropped after the read version: the files still name it,
	// and that is fine, because the writer read a schema that had it.
	dropped, err := table.NewSchema(apSchema()[:2])
	if err != nil {
		t.Fatal(err)
	}
	if err := table.CheckFileFields(apAppend(3, apFrag(0, 5)), read); err != nil {
		t.Fatalf("append at the read schema: %v", err)
	}
	if err := table.CheckFileFields(apAppend(3, apFrag(0, 5)), dropped); err == nil {
		t.Fatalf("append naming fields 2 and 3 against a schema without them: accepted")
	}
}

// A dataset's data files all have its storage version: Lance reads a table
// that mixes 2.0 and 2.1 files, but every later Lance append to it fails.
func TestApplyKeepsOneFileVersion(t *testing.T) {
	v20 := func(path string, fields ...int32) *lancepb.DataFile {
		df := apFile(path, fields...)
		df.FileMajorVersion, df.FileMinorVersion = 2, 0
		return df
	}
	replace := func(df *lancepb.DataFile) *lancepb.Transaction {
		return &lancepb.Transaction{ReadVersion: 3, Operation: &lancepb.Transaction_DataReplacement_{DataReplacement: &lancepb.Transaction_DataReplacement{
			Replacements: []*lancepb.Transaction_DataReplacementGroup{{FragmentId: 1, NewFile: df}},
		}}}
	}
	overwrite := &lancepb.Transaction{ReadVersion: 3, Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{
		Schema: apSchema(), Fragments: []*lancepb.DataFragment{apFrag(0, 3, v20("o.lance", 0, 1, 2, 3))},
	}}}
	apRun(t, []apCase{
		{name: "append of a 2.1 file to a 2.1 table", txn: apAppend(3, apFrag(0, 5))},
		{name: "append of a 2.0 file to a 2.1 table", txn: apAppend(3, apFrag(0, 5, v20("n.lance", 0, 1, 2, 3))), wantErr: table.ErrInvalidTransaction},
		{name: "update adding a 2.0 fragment to a 2.1 table", txn: apUpdate(3, &lancepb.Transaction_Update{
			NewFragments: []*lancepb.DataFragment{apFrag(0, 5, v20("n.lance", 0, 1, 2, 3))},
		}), wantErr: table.ErrInvalidTransaction},
		{name: "column replacement by a 2.0 file in a 2.1 table", txn: replace(v20("r.lance", 1)), wantErr: table.ErrInvalidTransaction},
		{name: "overwrite may change the version, as in Lance", txn: overwrite, check: func(t *testing.T, m *lancepb.Manifest) {
			if got := m.GetDataFormat().GetVersion(); got != "2.0" {
				t.Errorf("data format after an overwrite with 2.0 files: %q, want 2.0", got)
			}
		}},
	})
}
