package table

import (
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// DataReplacement replaces the data of some fields in some fragments by a
// new file per fragment, following Lance's build_manifest:
//
//   - every group's new file holds the same fields (Lance's rule), real ids
//     of the schema;
//   - a data file holding exactly those fields, with the same file version,
//     takes the new file's path, size and base (replaced in place, keeping
//     its column indices);
//   - if no data file holds any of the fields (they read as NULL), the new
//     file is added;
//   - otherwise, if every field is held by some file and none of those files
//     is a legacy (v1) file, the fields are tombstoned where they are, files
//     left with no field of the schema are dropped, and the new file is
//     added;
//   - anything else (a mixed layout, a legacy file, a replacement that
//     changes nothing) is invalid.
//
// The fields are then tombstoned in the fragment's overlays committed at or
// before the read version (an overlay left with no live field is dropped);
// newer overlays stay in force. With stable row ids, all rows of the
// fragment are stamped updated at the new version.
func (a *applier) applyDataReplacement(op *lancepb.Transaction_DataReplacement) error {
	groups := op.GetReplacements()
	var fields []int32
	seen := map[uint64]bool{}
	for i, g := range groups {
		nf := g.GetNewFile()
		if nf == nil {
			return a.invalid("replacement %d has no new file", i)
		}
		if i == 0 {
			fields = nf.GetFields()
			if err := a.checkRealFields(fields, fmt.Sprintf("new file %q", nf.GetPath())); err != nil {
				return err
			}
		} else if !slices.Equal(nf.GetFields(), fields) {
			return a.invalid("replacement %d replaces fields %v; all new files must hold the same fields (%v)", i, nf.GetFields(), fields)
		}
		if err := a.checkFiles([]*lancepb.DataFile{nf}, nil, "replacement"); err != nil {
			return err
		}
		if _, ok := fileFormatVersion(nf); !ok {
			return a.invalid("new file %q has unknown file version %d.%d", nf.GetPath(), nf.GetFileMajorVersion(), nf.GetFileMinorVersion())
		}
		if err := a.uniqueIDs(seen, []uint64{g.GetFragmentId()}, "replaced"); err != nil {
			return err
		}
	}
	for _, g := range groups {
		h, _ := a.head.Fragment(g.GetFragmentId())
		f, err := a.replaceFields(h, g.GetNewFile())
		if err != nil {
			return err
		}
		if err := a.b.Replace(NewFragment(f)); err != nil {
			return err
		}
	}
	return nil
}

func (a *applier) replaceFields(h *Fragment, nf *lancepb.DataFile) (*lancepb.DataFragment, error) {
	fields := nf.GetFields()
	f := proto.CloneOf(h.Proto())
	inPlace := false
	covered := map[int32]bool{}
	for i, df := range f.GetFiles() {
		if slices.Equal(df.GetFields(), fields) &&
			df.GetFileMajorVersion() == nf.GetFileMajorVersion() && df.GetFileMinorVersion() == nf.GetFileMinorVersion() {
			df = proto.CloneOf(df)
			df.Path, df.FileSizeBytes, df.BaseId = nf.GetPath(), nf.GetFileSizeBytes(), nf.BaseId
			f.Files[i] = df
			inPlace = true
		}
		for _, id := range df.GetFields() {
			covered[id] = true
		}
	}
	switch {
	case !slices.ContainsFunc(fields, func(id int32) bool { return covered[id] }):
		f.Files = append(f.Files, proto.CloneOf(nf))
	case !inPlace && a.tombstonable(f.GetFiles(), fields):
		kept := tombstoneFields(f.GetFiles(), fields, true)
		f.Files = slices.DeleteFunc(kept, func(df *lancepb.DataFile) bool { return !a.holdsLiveField(df) })
		f.Files = append(f.Files, proto.CloneOf(nf))
	}
	if proto.Equal(f, h.Proto()) {
		return nil, a.invalid("replacing fields %v changes nothing in fragment %d: no data file layout matches the new file", fields, h.ID())
	}
	f.Overlays = a.supersedeOverlays(f.GetOverlays(), fields)
	if a.stable {
		a.stampUpdatedRows(f)
	}
	return f, nil
}

// tombstonable reports whether every field is held by some file and only by
// files that are not legacy files.
func (a *applier) tombstonable(files []*lancepb.DataFile, fields []int32) bool {
	for _, id := range fields {
		held := false
		for _, df := range files {
			if slices.Contains(df.GetFields(), id) {
				if isLegacyFile(df) {
					return false
				}
				held = true
			}
		}
		if !held {
			return false
		}
	}
	return true
}

// checkRealFields checks that fields is a non-empty list of distinct field
// ids of the head schema.
func (a *applier) checkRealFields(fields []int32, what string) error {
	if len(fields) == 0 {
		return a.invalid("%s holds no field", what)
	}
	for i, id := range fields {
		if id < 0 {
			return a.invalid("%s has field id %d", what, id)
		}
		if _, ok := a.head.Schema().Field(id); !ok {
			return a.invalid("%s holds field %d, which is not in the schema", what, id)
		}
		if slices.Contains(fields[:i], id) {
			return a.invalid("%s holds field %d twice", what, id)
		}
	}
	return nil
}

// DataOverlay appends overlay files to fragments. Each overlay is stamped
// committed_version = the new version; groups for the same fragment are
// appended in order, after the overlays the fragment already has (which are
// all older), so the list stays newest-last. The new overlays must hold real
// fields of the schema, and their coverage must decode and stay below the
// fragment's physical row count. Feature flag 64 follows from the content.
//
// Lance does not stamp last-updated versions for overlaid rows (its issue
// #9078); neither does Apply.
func (a *applier) applyDataOverlay(op *lancepb.Transaction_DataOverlay) error {
	var order []uint64
	byFrag := map[uint64][]*lancepb.DataOverlayFile{}
	for i, g := range op.GetGroups() {
		if g == nil {
			return a.invalid("overlay group %d is empty", i)
		}
		h, ok := a.head.Fragment(g.GetFragmentId())
		if !ok {
			return a.invalid("overlay fragment %d does not exist", g.GetFragmentId())
		}
		if err := a.checkOverlays(h.Proto(), g.GetOverlays(), true); err != nil {
			return err
		}
		if _, ok := byFrag[g.GetFragmentId()]; !ok {
			order = append(order, g.GetFragmentId())
		}
		byFrag[g.GetFragmentId()] = append(byFrag[g.GetFragmentId()], g.GetOverlays()...)
	}
	for _, id := range order {
		h, _ := a.head.Fragment(id)
		f := proto.CloneOf(h.Proto())
		for _, o := range byFrag[id] {
			o = proto.CloneOf(o)
			o.CommittedVersion = a.version
			f.Overlays = append(f.Overlays, o)
		}
		if err := a.b.Replace(NewFragment(f)); err != nil {
			return err
		}
	}
	return nil
}

// checkOverlays checks overlay files of fragment f. New overlays (written by
// this transaction) must hold real, distinct fields of the schema; overlays
// carried from existing fragments (in a Merge or Rewrite) may hold
// tombstones and must have been committed at or before head. Every overlay
// needs a data file and a coverage that decodes, with one bitmap per field
// when sparse, and offsets below f's physical row count.
func (a *applier) checkOverlays(f *lancepb.DataFragment, overlays []*lancepb.DataOverlayFile, fresh bool) error {
	for i, o := range overlays {
		what := fmt.Sprintf("fragment %d: overlay %d", f.GetId(), i)
		if o == nil || o.GetDataFile() == nil {
			return a.invalid("%s has no data file", what)
		}
		df := o.GetDataFile()
		fields := df.GetFields()
		if fresh {
			if err := a.checkRealFields(fields, what); err != nil {
				return err
			}
		} else {
			if len(fields) == 0 {
				return a.invalid("%s holds no field", what)
			}
			for _, id := range fields {
				if id < 0 && id != Tombstone {
					return a.invalid("%s has field id %d", what, id)
				}
			}
			if o.GetCommittedVersion() > a.head.Version() {
				return a.invalid("%s was committed at version %d, after the head version %d", what, o.GetCommittedVersion(), a.head.Version())
			}
		}
		if ci := df.GetColumnIndices(); len(ci) != 0 && len(ci) != len(fields) {
			return a.invalid("%s has %d column indices for %d fields", what, len(ci), len(fields))
		}
		var bitmaps [][]byte
		switch c := o.GetCoverage().(type) {
		case *lancepb.DataOverlayFile_SharedOffsetBitmap:
			bitmaps = [][]byte{c.SharedOffsetBitmap}
		case *lancepb.DataOverlayFile_FieldCoverage:
			bitmaps = c.FieldCoverage.GetOffsetBitmaps()
			if len(bitmaps) != len(fields) {
				return a.invalid("%s has %d coverage bitmaps for %d fields", what, len(bitmaps), len(fields))
			}
		default:
			return a.invalid("%s has no coverage", what)
		}
		for j, b := range bitmaps {
			rows, err := DecodeBitmap(b)
			if err != nil {
				return a.invalid("%s: coverage bitmap %d: %v", what, j, err)
			}
			if !rows.IsEmpty() && uint64(rows.Maximum()) >= f.GetPhysicalRows() {
				return a.invalid("%s covers offset %d; the fragment has %d rows", what, rows.Maximum(), f.GetPhysicalRows())
			}
		}
	}
	return nil
}

// checkIndex checks the metadata of an index a transaction creates.
func (a *applier) checkIndex(idx *lancepb.IndexMetadata) string {
	if idx == nil {
		return "empty"
	}
	if len(idx.GetUuid().GetUuid()) != 16 {
		return fmt.Sprintf("uuid has %d bytes, want 16", len(idx.GetUuid().GetUuid()))
	}
	for _, id := range idx.GetFields() {
		if id < 0 {
			return fmt.Sprintf("field id %d", id)
		}
		if _, ok := a.head.Schema().Field(id); !ok {
			return fmt.Sprintf("field %d is not in the schema", id)
		}
	}
	if b := idx.GetFragmentBitmap(); len(b) > 0 {
		if _, err := DecodeBitmap(b); err != nil {
			return fmt.Sprintf("fragment bitmap: %v", err)
		}
	}
	return ""
}
