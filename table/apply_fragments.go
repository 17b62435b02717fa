package table

import (
	"fmt"
	"math"
	"slices"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// New fragments: how Apply gives the fragments a transaction adds their
// ids, stable row ids and row versions, and the checks they must pass
// (files, schema fields, deletion files, unique ids) before they join a
// manifest.

// assignIDs gives every fragment with id 0 the next free id, in order, as
// Lance's fragments_with_ids does. The fragments must be private copies.
func (a *applier) assignIDs(frags []*lancepb.DataFragment) {
	for _, f := range frags {
		if f.GetId() == 0 {
			f.Id = a.nextID
			a.nextID++
		}
	}
}

// insertAll inserts fragments in fragment-id order (Lance sorts the final
// fragment list by id).
func (a *applier) insertAll(frags []*lancepb.DataFragment) error {
	for _, f := range frags {
		if err := a.b.Insert(NewFragment(f)); err != nil {
			return a.invalid("fragment id %d is already in use", f.GetId())
		}
	}
	return nil
}

// assignRowIDs gives new fragments their stable row ids, as Lance's
// assign_row_ids does: a fragment without a sequence gets the next
// physical_rows ids as one range; a fragment with fewer ids than rows (the
// rows a merge-insert moved keep theirs) gets the rest appended, re-encoded
// as one segment; a fragment with all its ids keeps them.
func (a *applier) assignRowIDs(f *lancepb.DataFragment) error {
	rows := f.GetPhysicalRows()
	switch seq := f.GetRowIdSequence().(type) {
	case nil:
		if rows > math.MaxUint64-a.nextRowID {
			return a.invalid("stable row ids overflow at fragment %d", f.GetId())
		}
		f.RowIdSequence = &lancepb.DataFragment_InlineRowIds{InlineRowIds: encodeRowIDRange(a.nextRowID, a.nextRowID+rows)}
		a.nextRowID += rows
	case *lancepb.DataFragment_InlineRowIds:
		segs, msg := decodeRowIDs(seq.InlineRowIds)
		if msg != "" {
			return a.invalid("fragment %d: row id sequence: %s", f.GetId(), msg)
		}
		have, ok := sequenceLen(segs)
		if !ok || have > rows {
			return a.invalid("fragment %d has more row ids than its %d physical rows", f.GetId(), rows)
		}
		if have == rows {
			return nil
		}
		if rows > maxMaterializedRows {
			return a.invalid("fragment %d has %d rows, more than the %d whose row ids cellguard re-encodes", f.GetId(), rows, maxMaterializedRows)
		}
		more := rows - have
		if more > math.MaxUint64-a.nextRowID {
			return a.invalid("stable row ids overflow at fragment %d", f.GetId())
		}
		ids := expandSegments(segs, rows)
		seen := make(map[uint64]struct{}, len(ids))
		for _, id := range ids {
			if _, dup := seen[id]; dup || (id >= a.nextRowID && id < a.nextRowID+more) {
				return a.invalid("fragment %d repeats row id %d", f.GetId(), id)
			}
			seen[id] = struct{}{}
		}
		for id := a.nextRowID; id < a.nextRowID+more; id++ {
			ids = append(ids, id)
		}
		a.nextRowID += more
		f.RowIdSequence = &lancepb.DataFragment_InlineRowIds{InlineRowIds: encodeRowIDs(ids)}
	default:
		return a.invalid("fragment %d: external row id sequences are not supported", f.GetId())
	}
	return nil
}

// stampNewRows sets both version sequences of a brand-new fragment to the
// version being built (Lance's build_version_meta), or clears them for a
// fragment without rows.
func (a *applier) stampNewRows(f *lancepb.DataFragment) {
	if f.GetPhysicalRows() == 0 {
		f.LastUpdatedAtVersionSequence, f.CreatedAtVersionSequence = nil, nil
		return
	}
	v := uniformVersions(f.GetPhysicalRows(), a.version)
	f.LastUpdatedAtVersionSequence = &lancepb.DataFragment_InlineLastUpdatedAtVersions{InlineLastUpdatedAtVersions: v}
	f.CreatedAtVersionSequence = &lancepb.DataFragment_InlineCreatedAtVersions{InlineCreatedAtVersions: slices.Clone(v)}
}

// stampUpdatedRows sets the last-updated versions of every row of f to the
// version being built (Lance's refresh for a full-fragment column rewrite).
func (a *applier) stampUpdatedRows(f *lancepb.DataFragment) {
	if f.GetPhysicalRows() == 0 {
		return
	}
	f.LastUpdatedAtVersionSequence = &lancepb.DataFragment_InlineLastUpdatedAtVersions{
		InlineLastUpdatedAtVersions: uniformVersions(f.GetPhysicalRows(), a.version),
	}
}

// newFragments validates and copies fragments that a transaction adds
// (Append, Overwrite, Update.new_fragments): files with real field ids, no
// overlays. It returns private copies.
func (a *applier) newFragments(frags []*lancepb.DataFragment, schema *Schema, what string) ([]*lancepb.DataFragment, error) {
	if err := a.checkNewFragments(frags, schema, what); err != nil {
		return nil, err
	}
	out := make([]*lancepb.DataFragment, 0, len(frags))
	for _, f := range frags {
		out = append(out, proto.CloneOf(f))
	}
	return out, nil
}

// checkNewFragments checks frags, the new fragments of what.
func (a *applier) checkNewFragments(frags []*lancepb.DataFragment, schema *Schema, what string) error {
	for i, f := range frags {
		if err := a.checkNewFragment(f, schema, what, i); err != nil {
			return err
		}
	}
	return nil
}

// checkNewFragment checks f, the i-th new fragment of what.
func (a *applier) checkNewFragment(f *lancepb.DataFragment, schema *Schema, what string, i int) error {
	if f == nil {
		return a.invalid("%s %d is empty", what, i)
	}
	if f.GetPhysicalRows() == 0 {
		return a.invalid("%s %d has no rows", what, i)
	}
	if err := a.checkNewFiles(f, schema, what, i); err != nil {
		return err
	}
	if err := a.checkDeletionFile(f, what); err != nil {
		return err
	}
	if len(f.GetOverlays()) > 0 {
		return a.invalid("%s %d carries overlay files; overlays are added by DataOverlay", what, i)
	}
	return nil
}

// checkNewFiles checks the data files of f, the i-th new fragment of
// what. The checks run once with what as the place; only when they fail
// are they run again to name the fragment (the common case builds no
// message).
func (a *applier) checkNewFiles(f *lancepb.DataFragment, schema *Schema, what string, i int) error {
	if a.checkFiles(f.GetFiles(), nil, what) == nil && a.checkSchemaFields(f.GetFiles(), nil, schema, what) == nil {
		return nil
	}
	where := fmt.Sprintf("%s %d", what, i)
	if err := a.checkFiles(f.GetFiles(), nil, where); err != nil {
		return err
	}
	return a.checkSchemaFields(f.GetFiles(), nil, schema, where)
}

// checkFiles checks the data files of a fragment a transaction supplies.
// Field ids must be real (>= 0); a tombstone (-2) is allowed only in a file
// that existing holds (the same file at head), and column indices must be
// absent or one per field.
func (a *applier) checkFiles(files []*lancepb.DataFile, existing *Fragment, what string) error {
	for i, df := range files {
		if df == nil {
			return a.invalid("%s: data file %d is empty", what, i)
		}
		if ci := df.GetColumnIndices(); len(ci) != 0 && len(ci) != len(df.GetFields()) {
			return a.invalid("%s: data file %q has %d column indices for %d fields", what, df.GetPath(), len(ci), len(df.GetFields()))
		}
		known := existing != nil && hasFile(existing.Files(), df)
		for _, id := range df.GetFields() {
			if id < 0 && !(id == Tombstone && known) {
				return a.invalid("%s: data file %q has field id %d", what, df.GetPath(), id)
			}
		}
		if !known {
			if err := a.checkFileVersion(df, what); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkFileVersion checks that a new data file has the table's data
// storage version. A table that mixes file versions (2.0 and 2.1, 2.1
// and 2.2) is read by Lance 8, but every later Lance 8 append or
// compaction of it fails ("All data files must have the same version"),
// and Lance 12 does not open it ("mixed data-file-version capability is
// not enabled"), so a commit must not mix them. Creating a table and
// Overwrite set the version instead (Lance lets Overwrite change it);
// tables of other versions (legacy 0.1, newer ones) are not checked here.
func (a *applier) checkFileVersion(df *lancepb.DataFile, what string) error {
	if a.creating || a.kind == OpOverwrite {
		return nil
	}
	want := a.head.DataFormat().GetVersion()
	if want != "2.0" && want != "2.1" && want != "2.2" {
		return nil
	}
	if got, ok := fileFormatVersion(df); ok && got != want {
		return a.invalid("%s: data file %q is Lance file version %s, but the table's data storage version is %s", what, df.GetPath(), got, want)
	}
	return nil
}

// checkSchemaFields checks that every real field id in the data files a
// transaction supplies is in schema, the schema the transaction itself
// defines (Overwrite, Merge). A nil schema checks nothing: operations that
// keep the head's schema are checked against the schema at their read
// version by CheckFileFields, because a concurrent column drop may
// legitimately leave their files naming a field head no longer has. Files
// existing already holds (the same file at head) are exempt: after a
// column is dropped, Lance leaves its id in the files that held it.
func (a *applier) checkSchemaFields(files []*lancepb.DataFile, existing *Fragment, schema *Schema, what string) error {
	if schema == nil {
		return nil
	}
	for _, df := range files {
		if existing != nil && hasFile(existing.Files(), df) {
			continue
		}
		for _, id := range df.GetFields() {
			if _, ok := schema.Field(id); id >= 0 && !ok {
				return a.invalid("%s: data file %q holds field %d, which is not in the schema", what, df.GetPath(), id)
			}
		}
	}
	return nil
}

// checkDeletionFile checks that a deletion file deletes no more rows than
// the fragment has.
func (a *applier) checkDeletionFile(f *lancepb.DataFragment, what string) error {
	if df := f.GetDeletionFile(); df != nil && df.GetNumDeletedRows() > f.GetPhysicalRows() {
		return a.invalid("%s %d: deletion file deletes %d of %d rows", what, f.GetId(), df.GetNumDeletedRows(), f.GetPhysicalRows())
	}
	return nil
}

// sameFile reports whether two data files are the same file: same path,
// same base.
func sameFile(x, y *lancepb.DataFile) bool {
	return x.GetPath() == y.GetPath() && x.GetBaseId() == y.GetBaseId() && (x.BaseId == nil) == (y.BaseId == nil)
}

func hasFile(files []*lancepb.DataFile, df *lancepb.DataFile) bool {
	return slices.ContainsFunc(files, func(x *lancepb.DataFile) bool { return sameFile(x, df) })
}

// removedAndUpdated reads the fragments a Delete or an Update removes
// and the post-images it installs the way Lance builds their manifest: a
// removed fragment is gone whatever else names it (a rebased Update
// names a fragment a concurrent delete emptied both as removed and as
// updated), a repeated removed id is one removal, and of post-images
// naming the same fragment the first counts. Every id must be a fragment
// at head.
func (a *applier) removedAndUpdated(removedIDs []uint64, updated []*lancepb.DataFragment, removedWhat string) ([]uint64, []*lancepb.DataFragment, error) {
	removed := make([]uint64, 0, len(removedIDs))
	gone := make(map[uint64]bool, len(removedIDs))
	for _, id := range removedIDs {
		if _, ok := a.head.Fragment(id); !ok {
			return nil, nil, a.invalid("%s fragment %d does not exist", removedWhat, id)
		}
		if !gone[id] {
			gone[id] = true
			removed = append(removed, id)
		}
	}
	updates := make([]*lancepb.DataFragment, 0, len(updated))
	seen := make(map[uint64]bool, len(updated))
	for i, p := range updated {
		if p == nil {
			return nil, nil, a.invalid("updated fragment %d is empty", i)
		}
		if _, ok := a.head.Fragment(p.GetId()); !ok {
			return nil, nil, a.invalid("updated fragment %d does not exist", p.GetId())
		}
		if gone[p.GetId()] || seen[p.GetId()] {
			continue
		}
		seen[p.GetId()] = true
		updates = append(updates, p)
	}
	return removed, updates, nil
}

// uniqueIDs checks a list of fragment ids for repeats, adding them to seen.
func (a *applier) uniqueIDs(seen map[uint64]bool, ids []uint64, what string) error {
	for _, id := range ids {
		if seen[id] {
			return a.invalid("fragment %d is named twice", id)
		}
		seen[id] = true
		if _, ok := a.head.Fragment(id); !ok {
			return a.invalid("%s fragment %d does not exist", what, id)
		}
	}
	return nil
}
