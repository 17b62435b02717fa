package table

import "cellguard/proto/lancepb"

// conflict_indices.go holds the conflict rules that follow from the index
// section a version carries (apply_indices.go): a transaction that names
// index segments by uuid or keys an index on fields must not land after a
// concurrent one that took those away.

// createIndexVsSchema: a concurrent Project or Merge that dropped (or
// replaced, under a new id) a field a new index keys on leaves nothing to
// index. No retry helps: the index must be built on the new column.
func (c *checker) createIndexVsSchema(ours *lancepb.Transaction_CreateIndex, schema []*lancepb.Field) (Conflict, bool) {
	ids := make(map[int32]bool, len(schema))
	for _, f := range schema {
		ids[f.GetId()] = true
	}
	for _, idx := range ours.GetNewIndices() {
		if isSystemIndex(idx) {
			continue
		}
		for _, f := range idx.GetFields() {
			if !ids[f] {
				return c.incompatible(nil, "index %q is on field %d, which a concurrent %s removed from the schema", idx.GetName(), f, c.theirsOp), true
			}
		}
	}
	return Conflict{}, false
}

// rewriteVsIndexChange: a Rewrite remaps the index segments it names by
// uuid. A concurrent CreateIndex that removed one of them (replace, merge,
// drop), or a concurrent Rewrite that gave one a new uuid, leaves the
// remap pointing at nothing: the compaction must be planned again.
func (c *checker) rewriteVsIndexChange() (Conflict, bool) {
	ours := c.ours.GetRewrite().GetRewrittenIndices()
	if len(ours) == 0 {
		return Conflict{}, false
	}
	var gone []*lancepb.UUID
	switch c.theirsOp {
	case OpCreateIndex:
		for _, idx := range c.theirs.GetCreateIndex().GetRemovedIndices() {
			gone = append(gone, idx.GetUuid())
		}
	case OpRewrite:
		for _, r := range c.theirs.GetRewrite().GetRewrittenIndices() {
			gone = append(gone, r.GetOldId())
		}
	default:
		return Conflict{}, false
	}
	for _, r := range ours {
		for _, u := range gone {
			if string(u.GetUuid()) == string(r.GetOldId().GetUuid()) {
				return c.retry(nil, "index segment %s, which this Rewrite remaps, was removed or remapped by a concurrent %s",
					uuidString(u.GetUuid()), c.theirsOp), true
			}
		}
	}
	return Conflict{}, false
}

// removedVsRewrite: a CreateIndex that removes a segment (replace, merge,
// drop) names it by uuid; a concurrent Rewrite that remapped it gave it a
// new one, and the removal would silently miss it.
func (c *checker) removedVsRewrite(ours *lancepb.Transaction_CreateIndex) (Conflict, bool) {
	for _, r := range c.theirs.GetRewrite().GetRewrittenIndices() {
		for _, idx := range ours.GetRemovedIndices() {
			if string(idx.GetUuid().GetUuid()) == string(r.GetOldId().GetUuid()) {
				return c.retry(nil, "index segment %s (%q), which this CreateIndex removes, was remapped by a concurrent Rewrite",
					uuidString(idx.GetUuid().GetUuid()), idx.GetName()), true
			}
		}
	}
	return Conflict{}, false
}
