package table

import "cellguard/proto/lancepb"

// The rows of the conflict matrix for transactions that change rows in
// place, Delete and Update (reference D.2), and the key-filter,
// Project, overlay, replacement and row-change cases they meet.

// checkRowChange is the row of Delete and of Update.
func (c *checker) checkRowChange() (Conflict, error) {
	ours := rowChangeOf(c.ours)
	if v, decided := c.keyFilterCheck(ours); decided {
		return v, nil
	}
	switch c.theirsOp {
	case OpAppend, OpCreateIndex, OpReserveFragments, OpUpdateConfig, OpUpdateBases:
		return c.ok(), nil
	case OpProject:
		return c.rowChangeVsProject(ours), nil
	case OpDataOverlay:
		return c.rowChangeVsOverlay(ours), nil
	case OpRewrite:
		if x := ours.touched().and(rewriteOldIDs(c.theirs.GetRewrite())); len(x) > 0 {
			return c.retry(x, "a concurrent Rewrite compacted fragments %v that %s modifies", x, c.oursOp), nil
		}
		return c.ok(), nil
	case OpDataReplacement:
		return c.rowChangeVsReplacement(ours), nil
	case OpDelete, OpUpdate:
		return c.rowChangeVsRowChange(ours, rowChangeOf(c.theirs)), nil
	case OpMerge:
		return c.mustRetry(), nil
	case OpOverwrite, OpRestore:
		return c.replaced(), nil
	}
	return c.ok(), nil
}

// keyFilterCheck applies the 2026 merge-insert key rules to an Update that
// carries a key-existence filter (Update.inserted_rows). cellguard carries
// the filters without interpreting them, so where Lance would intersect
// two filters we cannot prove the keys disjoint and retry: stricter than
// Lance, never weaker.
func (c *checker) keyFilterCheck(ours rowChange) (Conflict, bool) {
	if !hasKeyFilter(ours.update) {
		return Conflict{}, false
	}
	switch c.theirsOp {
	case OpUpdate:
		if hasKeyFilter(c.theirs.GetUpdate()) {
			return c.retry(nil, "both are merge-inserts with key-existence filters, which cellguard does not compare"), true
		}
		return c.retry(nil, "a concurrent Update without a key-existence filter may have inserted the same keys"), true
	case OpAppend:
		return c.retry(nil, "a concurrent Append may have inserted the same keys"), true
	}
	return Conflict{}, false
}

// rowChangeVsProject: a Project is compatible with row changes, except
// that an in-place column rewrite conflicts with a Project that dropped a
// rewritten field (Lance #9436, merged 2026-09-19).
func (c *checker) rowChangeVsProject(ours rowChange) Conflict {
	if !ours.rewritesColumns() {
		return c.ok()
	}
	kept := projectKeeps(c.theirs.GetProject())
	var dropped []int64
	for _, f := range ours.fieldsModified() {
		if !kept[f] {
			dropped = append(dropped, f)
		}
	}
	if len(dropped) > 0 {
		return c.retry(ours.updated, "a concurrent Project dropped fields %v that this Update rewrote in fragments %v", dropped, sortedFragIDs(ours.updated))
	}
	return c.ok()
}

func projectKeeps(p *lancepb.Transaction_Project) map[int64]bool {
	kept := map[int64]bool{}
	for _, f := range p.GetSchema() {
		kept[int64(f.GetId())] = true
	}
	return kept
}

// rowChangeVsOverlay: theirs attached overlays.
//   - A Delete is compatible: deletions take precedence over overlays.
//   - An in-place column rewrite copied the pre-overlay values of every row
//     into its new column files, and applying it supersedes the overlay's
//     values for the rewritten fields: retry when an overlay on a fragment
//     we rewrote supplies one of our fields.
//   - A row-moving Update re-inserted its matched rows with pre-overlay
//     values: those rows lose the overlay. Rebase checks row by row whether
//     the rows we moved intersect the overlay's coverage.
func (c *checker) rowChangeVsOverlay(ours rowChange) Conflict {
	groups := c.theirs.GetDataOverlay().GetGroups()
	switch {
	case ours.rewritesColumns():
		updated := newFragSet(ours.updated)
		var frags []uint64
		var fields []int64
		for _, g := range groups {
			if !updated.has(g.GetFragmentId()) {
				continue
			}
			if x := c.fields.overlap(overlayGroupFields(g), ours.fieldsModified()); len(x) > 0 {
				frags = append(frags, g.GetFragmentId())
				fields = append(fields, x...)
			}
		}
		if len(frags) > 0 {
			return c.retry(frags, "a concurrent DataOverlay on fragments %v supplies fields %v that this Update rewrote from pre-overlay values",
				sortedFragIDs(frags), c.fields.overlap(fields, fields))
		}
	case ours.movesRows():
		removed, updated := newFragSet(ours.removed), newFragSet(ours.updated)
		var gone, check []uint64
		for _, g := range groups {
			switch id := g.GetFragmentId(); {
			case removed.has(id):
				gone = append(gone, id)
			case updated.has(id):
				check = append(check, id)
			}
		}
		if len(gone) > 0 {
			return c.retry(gone, "a concurrent DataOverlay supplied values for fragments %v, whose rows this Update moved out with pre-overlay values", sortedFragIDs(gone))
		}
		if len(check) > 0 {
			return c.rebase(check, "rows this Update moved out of fragments %v must not be covered by the concurrent overlay", sortedFragIDs(check))
		}
	}
	return c.ok()
}

// rowChangeVsReplacement: theirs replaced column files. Lance retries when
// the fragments overlap. Beyond Lance (#9043, reference F.2): an in-place
// column rewrite of other fields of the same fragment is Rebasable. Both
// write whole column files positionally and move no rows, so with disjoint
// fields each one's files stay valid next to the other's; Rebase carries
// the replaced file into our post-image. Rebase re-checks disjointness on
// the actual data files, with nested fields related to their ancestors.
func (c *checker) rowChangeVsReplacement(ours rowChange) Conflict {
	dr := c.theirs.GetDataReplacement()
	shared := ours.touched().and(replacementIDs(dr))
	if len(shared) == 0 {
		return c.ok()
	}
	replaced := replacedFields(dr, newFragSet(shared))
	if ours.rewritesColumns() && len(newFragSet(ours.removed).and(shared)) == 0 && len(ours.fieldsModified()) > 0 {
		if x := c.fields.overlap(ours.fieldsModified(), replaced); len(x) == 0 {
			return c.rebase(shared, "the concurrent DataReplacement of fields %v in fragments %v must be carried into this column rewrite of fields %v",
				replaced, shared, ours.fieldsModified())
		}
	}
	return c.retry(shared, "a concurrent DataReplacement replaced fields %v of fragments %v that %s modifies", replaced, shared, c.oursOp)
}

// rowChangeVsRowChange is note 1: Delete/Update against Delete/Update.
func (c *checker) rowChangeVsRowChange(ours, theirs rowChange) Conflict {
	if x := ours.touched().and(theirs.removed); len(x) > 0 {
		return c.retry(x, "fragments %v that %s modifies were removed by a concurrent %s", x, c.oursOp, c.theirsOp)
	}
	if x := newFragSet(ours.removed).and(theirs.updated); len(x) > 0 {
		return c.retry(x, "fragments %v that %s removes were modified by a concurrent %s", x, c.oursOp, c.theirsOp)
	}
	shared := newFragSet(ours.updated).and(theirs.updated)
	if len(shared) == 0 {
		return c.ok()
	}
	if theirs.rewritesColumns() {
		// Theirs changed data files of the fragments, not only deletion
		// files. Beyond Lance (#9043, reference F.2): two column rewrites
		// of disjoint fields rebase: each wrote whole column files for its
		// own fields and neither moved rows, so Rebase carries their files
		// into our post-image (checking disjointness again on the actual
		// files) and merges deletion vectors as for any row change.
		if ours.rewritesColumns() && len(ours.fieldsModified()) > 0 && len(theirs.fieldsModified()) > 0 {
			if x := c.fields.overlap(ours.fieldsModified(), theirs.fieldsModified()); len(x) == 0 {
				return c.rebase(shared, "the concurrent rewrite of fields %v in fragments %v must be carried into this rewrite of fields %v",
					theirs.fieldsModified(), shared, ours.fieldsModified())
			}
			return c.retry(shared, "a concurrent Update rewrote fields %v of fragments %v, overlapping fields %v this Update rewrote",
				c.fields.overlap(theirs.fieldsModified(), ours.fieldsModified()), shared,
				c.fields.overlap(ours.fieldsModified(), theirs.fieldsModified()))
		}
		return c.retry(shared, "a concurrent Update rewrote columns %v of fragments %v that %s modifies", theirs.fieldsModified(), shared, c.oursOp)
	}
	// Theirs changed only deletion vectors of the shared fragments.
	return c.rebase(shared, "deletion vectors of fragments %v must be merged with the concurrent %s", shared, c.theirsOp)
}
