package table

import (
	"strconv"

	"cellguard/proto/lancepb"
)

// The per-operation rows of the matrix: each check* method classifies ours
// (of the named kind) against theirs. Rows and notes follow reference D.2.

func (c *checker) checkAppend() Conflict {
	switch c.theirsOp {
	case OpOverwrite, OpRestore:
		return c.replaced()
	}
	return c.ok()
}

func (c *checker) checkReserveFragments() Conflict {
	switch c.theirsOp {
	case OpOverwrite, OpRestore:
		return c.replaced()
	}
	return c.ok()
}

func (c *checker) checkOverwrite() Conflict {
	switch c.theirsOp {
	case OpOverwrite:
		if what, clash := configKeyConflict(configChangeOf(c.ours), configChangeOf(c.theirs)); clash {
			return c.incompatible(nil, "both Overwrites set %s", what)
		}
		// Since 2026 Lance retries concurrent overwrites so that the writer
		// decides whether its overwrite should still happen.
		return c.retry(nil, "a concurrent Overwrite replaced the table first")
	case OpUpdateConfig:
		if what, clash := configKeyConflict(configChangeOf(c.ours), configChangeOf(c.theirs)); clash {
			return c.incompatible(nil, "Overwrite and a concurrent UpdateConfig both change %s", what)
		}
	}
	return c.ok()
}

func (c *checker) checkMerge() Conflict {
	switch c.theirsOp {
	case OpCreateIndex:
		if anyIndexNamed(c.theirs.GetCreateIndex().GetNewIndices(), memWALIndexName) {
			return c.retry(nil, "a concurrent CreateIndex installed the MemWAL index, which validates the schema Merge replaces")
		}
		return c.ok()
	case OpReserveFragments, OpUpdateConfig, OpUpdateBases:
		return c.ok()
	case OpOverwrite, OpRestore:
		return c.replaced()
	case OpProject:
		return c.incompatible(nil, "Merge carries the whole schema and a concurrent Project changed it")
	}
	// Merge installs the complete fragment list as of its read version:
	// any concurrent data change would be lost.
	return c.retry(nil, "Merge installs the whole fragment list and a concurrent %s changed data", c.theirsOp)
}

func (c *checker) checkProject() Conflict {
	switch c.theirsOp {
	case OpMerge, OpProject:
		return c.retry(nil, "the schema must be recomputed after a concurrent %s", c.theirsOp)
	case OpOverwrite, OpRestore:
		return c.replaced()
	}
	return c.ok()
}

func (c *checker) checkUpdateConfig() Conflict {
	ours := c.ours.GetUpdateConfig()
	switch c.theirsOp {
	case OpOverwrite:
		if schemaMetadataTouched(ours) || len(fieldMetadataFields(ours)) > 0 {
			return c.incompatible(nil, "UpdateConfig changes schema or field metadata of a table a concurrent Overwrite replaced")
		}
		if what, clash := configKeyConflict(configChangeOf(c.ours), configChangeOf(c.theirs)); clash {
			return c.incompatible(nil, "UpdateConfig and a concurrent Overwrite both change %s", what)
		}
	case OpUpdateConfig:
		if what, clash := configKeyConflict(configChangeOf(c.ours), configChangeOf(c.theirs)); clash {
			return c.incompatible(nil, "both UpdateConfigs change %s", what)
		}
		if what, clash := sameMetadata(ours, c.theirs.GetUpdateConfig()); clash {
			return c.incompatible(nil, "both UpdateConfigs change %s", what)
		}
	}
	return c.ok()
}

func (c *checker) checkUpdateBases() Conflict {
	if c.theirsOp != OpUpdateBases {
		return c.ok()
	}
	for _, ours := range c.ours.GetUpdateBases().GetNewBases() {
		for _, theirs := range c.theirs.GetUpdateBases().GetNewBases() {
			switch {
			case ours.GetId() != 0 && ours.GetId() == theirs.GetId():
				return c.incompatible(nil, "both add base path id %d", ours.GetId())
			case hasBaseName(ours) && hasBaseName(theirs) && ours.GetName() == theirs.GetName():
				return c.incompatible(nil, "both add base path name %q", ours.GetName())
			case ours.GetPath() == theirs.GetPath():
				return c.incompatible(nil, "both add base path %q", ours.GetPath())
			}
		}
	}
	return c.ok()
}

func (c *checker) checkCreateIndex() (Conflict, error) {
	ours := c.ours.GetCreateIndex()
	switch c.theirsOp {
	case OpCreateIndex:
		if what, clash := createIndexClash(ours, c.theirs.GetCreateIndex()); clash {
			return c.retry(nil, "%s", what), nil
		}
		return c.ok(), nil
	case OpUpdate:
		return c.createIndexVsUpdate(ours)
	case OpMerge:
		if anyIndexNamed(ours.GetNewIndices(), memWALIndexName) {
			return c.retry(nil, "the MemWAL index validates the schema a concurrent Merge replaced"), nil
		}
		if v, clash := c.createIndexVsSchema(ours, c.theirs.GetMerge().GetSchema()); clash {
			return v, nil
		}
		return c.ok(), nil
	case OpProject:
		if v, clash := c.createIndexVsSchema(ours, c.theirs.GetProject().GetSchema()); clash {
			return v, nil
		}
		return c.ok(), nil
	case OpRewrite:
		if v, clash := c.removedVsRewrite(ours); clash {
			return v, nil
		}
		old := newFragSet(rewriteOldIDs(c.theirs.GetRewrite()))
		return c.indexesVsRewrite(ours.GetNewIndices(), old, "a concurrent Rewrite")
	case OpDataReplacement:
		return c.indexesVsReplacement(ours.GetNewIndices(), c.theirs.GetDataReplacement(), "the concurrent DataReplacement replaced"), nil
	case OpOverwrite, OpRestore:
		return c.replaced(), nil
	}
	// Append, Delete, DataOverlay (the index version gate excludes newer
	// overlaid cells), ReserveFragments, Project, UpdateConfig, UpdateBases.
	return c.ok(), nil
}

// createIndexClash holds Lance's 2026 rules for two CreateIndex
// transactions.
func createIndexClash(ours, theirs *lancepb.Transaction_CreateIndex) (string, bool) {
	for _, name := range []string{fragReuseIndexName, memWALIndexName} {
		if anyIndexNamed(ours.GetNewIndices(), name) && anyIndexNamed(theirs.GetNewIndices(), name) {
			return "both transactions install the system index " + name, true
		}
	}
	for _, idx := range ours.GetNewIndices() {
		name := idx.GetName()
		if name == fragReuseIndexName || name == memWALIndexName {
			continue
		}
		if anyIndexNamed(theirs.GetNewIndices(), name) {
			return "a concurrent CreateIndex also created index " + strconv.Quote(name), true
		}
	}
	// A segment appended to an index without replacing one has no source
	// identity: a concurrent drop of the same name must conflict.
	for _, idx := range ours.GetNewIndices() {
		if !anyIndexNamed(ours.GetRemovedIndices(), idx.GetName()) && anyIndexNamed(theirs.GetRemovedIndices(), idx.GetName()) {
			return "a concurrent CreateIndex dropped index " + strconv.Quote(idx.GetName()) + ", which this transaction extends", true
		}
	}
	for _, idx := range theirs.GetNewIndices() {
		if !anyIndexNamed(theirs.GetRemovedIndices(), idx.GetName()) && anyIndexNamed(ours.GetRemovedIndices(), idx.GetName()) {
			return "a concurrent CreateIndex extended index " + strconv.Quote(idx.GetName()) + ", which this transaction drops", true
		}
	}
	// Replacing a segment the other side also removed would undo the drop
	// or publish a replacement built from a stale source. Two pure removals
	// of the same segment are idempotent.
	for _, r := range ours.GetRemovedIndices() {
		for _, cr := range theirs.GetRemovedIndices() {
			if !sameIndexUUID(r, cr) {
				continue
			}
			names := func(list []*lancepb.IndexMetadata) bool {
				return anyIndexNamed(list, r.GetName()) || anyIndexNamed(list, cr.GetName())
			}
			if names(ours.GetNewIndices()) || names(theirs.GetNewIndices()) {
				return "both transactions replace segment " + strconv.Quote(r.GetName()) + " of the same identity", true
			}
		}
	}
	return "", false
}

// createIndexVsUpdate: an Update that rewrote indexed fields in place makes
// the new index stale for the updated fragments. Lance (2026) rebases by
// pruning those fragments from the index's fragment bitmap; so does Rebase.
// An index without a bitmap cannot be pruned: retry (Lance leaves it).
func (c *checker) createIndexVsUpdate(ours *lancepb.Transaction_CreateIndex) (Conflict, error) {
	theirs := rowChangeOf(c.theirs)
	modified := theirs.fieldsModified()
	if len(modified) == 0 {
		return c.ok(), nil
	}
	var prune []uint64
	for _, idx := range ours.GetNewIndices() {
		if len(c.fields.overlap(indexDependsOn(idx), modified)) == 0 {
			continue
		}
		bm, present, err := indexFragments(idx)
		if err != nil {
			return Conflict{}, err
		}
		if !present {
			return c.retry(theirs.updated, "index %q has no fragment bitmap, and a concurrent Update rewrote its fields %v in fragments %v",
				idx.GetName(), c.fields.overlap(modified, indexDependsOn(idx)), sortedFragIDs(theirs.updated)), nil
		}
		for _, id := range theirs.updated {
			if bitmapHasFragment(bm, id) {
				prune = append(prune, id)
			}
		}
	}
	if len(prune) > 0 {
		return c.rebase(prune, "the new indexes must stop covering fragments %v, whose indexed fields a concurrent Update rewrote", sortedFragIDs(prune)), nil
	}
	return c.ok(), nil
}

// indexesVsRewrite: a compaction that moved indexed rows invalidates the
// row addresses an index build recorded (notes 5 and 7, without a
// fragment-reuse index, which the wire format never carries for a
// Rewrite). An index without a fragment bitmap may cover anything.
func (c *checker) indexesVsRewrite(indexes []*lancepb.IndexMetadata, old fragSet, who string) (Conflict, error) {
	for _, idx := range indexes {
		bm, present, err := indexFragments(idx)
		if err != nil {
			return Conflict{}, err
		}
		if !present {
			return c.retry(sortedFragIDs(fragSetIDs(old)), "index %q has no fragment bitmap and %s moved rows", idx.GetName(), who), nil
		}
		var moved []uint64
		for id := range old {
			if bitmapHasFragment(bm, id) {
				moved = append(moved, id)
			}
		}
		if len(moved) > 0 {
			return c.retry(moved, "index %q covers fragments %v, which %s compacted", idx.GetName(), sortedFragIDs(moved), who), nil
		}
	}
	return c.ok(), nil
}

// indexesVsReplacement is note 6, in both directions: a replaced field the
// index depends on (keyed on or carried) makes the index stale.
func (c *checker) indexesVsReplacement(indexes []*lancepb.IndexMetadata, dr *lancepb.Transaction_DataReplacement, who string) Conflict {
	for _, idx := range indexes {
		for _, g := range dr.GetReplacements() {
			if x := c.fields.overlap(liveFieldIDs(g.GetNewFile().GetFields()), indexDependsOn(idx)); len(x) > 0 {
				return c.retry([]uint64{g.GetFragmentId()}, "index %q depends on fields %v, which %s in fragment %d",
					idx.GetName(), x, who, g.GetFragmentId())
			}
		}
	}
	return c.ok()
}

func (c *checker) checkRewrite() (Conflict, error) {
	old := newFragSet(rewriteOldIDs(c.ours.GetRewrite()))
	clash := func(ids []uint64, what string) Conflict {
		if x := old.and(ids); len(x) > 0 {
			return c.retry(x, "fragments %v that Rewrite compacts were %s by a concurrent %s", x, what, c.theirsOp)
		}
		return c.ok()
	}
	if v, clash := c.rewriteVsIndexChange(); clash {
		return v, nil
	}
	switch c.theirsOp {
	case OpDelete, OpUpdate:
		theirs := rowChangeOf(c.theirs)
		return clash(append(theirs.updated, theirs.removed...), "modified"), nil
	case OpDataOverlay:
		// Compaction changes physical offsets, so an overlay addressed by
		// offset must be re-applied against the new fragments.
		return clash(overlayIDs(c.theirs.GetDataOverlay()), "overlaid"), nil
	case OpRewrite:
		return clash(rewriteOldIDs(c.theirs.GetRewrite()), "compacted"), nil
	case OpDataReplacement:
		return clash(replacementIDs(c.theirs.GetDataReplacement()), "given new column files"), nil
	case OpMerge:
		return c.mustRetry(), nil
	case OpCreateIndex:
		ci := c.theirs.GetCreateIndex()
		if anyIndexNamed(ci.GetNewIndices(), fragReuseIndexName) {
			// A fragment-reuse-index cleanup. Our Rewrite carries no
			// fragment-reuse index on the wire, so there is nothing to
			// rebase; Lance refuses a cleanup mixed with other indexes.
			if len(ci.GetNewIndices()) != 1 || len(ci.GetRemovedIndices()) != 1 {
				return c.incompatible(nil, "a concurrent CreateIndex mixed the fragment-reuse index with other indexes"), nil
			}
			return c.ok(), nil
		}
		return c.indexesVsRewrite(ci.GetNewIndices(), old, "this Rewrite")
	case OpOverwrite, OpRestore:
		return c.replaced(), nil
	}
	// Append, ReserveFragments, Project, UpdateConfig, UpdateBases.
	return c.ok(), nil
}

func (c *checker) checkDataReplacement() Conflict {
	ours := c.ours.GetDataReplacement()
	switch c.theirsOp {
	case OpProject:
		kept := projectKeeps(c.theirs.GetProject())
		for _, g := range ours.GetReplacements() {
			for _, f := range liveFieldIDs(g.GetNewFile().GetFields()) {
				if !kept[f] {
					return c.incompatible([]uint64{g.GetFragmentId()}, "field %d, which DataReplacement replaces in fragment %d, was dropped by a concurrent Project", f, g.GetFragmentId())
				}
			}
		}
		return c.ok()
	case OpMerge:
		return c.mustRetry()
	case OpDelete:
		// A delete only tombstones rows: our positional file stays aligned
		// and the head's deletion vector is kept.
		if x := newFragSet(replacementIDs(ours)).and(c.theirs.GetDelete().GetDeletedFragmentIds()); len(x) > 0 {
			return c.incompatible(x, "fragments %v that DataReplacement targets were removed by a concurrent Delete", x)
		}
		return c.ok()
	case OpUpdate:
		theirs := rowChangeOf(c.theirs)
		targets := newFragSet(replacementIDs(ours))
		if x := targets.and(theirs.removed); len(x) > 0 {
			return c.incompatible(x, "fragments %v that DataReplacement targets were removed by a concurrent Update", x)
		}
		updated := newFragSet(theirs.updated)
		for _, g := range ours.GetReplacements() {
			id := g.GetFragmentId()
			if !updated.has(id) {
				continue
			}
			if theirs.movesRows() {
				return c.retry([]uint64{id}, "a concurrent Update moved rows out of fragment %d, which our positional column file still covers", id)
			}
			if x := c.fields.overlap(liveFieldIDs(g.GetNewFile().GetFields()), theirs.fieldsModified()); len(x) > 0 {
				return c.retry([]uint64{id}, "a concurrent Update rewrote fields %v of fragment %d, which DataReplacement also replaces", x, id)
			}
		}
		return c.ok()
	case OpCreateIndex:
		return c.indexesVsReplacement(c.theirs.GetCreateIndex().GetNewIndices(), ours, "DataReplacement replaces")
	case OpRewrite:
		if x := newFragSet(rewriteOldIDs(c.theirs.GetRewrite())).and(replacementIDs(ours)); len(x) > 0 {
			return c.retry(x, "fragments %v that DataReplacement targets were compacted by a concurrent Rewrite", x)
		}
		return c.ok()
	case OpDataReplacement:
		for _, g := range ours.GetReplacements() {
			for _, h := range c.theirs.GetDataReplacement().GetReplacements() {
				if g.GetFragmentId() != h.GetFragmentId() {
					continue
				}
				if x := c.fields.overlap(liveFieldIDs(g.GetNewFile().GetFields()), liveFieldIDs(h.GetNewFile().GetFields())); len(x) > 0 {
					return c.retry([]uint64{g.GetFragmentId()}, "a concurrent DataReplacement also replaced fields %v of fragment %d", x, g.GetFragmentId())
				}
			}
		}
		return c.ok()
	case OpDataOverlay:
		return c.replacementVsOverlay(ours)
	case OpOverwrite, OpRestore:
		return c.replaced()
	}
	// Append, ReserveFragments, UpdateConfig, UpdateBases.
	return c.ok()
}

// replacementVsOverlay: Lance accepts a DataReplacement over a concurrent
// overlay ("the overlay is newer and wins its covered cells"), but applying
// the replacement then supersedes the overlay's values for the replaced
// fields (Lance's build_manifest tombstones them in every overlay, and
// Apply in every overlay committed up to the read version, which Rebase
// advances to the head): the concurrent overlay's cells would silently
// revert to values computed without it. Stricter than Lance, a
// replacement of a field an overlay concurrently wrote in the same
// fragment retries. Overlays of other fields or fragments are compatible:
// both keep physical offsets.
func (c *checker) replacementVsOverlay(ours *lancepb.Transaction_DataReplacement) Conflict {
	for _, g := range ours.GetReplacements() {
		for _, o := range c.theirs.GetDataOverlay().GetGroups() {
			if g.GetFragmentId() != o.GetFragmentId() {
				continue
			}
			if x := c.fields.overlap(liveFieldIDs(g.GetNewFile().GetFields()), overlayGroupFields(o)); len(x) > 0 {
				return c.retry([]uint64{g.GetFragmentId()}, "a concurrent DataOverlay wrote fields %v of fragment %d, whose values this DataReplacement would supersede unseen",
					x, g.GetFragmentId())
			}
		}
	}
	return c.ok()
}

// checkDataOverlay is the 2026 DataOverlay row. Overlays stack and keep
// physical offsets; they conflict only with what invalidates the offsets
// or drops the overlaid fragment.
func (c *checker) checkDataOverlay() Conflict {
	ours := newFragSet(overlayIDs(c.ours.GetDataOverlay()))
	switch c.theirsOp {
	case OpDelete:
		if x := ours.and(c.theirs.GetDelete().GetDeletedFragmentIds()); len(x) > 0 {
			return c.retry(x, "overlaid fragments %v were removed by a concurrent Delete", x)
		}
		return c.ok()
	case OpUpdate:
		theirs := rowChangeOf(c.theirs)
		if x := ours.and(theirs.removed); len(x) > 0 {
			return c.retry(x, "overlaid fragments %v were removed by a concurrent Update", x)
		}
		if theirs.movesRows() {
			if x := ours.and(theirs.updated); len(x) > 0 {
				return c.rebase(x, "rows a concurrent Update moved out of fragments %v must not be covered by this overlay", x)
			}
		}
		return c.ok()
	case OpRewrite:
		if x := ours.and(rewriteOldIDs(c.theirs.GetRewrite())); len(x) > 0 {
			return c.retry(x, "overlaid fragments %v were compacted by a concurrent Rewrite, changing their offsets", x)
		}
		return c.ok()
	case OpMerge:
		return c.mustRetry()
	case OpOverwrite, OpRestore:
		return c.replaced()
	}
	// Append, CreateIndex, ReserveFragments, Project, UpdateConfig,
	// UpdateBases, DataReplacement, DataOverlay.
	return c.ok()
}

func hasBaseName(b *lancepb.BasePath) bool { return b != nil && b.Name != nil }

func fragSetIDs(s fragSet) []uint64 {
	out := make([]uint64, 0, len(s))
	for id := range s {
		out = append(out, id)
	}
	return out
}
