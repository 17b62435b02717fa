package table

// apply_indices.go keeps a version's index section: the list of index
// segments (lancepb.IndexMetadata) in Lance's order, and what each
// operation does to it, as Lance's build_manifest does.
//
// The invariant every rule keeps: an index segment never claims a fragment
// whose indexed values it does not hold. Lance trusts fragment_bitmap at
// read time (a fragment in it is never scanned), so a bitmap that claims
// too much answers wrongly without an error, while one that claims too
// little only costs a scan. A fragment id therefore enters a bitmap only
// where Lance puts it: a CreateIndex's own entries, a compaction's remap
// (Rewrite) and, with stable row ids, the rows an Update moved unchanged.
// Where Lance's own rules are unknown or leave an index stale (columns
// rewritten in place by DataReplacement, DataOverlay or a Merge), the
// rewritten fragments leave the bitmaps of the indices on those columns.

import (
	"slices"
	"strconv"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// IndexRules names whose rules the index list of a table follows where
// Lance releases differ. A manifest read with FromProto or FromFile takes
// them from its writer_version; a table cellguard creates follows Lance 8's.
// Every version built from a manifest keeps its rules.
type IndexRules uint8

const (
	// IndexRulesLance8 is Lance 8.0 (LanceDB 0.31): a vector index none of
	// whose fragments is left leaves the manifest; bitmaps are written
	// without run containers.
	IndexRulesLance8 IndexRules = iota
	// IndexRulesLance12 is Lance 12.0 (LanceDB 0.39): such a vector index
	// stays as an empty definition; a bitmap is written run-optimized.
	IndexRulesLance12
)

func (r IndexRules) String() string {
	switch r {
	case IndexRulesLance8:
		return "lance8"
	case IndexRulesLance12:
		return "lance12"
	}
	return "IndexRules(" + strconv.Itoa(int(r)) + ")"
}

// rulesOf returns the index rules of a manifest Lance wrote.
func rulesOf(wv *lancepb.Manifest_WriterVersion) IndexRules {
	if wv.GetLibrary() != "lance" {
		return IndexRulesLance8
	}
	major, _, _ := strings.Cut(wv.GetVersion(), ".")
	if n, err := strconv.Atoi(major); err == nil && n >= 12 {
		return IndexRulesLance12
	}
	return IndexRulesLance8
}

// vectorDetailsType ends the index_details type of Lance's vector indices.
const vectorDetailsType = "VectorIndexDetails"

func isSystemIndex(idx *lancepb.IndexMetadata) bool {
	return idx.GetName() == fragReuseIndexName || idx.GetName() == memWALIndexName
}

func isVectorIndex(idx *lancepb.IndexMetadata) bool {
	return strings.HasSuffix(idx.GetIndexDetails().GetTypeUrl(), vectorDetailsType)
}

// Indices returns the version's index segments in the order of its index
// section. Callers must not modify them.
func (m *Manifest) Indices() []*lancepb.IndexMetadata { return m.indices }

// IndexRules returns whose index rules the table follows.
func (m *Manifest) IndexRules() IndexRules { return m.rules }

// IndexSection returns the version's index section as the manifest file
// carries it, or nil when the version has no index (Lance then writes no
// section). The entries are shared with m: callers must not modify them.
func (m *Manifest) IndexSection() *lancepb.IndexSection {
	if len(m.indices) == 0 {
		return nil
	}
	return &lancepb.IndexSection{Indices: m.indices}
}

// WithIndices returns m with the given index section and rules instead of
// its own: how a manifest stored apart from its index section (a
// checkpoint, an adoption) gets it back. The entries are copied and
// checked (checkIndexList); errors wrap ErrMalformed.
func (m *Manifest) WithIndices(s *lancepb.IndexSection, rules IndexRules) (*Manifest, error) {
	list := cloneAll(s.GetIndices())
	if msg := checkIndexList(list); msg != "" {
		return nil, errorf("decode index section", ErrMalformed, "%s", msg)
	}
	if rules > IndexRulesLance12 {
		return nil, errorf("decode index section", ErrMalformed, "unknown index rules %d", rules)
	}
	c := *m
	c.indices = nil
	if len(list) > 0 {
		c.indices = list
	}
	c.rules = rules
	return &c, nil
}

// FromFile builds the Manifest of a manifest file: FromProto of its
// manifest, with its index section. f must not be modified afterwards.
func FromFile(f *ManifestFile) (*Manifest, error) {
	if f == nil || f.Manifest == nil {
		return nil, errorf("decode manifest", ErrMalformed, "no manifest")
	}
	m, err := FromProto(f.Manifest)
	if err != nil {
		return nil, err
	}
	return m.WithIndices(f.Indexes, m.rules)
}

// checkIndexList checks what the model relies on in an index list: no
// empty entry, 16-byte uuids, none twice, fragment bitmaps that decode.
func checkIndexList(list []*lancepb.IndexMetadata) string {
	seen := make(map[string]bool, len(list))
	for i, idx := range list {
		if idx == nil {
			return "index " + strconv.Itoa(i) + " is empty"
		}
		u := idx.GetUuid().GetUuid()
		if len(u) != 16 {
			return "index " + strconv.Quote(idx.GetName()) + ": uuid has " + strconv.Itoa(len(u)) + " bytes, want 16"
		}
		if seen[string(u)] {
			return "index " + strconv.Quote(idx.GetName()) + ": uuid " + uuidString(u) + " appears twice"
		}
		seen[string(u)] = true
		if _, _, err := indexFragments(idx); err != nil {
			return err.Error()
		}
	}
	return ""
}

func uuidString(u []byte) string {
	const hex = "0123456789abcdef"
	var sb strings.Builder
	for i, b := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			sb.WriteByte('-')
		}
		sb.WriteByte(hex[b>>4])
		sb.WriteByte(hex[b&15])
	}
	return sb.String()
}

// applyIndices builds the index list of the new version from head's, for
// the operation just applied to the fragments and schema (a.b).
func (a *applier) applyIndices() error {
	var err error
	list := a.b.indices
	switch op := a.txn.GetOperation().(type) {
	case *lancepb.Transaction_Overwrite_:
		list = nil
	case *lancepb.Transaction_Restore_:
		return nil // the restored version's list, with the rest of it
	case *lancepb.Transaction_CreateIndex_:
		list, err = a.createIndices(list, op.CreateIndex)
	case *lancepb.Transaction_Delete_, *lancepb.Transaction_Project_:
		list, err = a.retainRelevant(list)
	case *lancepb.Transaction_Update_:
		list, err = a.updateIndices(list, op.Update)
	case *lancepb.Transaction_Rewrite_:
		list, err = a.rewriteIndices(list, op.Rewrite)
	case *lancepb.Transaction_Merge_:
		if list, err = a.pruneRewrittenFiles(list); err == nil {
			list, err = a.retainRelevant(list)
		}
	case *lancepb.Transaction_DataReplacement_:
		rewritten := map[uint64][]int32{}
		for _, g := range op.DataReplacement.GetReplacements() {
			rewritten[g.GetFragmentId()] = append(rewritten[g.GetFragmentId()], g.GetNewFile().GetFields()...)
		}
		list, err = a.pruneFields(list, rewritten)
	case *lancepb.Transaction_DataOverlay_:
		rewritten := map[uint64][]int32{}
		for _, g := range op.DataOverlay.GetGroups() {
			for _, o := range g.GetOverlays() {
				rewritten[g.GetFragmentId()] = append(rewritten[g.GetFragmentId()], o.GetDataFile().GetFields()...)
			}
		}
		list, err = a.pruneFields(list, rewritten)
	default:
		// Append, ReserveFragments, UpdateConfig, UpdateBases: new
		// fragments join no index; nothing else changes.
		return nil
	}
	if err != nil {
		return err
	}
	if len(list) == 0 {
		list = nil
	}
	a.b.indices = list
	return nil
}

// createIndices keeps head's segments whose uuid is neither removed nor
// new, then appends the new ones in the transaction's order (Lance 8 and
// 12: replace, optimize's merges and deltas, and drop all go through
// removed_indices).
func (a *applier) createIndices(list []*lancepb.IndexMetadata, op *lancepb.Transaction_CreateIndex) ([]*lancepb.IndexMetadata, error) {
	drop := map[string]bool{}
	for i, idx := range op.GetRemovedIndices() {
		if idx == nil {
			return nil, a.invalid("removed index %d is empty", i)
		}
		drop[string(idx.GetUuid().GetUuid())] = true
	}
	news := make(map[string]bool, len(op.GetNewIndices()))
	for i, idx := range op.GetNewIndices() {
		if msg := a.checkIndex(idx); msg != "" {
			return nil, a.invalid("new index %d: %s", i, msg)
		}
		if len(idx.GetFragmentBitmap()) == 0 && !isSystemIndex(idx) {
			// Lance opens the index to learn its coverage; cellguard cannot.
			return nil, a.invalid("new index %d (%q) has no fragment bitmap", i, idx.GetName())
		}
		if bm, present, err := indexFragments(idx); err != nil {
			return nil, a.invalid("new index %d: %v", i, err)
		} else if present && !bm.IsEmpty() {
			// A fragment id the table never used would be taken by a later
			// append, and the index would claim rows it never indexed.
			if maxID, ok := a.head.MaxFragmentID(); !ok || bm.Maximum() > maxID {
				return nil, a.invalid("new index %d (%q) covers fragment %d, which the table never had", i, idx.GetName(), bm.Maximum())
			}
		}
		u := string(idx.GetUuid().GetUuid())
		if news[u] {
			return nil, a.invalid("new index %d (%q): uuid %s appears twice", i, idx.GetName(), uuidString([]byte(u)))
		}
		news[u] = true
	}
	out := make([]*lancepb.IndexMetadata, 0, len(list)+len(op.GetNewIndices()))
	for _, idx := range list {
		u := string(idx.GetUuid().GetUuid())
		if !drop[u] && !news[u] {
			out = append(out, idx)
		}
	}
	for _, idx := range op.GetNewIndices() {
		c := proto.CloneOf(idx)
		if isSystemIndex(c) {
			out = append(out, c)
			continue
		}
		// Two live segments of one name covering the same fragment would
		// make Lance reopen the index to repair its coverage (its
		// migrate_indices), which cellguard cannot do.
		bm, _, _ := indexFragments(c)
		for _, other := range out {
			if other.GetName() != c.GetName() {
				continue
			}
			obm, ok, _ := indexFragments(other)
			if ok && obm.Intersects(bm) && a.anyLive(roaring.And(obm, bm)) {
				return nil, a.invalid("new index %q covers fragments %v that segment %s of the same name covers already",
					c.GetName(), a.liveIDs(roaring.And(obm, bm)), uuidString(other.GetUuid().GetUuid()))
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// anyLive reports whether bm holds the id of a fragment of the version
// being built.
func (a *applier) anyLive(bm *roaring.Bitmap) bool {
	it := bm.Iterator()
	for it.HasNext() {
		if _, ok := a.b.Fragment(uint64(it.Next())); ok {
			return true
		}
	}
	return false
}

func (a *applier) liveIDs(bm *roaring.Bitmap) []uint32 {
	var ids []uint32
	it := bm.Iterator()
	for it.HasNext() && len(ids) < 8 {
		id := it.Next()
		if _, ok := a.b.Fragment(uint64(id)); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// retainRelevant is Lance's retain_relevant_indices, run after Delete,
// Update, Merge and Project: an index on a field the schema no longer has
// goes; of the segments of one name, those whose fragments are all gone go
// while a sibling still covers a fragment; when none does, the oldest
// (lowest dataset_version) stays as an empty definition, except that
// Lance 8 drops a vector index then. System indices always stay. Bitmaps
// themselves are not edited (a bitmap keeps the ids of fragments that are
// gone). The order is kept.
func (a *applier) retainRelevant(list []*lancepb.IndexMetadata) ([]*lancepb.IndexMetadata, error) {
	if len(list) == 0 {
		return list, nil
	}
	schema := a.b.Schema()
	keep := make([]bool, len(list))
	empty := make([]bool, len(list))
	changed := false
	for i, idx := range list {
		keep[i] = true
		if isSystemIndex(idx) {
			continue
		}
		for _, f := range idx.GetFields() {
			if _, ok := schema.Field(f); !ok {
				keep[i], changed = false, true
				break
			}
		}
		if !keep[i] {
			continue
		}
		bm, ok, err := indexFragments(idx)
		if err != nil {
			return nil, a.invalid("%v", err)
		}
		empty[i] = ok && !a.anyLive(bm)
	}
	done := make([]bool, len(list))
	for i, idx := range list {
		if !keep[i] || done[i] || isSystemIndex(idx) {
			continue
		}
		var group []int
		for j := i; j < len(list); j++ {
			if keep[j] && !done[j] && !isSystemIndex(list[j]) && list[j].GetName() == idx.GetName() {
				group = append(group, j)
				done[j] = true
			}
		}
		nEmpty := 0
		for _, j := range group {
			if empty[j] {
				nEmpty++
			}
		}
		switch {
		case nEmpty == 0:
		case nEmpty < len(group):
			for _, j := range group {
				if empty[j] {
					keep[j], changed = false, true
				}
			}
		default:
			oldest := group[0]
			for _, j := range group[1:] {
				if list[j].GetDatasetVersion() < list[oldest].GetDatasetVersion() {
					oldest = j
				}
			}
			for _, j := range group {
				if j != oldest || a.b.rules == IndexRulesLance8 && isVectorIndex(list[j]) {
					keep[j], changed = false, true
				}
			}
		}
	}
	if !changed {
		return list, nil
	}
	out := make([]*lancepb.IndexMetadata, 0, len(list))
	for i, idx := range list {
		if keep[i] {
			out = append(out, idx)
		}
	}
	return out, nil
}

// updateIndices is the Update arm: the updated fragments leave the indices
// on the fields an in-place column update modified; with stable row ids, a
// REWRITE_ROWS update's pure new fragments (rows moved, none inserted)
// join the indices on fields it did not touch that covered every fragment
// the rows came from; then retainRelevant.
func (a *applier) updateIndices(list []*lancepb.IndexMetadata, op *lancepb.Transaction_Update) ([]*lancepb.IndexMetadata, error) {
	var err error
	if mod := op.GetFieldsModified(); len(mod) > 0 {
		rewritten := map[uint64][]int32{}
		for _, p := range op.GetUpdatedFragments() {
			for _, f := range mod {
				rewritten[p.GetId()] = append(rewritten[p.GetId()], int32(f))
			}
		}
		if list, err = a.pruneFields(list, rewritten); err != nil {
			return nil, err
		}
	}
	if a.stable && op.GetUpdateMode() == lancepb.Transaction_REWRITE_ROWS {
		if list, err = a.registerPureFragments(list, op); err != nil {
			return nil, err
		}
	}
	return a.retainRelevant(list)
}

// newFragmentIDs returns the ids the fragments got that arrived with id 0
// (assignIDs), in order, and keeps the others'.
func (a *applier) newFragmentIDs(frags []*lancepb.DataFragment) []uint64 {
	next := uint64(0)
	if id, ok := a.head.MaxFragmentID(); ok {
		next = uint64(id) + 1
	} else if id, ok := a.head.maxListedID(); ok {
		next = id + 1
	}
	ids := make([]uint64, len(frags))
	for i, f := range frags {
		ids[i] = f.GetId()
		if ids[i] == 0 {
			ids[i] = next
			next++
		}
	}
	return ids
}

func (a *applier) registerPureFragments(list []*lancepb.IndexMetadata, op *lancepb.Transaction_Update) ([]*lancepb.IndexMetadata, error) {
	news := op.GetNewFragments()
	ids := a.newFragmentIDs(news)
	pure := roaring.New()
	for i, f := range news {
		segs, msg := decodeRowIDs(f.GetInlineRowIds())
		if msg != "" || f.GetInlineRowIds() == nil {
			continue
		}
		if n, ok := sequenceLen(segs); ok && n == f.GetPhysicalRows() && ids[i] <= maxBitmapID {
			pure.Add(uint32(ids[i]))
		}
	}
	if pure.IsEmpty() {
		return list, nil
	}
	var original []uint64
	original = append(original, op.GetRemovedFragmentIds()...)
	for _, p := range op.GetUpdatedFragments() {
		original = append(original, p.GetId())
	}
	preserve := op.GetFieldsForPreservingFragBitmap()
	return editBitmaps(a, list, func(idx *lancepb.IndexMetadata, bm *roaring.Bitmap) bool {
		if isSystemIndex(idx) || slices.ContainsFunc(idx.GetFields(), func(f int32) bool { return f >= 0 && slices.Contains(preserve, uint32(f)) }) {
			return false
		}
		for _, id := range original {
			if !bitmapHasFragment(bm, id) {
				return false
			}
		}
		before := bm.GetCardinality()
		bm.Or(pure)
		return bm.GetCardinality() != before
	})
}

const maxBitmapID = 1<<32 - 1

// rewriteIndices is the Rewrite arm (compaction). Without stable row ids,
// each rewritten index is found by its old uuid (one that is gone is
// skipped) and gets its new uuid, its new files and its bitmap remapped (a group's old fragments out, its new
// ones in); an index the compaction did not rewrite keeps its bitmap,
// whose old fragment ids then cover nothing. With stable row ids there is
// nothing to rewrite: every bitmap is remapped in place. A group only
// partly covered by an index is an error, as in Lance.
func (a *applier) rewriteIndices(list []*lancepb.IndexMetadata, op *lancepb.Transaction_Rewrite) ([]*lancepb.IndexMetadata, error) {
	groups := op.GetGroups()
	if len(groups) == 0 {
		groups = []*lancepb.Transaction_Rewrite_RewriteGroup{{OldFragments: op.GetOldFragments(), NewFragments: op.GetNewFragments()}}
	}
	var all []*lancepb.DataFragment
	for _, g := range groups {
		all = append(all, g.GetNewFragments()...)
	}
	allIDs := a.newFragmentIDs(all)
	type remap struct{ old, new []uint64 }
	remaps := make([]remap, len(groups))
	k := 0
	for i, g := range groups {
		for _, f := range g.GetOldFragments() {
			remaps[i].old = append(remaps[i].old, f.GetId())
		}
		remaps[i].new = allIDs[k : k+len(g.GetNewFragments())]
		k += len(g.GetNewFragments())
	}
	recalc := func(idx *lancepb.IndexMetadata, bm *roaring.Bitmap) (bool, error) {
		changed := false
		for _, r := range remaps {
			in := 0
			for _, id := range r.old {
				if bitmapHasFragment(bm, id) {
					in++
				}
			}
			if in == 0 {
				continue
			}
			if in != len(r.old) {
				return false, a.invalid("rewrite group %v splits the fragments index %q covers from those it does not", r.old, idx.GetName())
			}
			for _, id := range r.old {
				bm.Remove(uint32(id))
			}
			for _, id := range r.new {
				if id > maxBitmapID {
					return false, a.invalid("fragment id %d does not fit an index's fragment bitmap", id)
				}
				bm.Add(uint32(id))
			}
			changed = true
		}
		return changed, nil
	}

	rewritten := op.GetRewrittenIndices()
	if a.stable {
		if len(rewritten) > 0 {
			return nil, a.invalid("a table with stable row ids keeps its indices through a compaction, but the rewrite names %d rewritten indices", len(rewritten))
		}
		var rerr error
		out, err := editBitmaps(a, list, func(idx *lancepb.IndexMetadata, bm *roaring.Bitmap) bool {
			if rerr != nil || isSystemIndex(idx) {
				return false
			}
			changed, err := recalc(idx, bm)
			rerr = err
			return changed
		})
		if rerr != nil {
			return nil, rerr
		}
		return out, err
	}
	if len(rewritten) == 0 {
		return list, nil
	}
	pos := make(map[string]int, len(list))
	for i, idx := range list {
		pos[string(idx.GetUuid().GetUuid())] = i
	}
	out := slices.Clone(list)
	done := map[string]bool{}
	for i, r := range rewritten {
		old := string(r.GetOldId().GetUuid())
		j, ok := pos[old]
		switch {
		case r == nil || len(r.GetNewId().GetUuid()) != 16:
			return nil, a.invalid("rewritten index %d has no 16-byte new uuid", i)
		case done[old]:
			return nil, a.invalid("index %s is rewritten twice", uuidString([]byte(old)))
		case !ok:
			// Removed since the compaction was planned (a dropped column
			// took it along): nothing to remap, as in Lance since 2026.
			done[old] = true
			continue
		}
		done[old] = true
		idx := proto.CloneOf(out[j])
		bm, present, err := indexFragments(idx)
		if err != nil {
			return nil, a.invalid("%v", err)
		}
		if !present {
			return nil, a.invalid("the rewrite remaps index %q, which has no fragment bitmap", idx.GetName())
		}
		if _, err := recalc(idx, bm); err != nil {
			return nil, err
		}
		idx.FragmentBitmap = a.encodeBitmap(bm)
		idx.Uuid = proto.CloneOf(r.GetNewId())
		if files := r.GetNewIndexFiles(); len(files) > 0 {
			idx.Files = cloneAll(files)
		}
		out[j] = idx
	}
	if msg := checkIndexList(out); msg != "" {
		return nil, a.invalid("%s", msg)
	}
	return out, nil
}

// pruneFields removes each fragment in rewritten from the bitmaps of the
// indices that depend on any of the fields listed for it: their values in
// that fragment are no longer the ones indexed.
func (a *applier) pruneFields(list []*lancepb.IndexMetadata, rewritten map[uint64][]int32) ([]*lancepb.IndexMetadata, error) {
	if len(rewritten) == 0 {
		return list, nil
	}
	return editBitmaps(a, list, func(idx *lancepb.IndexMetadata, bm *roaring.Bitmap) bool {
		if isSystemIndex(idx) {
			return false
		}
		deps := indexDependsOn(idx)
		changed := false
		for frag, fields := range rewritten {
			if frag > maxBitmapID || !bm.Contains(uint32(frag)) {
				continue
			}
			if slices.ContainsFunc(fields, func(f int32) bool { return slices.Contains(deps, int64(f)) }) {
				bm.Remove(uint32(frag))
				changed = true
			}
		}
		return changed
	})
}

// pruneRewrittenFiles is Merge's pruning: a fragment whose data file for
// an indexed field is not the one it was at head holds new values of that
// field, and leaves that index's bitmap.
func (a *applier) pruneRewrittenFiles(list []*lancepb.IndexMetadata) ([]*lancepb.IndexMetadata, error) {
	if len(list) == 0 {
		return list, nil
	}
	indexed := map[int32]bool{}
	for _, idx := range list {
		if !isSystemIndex(idx) {
			for _, f := range indexDependsOn(idx) {
				indexed[int32(f)] = true
			}
		}
	}
	rewritten := map[uint64][]int32{}
	a.b.Fragments(func(f *Fragment) bool {
		h, ok := a.head.Fragment(f.ID())
		if !ok || h == f {
			return true
		}
		for field := range indexed {
			if fileOf(h.Files(), field) != fileOf(f.Files(), field) {
				rewritten[f.ID()] = append(rewritten[f.ID()], field)
			}
		}
		return true
	})
	return a.pruneFields(list, rewritten)
}

// fileOf returns the path of the data file holding field, or "".
func fileOf(files []*lancepb.DataFile, field int32) string {
	for _, df := range files {
		if slices.Contains(df.GetFields(), field) {
			return df.GetPath()
		}
	}
	return ""
}

// editBitmaps calls edit with the decoded bitmap of every entry that has
// one; an entry for which edit reports a change is replaced by a copy with
// the edited bitmap. Entries left alone keep their bytes.
func editBitmaps(a *applier, list []*lancepb.IndexMetadata, edit func(*lancepb.IndexMetadata, *roaring.Bitmap) bool) ([]*lancepb.IndexMetadata, error) {
	var out []*lancepb.IndexMetadata
	for i, idx := range list {
		bm, ok, err := indexFragments(idx)
		if err != nil {
			return nil, a.invalid("%v", err)
		}
		if !ok || !edit(idx, bm) {
			continue
		}
		if out == nil {
			out = slices.Clone(list)
		}
		c := proto.CloneOf(idx)
		c.FragmentBitmap = a.encodeBitmap(bm)
		out[i] = c
	}
	if out == nil {
		return list, nil
	}
	return out, nil
}

// encodeBitmap writes a fragment bitmap as the table's Lance writes it:
// Lance 8 without run containers, Lance 12 run-optimized.
func (a *applier) encodeBitmap(bm *roaring.Bitmap) []byte {
	if a.b.rules >= IndexRulesLance12 {
		return canonicalBitmapBytes(bm)
	}
	plain := roaring.BitmapOf(bm.ToArray()...)
	enc, err := plain.ToBytes()
	if err != nil {
		panic("table: serialize roaring bitmap: " + err.Error())
	}
	return enc
}
