package table

import (
	"maps"
	"math"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// Update (update, merge-insert) removes fragments, changes fragments in
// place and adds fragments with the moved or inserted rows.
//
// Updated fragments are post-images; they are applied as deltas to the
// fragment at head (see Apply for the rule). New fragments get ids like
// Append; with stable row ids they get the row ids they lack, their
// created-at versions from the rows they came from (the new version for
// inserted rows) and all rows stamped updated at the new version. In
// REWRITE_COLUMNS mode with stable row ids, the rows named by
// updated_fragment_offset_bitmaps (or the deprecated updated_fragment_offsets)
// are stamped updated in place.
func (a *applier) applyUpdate(op *lancepb.Transaction_Update) error {
	mode := op.GetUpdateMode()
	if mode != lancepb.Transaction_REWRITE_ROWS && mode != lancepb.Transaction_REWRITE_COLUMNS {
		return a.invalid("unknown update mode %d", mode)
	}
	removed, updates, err := a.removedAndUpdated(op.GetRemovedFragmentIds(), op.GetUpdatedFragments(), "removed")
	if err != nil {
		return err
	}
	modified := make([]int32, 0, len(op.GetFieldsModified()))
	for _, id := range op.GetFieldsModified() {
		if id > math.MaxInt32 {
			return a.invalid("fields_modified has field id %d", id)
		}
		modified = append(modified, int32(id))
	}
	news, err := a.newFragments(op.GetNewFragments(), nil, "new fragment")
	if err != nil {
		return err
	}
	offsets, err := a.updatedOffsets(op)
	if err != nil {
		return err
	}

	for _, id := range removed {
		if err := a.b.Remove(id); err != nil {
			return err
		}
	}
	for _, p := range updates {
		h, _ := a.head.Fragment(p.GetId())
		f, err := a.updatedFragment(h, p, mode, modified)
		if err != nil {
			return err
		}
		if a.stable && mode == lancepb.Transaction_REWRITE_COLUMNS {
			if rows := offsets[p.GetId()]; rows != nil && !rows.IsEmpty() && f.GetLastUpdatedAtVersionSequence() != nil {
				a.stampUpdatedOffsets(f, rows)
			}
		}
		if err := a.b.Replace(NewFragment(f)); err != nil {
			return err
		}
	}

	a.assignIDs(news)
	if a.stable {
		for _, f := range news {
			if err := a.assignRowIDs(f); err != nil {
				return err
			}
		}
		if err := a.stampMovedRows(news, op); err != nil {
			return err
		}
	}
	return a.insertAll(news)
}

// updatedFragment applies the post-image p of fragment h as a delta.
func (a *applier) updatedFragment(h *Fragment, p *lancepb.DataFragment, mode lancepb.Transaction_UpdateMode, modified []int32) (*lancepb.DataFragment, error) {
	if err := a.checkPostImage(h, p); err != nil {
		return nil, err
	}
	// The data files an in-place column update wrote: files of the
	// post-image that head does not have, whose live fields are all fields
	// the update says it modified. Other files head lacks are stale copies
	// of files a concurrent commit changed since the read version (pruned
	// by a Project, renamed by a DataReplacement) and are not brought back.
	// A REWRITE_ROWS update writes no data files into existing fragments.
	var added []*lancepb.DataFile
	var written []int32
	if mode == lancepb.Transaction_REWRITE_COLUMNS {
		for _, df := range p.GetFiles() {
			if df == nil || hasFile(h.Files(), df) || !a.holdsLiveField(df) {
				continue
			}
			live := slices.DeleteFunc(slices.Clone(df.GetFields()), func(id int32) bool { return id == Tombstone })
			if !allIn(live, modified) {
				if len(modified) == 0 {
					return nil, a.invalid("fragment %d: the update adds data file %q but lists no fields_modified", h.ID(), df.GetPath())
				}
				continue
			}
			added = append(added, df)
			for _, id := range live {
				if !slices.Contains(written, id) {
					written = append(written, id)
				}
			}
		}
	}
	if err := a.checkFiles(added, nil, "updated fragment"); err != nil {
		return nil, err
	}
	for _, df := range added {
		for _, id := range df.GetFields() {
			if _, ok := a.head.Schema().Field(id); !ok {
				return nil, a.invalid("fragment %d: data file %q holds field %d, which is not in the schema", h.ID(), df.GetPath(), id)
			}
		}
	}

	f := proto.CloneOf(h.Proto())
	if len(added) > 0 {
		f.Files = tombstoneFields(f.GetFiles(), written, false)
		f.Files = append(f.Files, cloneAll(added)...)
	}
	if mode == lancepb.Transaction_REWRITE_ROWS {
		f.DeletionFile = proto.CloneOf(p.GetDeletionFile())
	}
	superseded := written
	if mode == lancepb.Transaction_REWRITE_COLUMNS {
		for _, id := range modified {
			if !slices.Contains(superseded, id) {
				superseded = append(slices.Clip(superseded), id)
			}
		}
	}
	f.Overlays = a.supersedeOverlays(f.GetOverlays(), superseded)
	return f, nil
}

// allIn reports whether every id of ids is in set.
func allIn(ids, set []int32) bool {
	for _, id := range ids {
		if !slices.Contains(set, id) {
			return false
		}
	}
	return true
}

// holdsLiveField reports whether df holds a field of the head schema.
func (a *applier) holdsLiveField(df *lancepb.DataFile) bool {
	for _, id := range df.GetFields() {
		if _, ok := a.head.Schema().Field(id); ok {
			return true
		}
	}
	return false
}

// tombstoneFields returns copies of files with the given fields tombstoned
// (in every file, or every file but legacy ones when skipLegacy), and
// without the files left with no field that is not a tombstone (Lance's
// remove_tombstoned_data_files).
func tombstoneFields(files []*lancepb.DataFile, fields []int32, skipLegacy bool) []*lancepb.DataFile {
	out := make([]*lancepb.DataFile, 0, len(files))
	for _, df := range files {
		if !(skipLegacy && isLegacyFile(df)) && slices.ContainsFunc(df.GetFields(), func(id int32) bool { return slices.Contains(fields, id) }) {
			df = proto.CloneOf(df)
			for i, id := range df.Fields {
				if slices.Contains(fields, id) {
					df.Fields[i] = Tombstone
				}
			}
		}
		if slices.ContainsFunc(df.GetFields(), func(id int32) bool { return id != Tombstone }) {
			out = append(out, df)
		}
	}
	return out
}

// isLegacyFile reports whether df is a legacy (v1, format 0.x before 0.3)
// file, whose fields cannot be tombstoned one by one.
func isLegacyFile(df *lancepb.DataFile) bool {
	v, ok := fileFormatVersion(df)
	return ok && v == "0.1"
}

// supersedeOverlays tombstones fields in the overlays committed at or before
// the transaction's read version, whose values the transaction's new base
// values replace, and drops overlays left with no live field. Overlays
// committed later are newer than the transaction and stay as they are.
// Lance's tombstone_overlay_fields does this for DataReplacement; for an
// in-place column Update it tombstones every overlay, which differs only
// when conflict resolution should have rejected the pair anyway.
func (a *applier) supersedeOverlays(overlays []*lancepb.DataOverlayFile, fields []int32) []*lancepb.DataOverlayFile {
	if len(fields) == 0 || len(overlays) == 0 {
		return overlays
	}
	out := make([]*lancepb.DataOverlayFile, 0, len(overlays))
	for _, o := range overlays {
		if o.GetCommittedVersion() <= a.txn.GetReadVersion() &&
			slices.ContainsFunc(o.GetDataFile().GetFields(), func(id int32) bool { return slices.Contains(fields, id) }) {
			o = proto.CloneOf(o)
			for i, id := range o.GetDataFile().GetFields() {
				if slices.Contains(fields, id) {
					o.DataFile.Fields[i] = Tombstone
				}
			}
			if !slices.ContainsFunc(o.GetDataFile().GetFields(), func(id int32) bool { return id != Tombstone }) {
				continue
			}
		}
		out = append(out, o)
	}
	return out
}

// updatedOffsets decodes the per-fragment offsets an in-place column update
// says it rewrote: updated_fragment_offset_bitmaps, or else the deprecated
// updated_fragment_offsets. Only REWRITE_COLUMNS uses them, and then every
// fragment named must be an updated fragment, with offsets inside it.
func (a *applier) updatedOffsets(op *lancepb.Transaction_Update) (map[uint64]*roaring.Bitmap, error) {
	if op.GetUpdateMode() != lancepb.Transaction_REWRITE_COLUMNS {
		return nil, nil
	}
	updated := map[uint64]*lancepb.DataFragment{}
	for _, p := range op.GetUpdatedFragments() {
		updated[p.GetId()] = p
	}
	out := map[uint64]*roaring.Bitmap{}
	check := func(id uint64, rows *roaring.Bitmap) error {
		if _, ok := updated[id]; !ok {
			return a.invalid("updated offsets name fragment %d, which the update does not change", id)
		}
		h, _ := a.head.Fragment(id)
		if !rows.IsEmpty() && uint64(rows.Maximum()) >= h.PhysicalRows() {
			return a.invalid("updated offsets of fragment %d reach offset %d; it has %d rows", id, rows.Maximum(), h.PhysicalRows())
		}
		out[id] = rows
		return nil
	}
	if bms := op.GetUpdatedFragmentOffsetBitmaps(); len(bms) > 0 {
		for _, id := range sortedKeys(bms) {
			rows, err := DecodeBitmap(bms[id])
			if err != nil {
				return nil, a.invalid("updated offsets of fragment %d: %v", id, err)
			}
			if err := check(id, rows); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	lists := op.GetUpdatedFragmentOffsets()
	for _, id := range sortedKeys(lists) {
		rows := roaring.New()
		rows.AddMany(lists[id].GetValues())
		if err := check(id, rows); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// stampUpdatedOffsets sets the last-updated version of the given rows of f
// to the version being built and keeps the others (Lance's refresh for a
// partial in-place column rewrite; rows past the recorded sequence count as
// last updated at the head version, as in Lance).
func (a *applier) stampUpdatedOffsets(f *lancepb.DataFragment, rows *roaring.Bitmap) {
	n := f.GetPhysicalRows()
	if n == 0 {
		return
	}
	var runs []versionRun
	if seq, ok := f.GetLastUpdatedAtVersionSequence().(*lancepb.DataFragment_InlineLastUpdatedAtVersions); ok {
		if r, msg := decodeVersionRuns(seq.InlineLastUpdatedAtVersions); msg == "" {
			runs = r
		}
	}
	it := rows.Iterator()
	next := func() (uint64, bool) {
		if !it.HasNext() {
			return 0, false
		}
		return uint64(it.Next()), true
	}
	f.LastUpdatedAtVersionSequence = &lancepb.DataFragment_InlineLastUpdatedAtVersions{
		InlineLastUpdatedAtVersions: encodeVersionRuns(stampRuns(runs, n, next, a.version, a.head.Version())),
	}
}

// unknownCreatedAt is the created-at version Lance records for a moved row
// whose source has no created-at sequence (UNKNOWN_CREATED_AT_VERSION).
const unknownCreatedAt = 1

// stampMovedRows sets the version sequences of an update's new fragments,
// as Lance's resolve_update_version_metadata does: a row whose stable id
// was in a fragment the update removed or changed keeps that row's
// created-at version (the first such fragment by id); any other row was
// inserted and is created at the new version; all rows are last updated at
// the new version.
//
// Lance looks the ids up in every fragment of the table; cellguard looks
// only in the fragments the update removed or changed, where the rows it
// moved must come from, so that the cost does not grow with the table.
// The rows' created-at versions agree across the fragments a row id has
// lived in, so the result is the same.
func (a *applier) stampMovedRows(news []*lancepb.DataFragment, op *lancepb.Transaction_Update) error {
	ids := make([][]uint64, len(news))
	need := map[uint64]bool{}
	for i, f := range news {
		seq, ok := f.GetRowIdSequence().(*lancepb.DataFragment_InlineRowIds)
		if !ok {
			continue
		}
		segs, msg := decodeRowIDs(seq.InlineRowIds)
		if msg != "" {
			return a.invalid("fragment %d: row id sequence: %s", f.GetId(), msg)
		}
		n, ok := sequenceLen(segs)
		if !ok || n > maxMaterializedRows {
			return a.invalid("fragment %d has more than the %d row ids cellguard lists", f.GetId(), maxMaterializedRows)
		}
		ids[i] = expandSegments(segs, n)
		for _, id := range ids[i] {
			need[id] = true
		}
	}
	want := slices.Sorted(maps.Keys(need))

	// Source fragments, ascending id: the first occurrence of a row id wins.
	var sources []uint64
	sources = append(sources, op.GetRemovedFragmentIds()...)
	for _, p := range op.GetUpdatedFragments() {
		sources = append(sources, p.GetId())
	}
	slices.Sort(sources)
	created := map[uint64]uint64{} // row id → created-at version
	for _, id := range sources {
		if len(created) == len(want) {
			break
		}
		src, _ := a.head.Fragment(id)
		seq, ok := src.Proto().GetRowIdSequence().(*lancepb.DataFragment_InlineRowIds)
		if !ok {
			continue
		}
		segs, msg := decodeRowIDs(seq.InlineRowIds)
		if msg != "" {
			continue // Lance skips sequences it cannot read, too
		}
		var versions *versionIndex
		if cs, ok := src.Proto().GetCreatedAtVersionSequence().(*lancepb.DataFragment_InlineCreatedAtVersions); ok {
			if runs, msg := decodeVersionRuns(cs.InlineCreatedAtVersions); msg == "" {
				x := indexRuns(runs)
				versions = &x
			}
		}
		lookupPositions(segs, want, func(rid, pos uint64) {
			if _, done := created[rid]; done {
				return
			}
			v := uint64(unknownCreatedAt)
			if versions != nil {
				if at, ok := versions.at(pos); ok {
					v = at
				}
			}
			created[rid] = v
		})
	}

	for i, f := range news {
		if ids[i] == nil {
			a.stampNewRows(f)
			continue
		}
		versions := make([]uint64, len(ids[i]))
		for j, rid := range ids[i] {
			if v, ok := created[rid]; ok {
				versions[j] = v
			} else {
				versions[j] = a.version
			}
		}
		f.CreatedAtVersionSequence = &lancepb.DataFragment_InlineCreatedAtVersions{
			InlineCreatedAtVersions: encodeVersionRuns(runsOf(versions)),
		}
		if f.GetPhysicalRows() > 0 {
			f.LastUpdatedAtVersionSequence = &lancepb.DataFragment_InlineLastUpdatedAtVersions{
				InlineLastUpdatedAtVersions: uniformVersions(f.GetPhysicalRows(), a.version),
			}
		} else {
			f.LastUpdatedAtVersionSequence = nil
		}
	}
	return nil
}

func sortedKeys[V any](m map[uint64]V) []uint64 {
	keys := make([]uint64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
