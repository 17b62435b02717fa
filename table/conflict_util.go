package table

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/proto/lancepb"
)

// Names of Lance's system indexes, which take part in conflict resolution.
const (
	fragReuseIndexName = "__lance_frag_reuse"
	memWALIndexName    = "__lance_mem_wal"
)

// fragSet is a set of fragment ids.
type fragSet map[uint64]struct{}

func newFragSet(lists ...[]uint64) fragSet {
	s := fragSet{}
	for _, l := range lists {
		for _, id := range l {
			s[id] = struct{}{}
		}
	}
	return s
}

func (s fragSet) has(id uint64) bool {
	_, ok := s[id]
	return ok
}

// and returns the ids of l that are in s, ascending and without repeats.
func (s fragSet) and(l []uint64) []uint64 {
	var out []uint64
	for _, id := range l {
		if s.has(id) {
			out = append(out, id)
		}
	}
	return sortedFragIDs(out)
}

// sortedFragIDs returns ids ascending without repeats; nil when empty.
func sortedFragIDs(ids []uint64) []uint64 {
	if len(ids) == 0 {
		return nil
	}
	out := slices.Clone(ids)
	slices.Sort(out)
	return slices.Compact(out)
}

// rowChange is the part of a Delete or Update that conflict rules look at.
type rowChange struct {
	updated []uint64                    // ids of the fragments with post-images
	removed []uint64                    // ids of the fragments removed whole
	update  *lancepb.Transaction_Update // nil for a Delete, never for an Update
}

func rowChangeOf(txn *lancepb.Transaction) rowChange {
	if _, ok := txn.GetOperation().(*lancepb.Transaction_Update_); ok {
		u := txn.GetUpdate()
		if u == nil {
			u = &lancepb.Transaction_Update{}
		}
		return rowChange{updated: fragIDsOf(u.GetUpdatedFragments()), removed: u.GetRemovedFragmentIds(), update: u}
	}
	d := txn.GetDelete()
	return rowChange{updated: fragIDsOf(d.GetUpdatedFragments()), removed: d.GetDeletedFragmentIds()}
}

// hasKeyFilter reports an Update carrying a merge-insert key-existence
// filter (inserted_rows, an optional field: present even when empty).
func hasKeyFilter(u *lancepb.Transaction_Update) bool {
	return u != nil && u.InsertedRows != nil
}

// touched returns every fragment the change modifies or removes.
func (r rowChange) touched() fragSet { return newFragSet(r.updated, r.removed) }

// rewritesColumns reports an in-place column rewrite (REWRITE_COLUMNS):
// the updated fragments get new data files for fields_modified.
func (r rowChange) rewritesColumns() bool {
	return r.update != nil && r.update.GetUpdateMode() == lancepb.Transaction_REWRITE_COLUMNS
}

// movesRows reports a REWRITE_ROWS update that re-inserted the matched rows
// into new fragments: the rows it deleted from the updated fragments live
// on elsewhere, with values computed from its read version. The new
// fragments of a REWRITE_COLUMNS update are plain inserts.
func (r rowChange) movesRows() bool {
	return r.update != nil && r.update.GetUpdateMode() == lancepb.Transaction_REWRITE_ROWS &&
		len(r.update.GetNewFragments()) > 0
}

// fieldsModified returns the fields an Update rewrote in place.
func (r rowChange) fieldsModified() []int64 { return fieldIDsU32(r.update.GetFieldsModified()) }

func fragIDsOf(frags []*lancepb.DataFragment) []uint64 {
	ids := make([]uint64, 0, len(frags))
	for _, f := range frags {
		ids = append(ids, f.GetId())
	}
	return ids
}

// rewriteOldIDs returns the fragments a Rewrite replaces, from its groups
// and from the deprecated single-group form.
func rewriteOldIDs(rw *lancepb.Transaction_Rewrite) []uint64 {
	ids := fragIDsOf(rw.GetOldFragments())
	for _, g := range rw.GetGroups() {
		ids = append(ids, fragIDsOf(g.GetOldFragments())...)
	}
	return ids
}

func replacementIDs(dr *lancepb.Transaction_DataReplacement) []uint64 {
	var ids []uint64
	for _, g := range dr.GetReplacements() {
		ids = append(ids, g.GetFragmentId())
	}
	return ids
}

func overlayIDs(do *lancepb.Transaction_DataOverlay) []uint64 {
	var ids []uint64
	for _, g := range do.GetGroups() {
		ids = append(ids, g.GetFragmentId())
	}
	return ids
}

// replacedFields returns the fields a DataReplacement writes in the
// fragments of frags (all fragments when frags is nil).
func replacedFields(dr *lancepb.Transaction_DataReplacement, frags fragSet) []int64 {
	var out []int64
	for _, g := range dr.GetReplacements() {
		if frags == nil || frags.has(g.GetFragmentId()) {
			out = append(out, liveFieldIDs(g.GetNewFile().GetFields())...)
		}
	}
	return out
}

// overlayGroupFields returns the fields the overlays of group g supply.
func overlayGroupFields(g *lancepb.Transaction_DataOverlayGroup) []int64 {
	var out []int64
	for _, o := range g.GetOverlays() {
		out = append(out, liveFieldIDs(o.GetDataFile().GetFields())...)
	}
	return out
}

// overlayGroupCoverage returns the physical offsets the overlays of g cover,
// across all their fields. An overlay without coverage is malformed.
func overlayGroupCoverage(g *lancepb.Transaction_DataOverlayGroup) (*roaring.Bitmap, error) {
	cov := roaring.New()
	for i, o := range g.GetOverlays() {
		var blobs [][]byte
		switch c := o.GetCoverage().(type) {
		case *lancepb.DataOverlayFile_SharedOffsetBitmap:
			if c != nil {
				blobs = [][]byte{c.SharedOffsetBitmap}
			}
		case *lancepb.DataOverlayFile_FieldCoverage:
			if c != nil {
				blobs = c.FieldCoverage.GetOffsetBitmaps()
			}
		default:
			return nil, errorf("check conflict", ErrMalformed, "overlay %d of fragment %d has no coverage", i, g.GetFragmentId())
		}
		for _, b := range blobs {
			bm, err := DecodeBitmap(b)
			if err != nil {
				return nil, withContext(err, "overlay %d of fragment %d", i, g.GetFragmentId())
			}
			cov.Or(bm)
		}
	}
	return cov, nil
}

// indexFragments decodes an index's fragment bitmap. present is false when
// the index has none, which Lance reads as "coverage unknown".
func indexFragments(idx *lancepb.IndexMetadata) (bm *roaring.Bitmap, present bool, err error) {
	b := idx.GetFragmentBitmap()
	if len(b) == 0 {
		return nil, false, nil
	}
	bm, err = DecodeBitmap(b)
	if err != nil {
		return nil, false, withContext(err, "fragment bitmap of index %q", idx.GetName())
	}
	return bm, true, nil
}

// bitmapHasFragment reports whether a fragment bitmap covers id. A fragment
// id beyond 32 bits cannot be represented; it counts as covered, which is
// the safe answer for every caller.
func bitmapHasFragment(bm *roaring.Bitmap, id uint64) bool {
	return id > math.MaxUint32 || bm.Contains(uint32(id))
}

// indexDependsOn returns the fields an index depends on: the fields it keys
// on and the ones it merely carries.
func indexDependsOn(idx *lancepb.IndexMetadata) []int64 {
	return append(liveFieldIDs(idx.GetFields()), liveFieldIDs(idx.GetCoveringFields())...)
}

func anyIndexNamed(list []*lancepb.IndexMetadata, name string) bool {
	return slices.ContainsFunc(list, func(idx *lancepb.IndexMetadata) bool { return idx.GetName() == name })
}

func sameIndexUUID(a, b *lancepb.IndexMetadata) bool {
	return bytes.Equal(a.GetUuid().GetUuid(), b.GetUuid().GetUuid())
}

// withContext adds context to an error from this package, keeping its sentinel.
func withContext(err error, format string, args ...any) error {
	if e, ok := err.(*Error); ok {
		return errorf(e.Op, e.Err, "%s: %s", fmt.Sprintf(format, args...), e.Msg)
	}
	return err
}

// Field ids are handled as int64 so that every uint32 in fields_modified
// and every int32 in a data file compare without overflow. Negative ids
// (tombstones, unassigned) are never real fields and are dropped.

func liveFieldIDs(ids []int32) []int64 {
	out := make([]int64, 0, len(ids))
	for _, id := range ids {
		if id >= 0 {
			out = append(out, int64(id))
		}
	}
	return out
}

func fieldIDsU32(ids []uint32) []int64 {
	out := make([]int64, 0, len(ids))
	for _, id := range ids {
		out = append(out, int64(id))
	}
	return out
}

// fieldTree decides whether two field ids name the same data. Without
// schemas only equal ids do; with them, a nested field is also the same as
// each of its ancestors (rewriting a struct rewrites its children, and an
// index on a struct depends on every leaf below it).
type fieldTree struct {
	schemas []*Schema
}

func (t fieldTree) related(a, b int64) bool {
	if a < 0 || b < 0 {
		return false
	}
	return a == b || t.ancestor(a, b) || t.ancestor(b, a)
}

// ancestor reports whether anc is a proper ancestor of id in any schema.
// Parent chains are followed at most Len steps, so a cyclic schema cannot
// loop.
func (t fieldTree) ancestor(anc, id int64) bool {
	if anc > math.MaxInt32 || id > math.MaxInt32 {
		return false
	}
	for _, s := range t.schemas {
		if s == nil {
			continue
		}
		cur := int32(id)
		for range s.Len() {
			f, ok := s.Field(cur)
			if !ok || f.GetParentId() < 0 {
				break
			}
			if int64(f.GetParentId()) == anc {
				return true
			}
			cur = f.GetParentId()
		}
	}
	return false
}

// overlap returns the ids of as related to some id of bs, ascending and
// without repeats.
func (t fieldTree) overlap(as, bs []int64) []int64 {
	var out []int64
	for _, a := range as {
		for _, b := range bs {
			if t.related(a, b) {
				out = append(out, a)
				break
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// configChange is what an operation does to the config map.
type configChange struct {
	upserts map[string]bool
	deletes map[string]bool
	replace bool // the whole map is replaced
}

func configChangeOf(txn *lancepb.Transaction) configChange {
	c := configChange{upserts: map[string]bool{}, deletes: map[string]bool{}}
	if ow := txn.GetOverwrite(); ow != nil {
		for k := range ow.GetConfigUpsertValues() {
			c.upserts[k] = true
		}
		return c
	}
	uc := txn.GetUpdateConfig()
	if uc == nil {
		return c
	}
	c.replace = uc.GetConfigUpdates().GetReplace()
	for _, e := range uc.GetConfigUpdates().GetUpdateEntries() {
		if e != nil && e.Value != nil {
			c.upserts[e.GetKey()] = true
		} else {
			c.deletes[e.GetKey()] = true
		}
	}
	for k := range uc.GetUpsertValues() {
		c.upserts[k] = true
	}
	for _, k := range uc.GetDeleteKeys() {
		c.deletes[k] = true
	}
	return c
}

func (c configChange) empty() bool {
	return !c.replace && len(c.upserts) == 0 && len(c.deletes) == 0
}

// configKeyConflict reports a config key that a sets and b sets or deletes,
// or the other way round (Lance's upsert_key_conflict). Deleting a key on
// both sides is idempotent. Beyond Lance, replacing the whole map conflicts
// with any key change on the other side: Lance ignores the replace flag
// here, so one side's keys could silently vanish.
func configKeyConflict(a, b configChange) (string, bool) {
	if (a.replace && !b.empty()) || (b.replace && !a.empty()) {
		return "the whole config map is replaced", true
	}
	for _, k := range sortedConfigKeys(a.upserts) {
		if b.upserts[k] || b.deletes[k] {
			return "config key " + strconv.Quote(k), true
		}
	}
	for _, k := range sortedConfigKeys(b.upserts) {
		if a.deletes[k] {
			return "config key " + strconv.Quote(k), true
		}
	}
	return "", false
}

func sortedConfigKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// schemaMetadataTouched reports an UpdateConfig that sets schema metadata.
func schemaMetadataTouched(uc *lancepb.Transaction_UpdateConfig) bool {
	return uc.GetSchemaMetadataUpdates() != nil || len(uc.GetSchemaMetadata()) > 0
}

// fieldMetadataFields returns the fields whose metadata uc changes.
func fieldMetadataFields(uc *lancepb.Transaction_UpdateConfig) []int64 {
	var out []int64
	for id := range uc.GetFieldMetadataUpdates() {
		out = append(out, int64(id))
	}
	for id := range uc.GetFieldMetadata() {
		out = append(out, int64(id))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// sameMetadata reports metadata that two UpdateConfigs both change (Lance's
// modifies_same_metadata): overlapping table metadata, schema metadata on
// both sides, or the metadata of one field on both sides.
func sameMetadata(a, b *lancepb.Transaction_UpdateConfig) (string, bool) {
	ta, tb := a.GetTableMetadataUpdates(), b.GetTableMetadataUpdates()
	if ta != nil && tb != nil {
		if ta.GetReplace() || tb.GetReplace() {
			return "table metadata (replaced)", true
		}
		fragSetIDs := map[string]bool{}
		for _, e := range ta.GetUpdateEntries() {
			fragSetIDs[e.GetKey()] = true
		}
		for _, e := range tb.GetUpdateEntries() {
			if fragSetIDs[e.GetKey()] {
				return "table metadata key " + strconv.Quote(e.GetKey()), true
			}
		}
	}
	if schemaMetadataTouched(a) && schemaMetadataTouched(b) {
		return "schema metadata", true
	}
	fb := fieldMetadataFields(b)
	for _, id := range fieldMetadataFields(a) {
		if slices.Contains(fb, id) {
			return "metadata of field " + strconv.FormatInt(id, 10), true
		}
	}
	return "", false
}
