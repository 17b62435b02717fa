package table

import "cellguard/proto/lancepb"

// CheckFileFields checks that the data files of the fragments txn creates
// (Append fragments, Update new fragments, Rewrite new fragments) name only
// fields in read, the schema at txn's read version: the schema the writer
// wrote them with. A file naming any other field would attach values to a
// column the writer never saw, or to a future column that reuses nothing
// but could collide with it. Tombstones and other negative ids are Apply's
// to judge.
//
// The check belongs to the read version, not to head: a column dropped
// concurrently after the read version legitimately leaves the new files
// naming a field head no longer has. Overwrite and Merge, which bring
// their own schema, are checked by Apply. Errors wrap
// ErrInvalidTransaction.
func CheckFileFields(txn *lancepb.Transaction, read *Schema) error {
	if read == nil {
		return nil
	}
	var frags []*lancepb.DataFragment
	switch op := txn.GetOperation().(type) {
	case *lancepb.Transaction_Append_:
		frags = op.Append.GetFragments()
	case *lancepb.Transaction_Update_:
		frags = op.Update.GetNewFragments()
	case *lancepb.Transaction_Rewrite_:
		for _, g := range op.Rewrite.GetGroups() {
			frags = append(frags, g.GetNewFragments()...)
		}
		frags = append(frags, op.Rewrite.GetNewFragments()...)
	}
	for i, f := range frags {
		for _, df := range f.GetFiles() {
			for _, id := range df.GetFields() {
				if _, ok := read.Field(id); id >= 0 && !ok {
					return errorf("check data files", ErrInvalidTransaction,
						"new fragment %d: data file %q holds field %d, which is not in the schema at read version %d",
						i, df.GetPath(), id, txn.GetReadVersion())
				}
			}
		}
	}
	return nil
}
