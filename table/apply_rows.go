package table

import (
	"context"
	"errors"
	"slices"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// Append adds fragments. Fragments with id 0 get max_fragment_id+1, +2, …
// in order; with stable row ids they get the next row ids and both version
// sequences at the new version.
func (a *applier) applyAppend(op *lancepb.Transaction_Append) error {
	if len(op.GetFragments()) == 0 {
		return a.invalid("append of no fragments")
	}
	if !a.stable {
		return a.appendAsIs(op.GetFragments())
	}
	frags, err := a.newFragments(op.GetFragments(), nil, "appended fragment")
	if err != nil {
		return err
	}
	a.assignIDs(frags)
	if err := a.stampFresh(frags); err != nil {
		return err
	}
	return a.insertAll(frags)
}

// appendAsIs inserts the appended fragments of a table without stable
// row ids, where nothing but the id is added to them: each is encoded
// with its id straight from the transaction (newFragmentWithID), without
// the copy newFragments makes. The checks and ids are those of
// newFragments and assignIDs.
func (a *applier) appendAsIs(frags []*lancepb.DataFragment) error {
	for i, f := range frags {
		if err := a.checkNewFragment(f, nil, "appended fragment", i); err != nil {
			return err
		}
	}
	for _, f := range frags {
		id := f.GetId()
		if id == 0 {
			id = a.nextID
			a.nextID++
		}
		if err := a.b.Insert(a.appended(f, id, len(frags))); err != nil {
			return a.invalid("fragment id %d is already in use", id)
		}
	}
	return nil
}

// appended returns appended fragment f, one of n, with id id: from the
// bytes it was staged with when the applier has them, else encoded.
func (a *applier) appended(f *lancepb.DataFragment, id uint64, n int) *Fragment {
	if a.raw != nil && n == 1 && f.GetId() == 0 {
		return newRawFragment(a.raw, id, f.GetPhysicalRows())
	}
	return newFragmentWithID(f, id)
}

// stampFresh gives brand-new fragments their row ids and version sequences
// when the table has stable row ids.
func (a *applier) stampFresh(frags []*lancepb.DataFragment) error {
	if !a.stable {
		return nil
	}
	for _, f := range frags {
		if err := a.assignRowIDs(f); err != nil {
			return err
		}
		a.stampNewRows(f)
	}
	return nil
}

// Delete removes whole fragments and installs new deletion files. Each
// updated fragment is applied as a delta: the fragment at head with the
// post-image's deletion file (see Apply).
func (a *applier) applyDelete(op *lancepb.Transaction_Delete) error {
	removed, updates, err := a.removedAndUpdated(op.GetDeletedFragmentIds(), op.GetUpdatedFragments(), "deleted")
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
		if err := a.checkPostImage(h, p); err != nil {
			return err
		}
		if err := a.b.Replace(withDeletionFile(h, p.GetDeletionFile())); err != nil {
			return err
		}
	}
	return nil
}

// checkPostImage checks what Delete and Update post-images must keep: the
// fragment's physical row count, and a deletion file within it.
func (a *applier) checkPostImage(h *Fragment, p *lancepb.DataFragment) error {
	if p.GetPhysicalRows() != h.PhysicalRows() {
		return a.invalid("post-image of fragment %d has %d physical rows; the fragment has %d",
			p.GetId(), p.GetPhysicalRows(), h.PhysicalRows())
	}
	return a.checkDeletionFile(p, "fragment")
}

// withDeletionFile returns h with deletion file df (h itself if unchanged).
func withDeletionFile(h *Fragment, df *lancepb.DeletionFile) *Fragment {
	if proto.Equal(h.DeletionFile(), df) {
		return h
	}
	c := proto.CloneOf(h.Proto())
	c.DeletionFile = proto.CloneOf(df)
	return NewFragment(c)
}

// Overwrite replaces the schema and every fragment. New fragment ids start
// at 0 again, as in the Lance release that wrote the fixtures (8.0.0;
// lance@2025-11 likewise); max_fragment_id stays a high-water mark. Newer
// Lance (2026 main) assigns from the high-water mark instead. Config is
// upserted; table metadata, base paths, the data storage format and, with
// stable row ids, next_row_id carry over.
func (a *applier) applyOverwrite(op *lancepb.Transaction_Overwrite) error {
	schema, err := a.newSchema(op.GetSchema())
	if err != nil {
		return err
	}
	var frags []*lancepb.DataFragment
	if a.stable {
		frags, err = a.newFragments(op.GetFragments(), schema, "fragment")
	} else {
		err = a.checkNewFragments(op.GetFragments(), schema, "fragment")
	}
	if err != nil {
		return err
	}
	h := a.b.Header()
	if bases := op.GetInitialBases(); len(bases) > 0 {
		if !a.creating {
			return a.invalid("initial_bases can only be set when the table is created")
		}
		if err := a.addBases(h, bases, false); err != nil {
			return err
		}
	}
	if a.creating || hasFiles(op.GetFragments()) {
		// A new table takes its files' version; an Overwrite with files
		// may change it, as in Lance, and the manifest must say so.
		format, err := a.inferFormat(op.GetFragments())
		if err != nil {
			return err
		}
		h.DataFormat = format
	}
	a.nextID = 0
	if !a.stable { // checked, not copied: there are no row ids to stamp
		return a.overwriteAsIs(op, schema, h)
	}
	a.assignIDs(frags)
	if err := a.stampFresh(frags); err != nil {
		return err
	}
	slices.SortStableFunc(frags, func(x, y *lancepb.DataFragment) int { return cmpU64(x.GetId(), y.GetId()) })
	a.replaceAll(op, schema, h)
	return a.insertAll(frags)
}

// overwriteAsIs inserts the checked fragments of Overwrite op on a table
// without stable row ids, where nothing but the id is added to them: each
// is encoded with its id straight from the transaction
// (newFragmentWithID), without the copy newFragments makes. The ids and
// their order are those of assignIDs and the sort in applyOverwrite.
func (a *applier) overwriteAsIs(op *lancepb.Transaction_Overwrite, schema *Schema, h *lancepb.Manifest) error {
	type placed struct {
		id   uint64
		frag *lancepb.DataFragment
	}
	frags := make([]placed, len(op.GetFragments()))
	for i, f := range op.GetFragments() {
		id := f.GetId()
		if id == 0 {
			id = a.nextID
			a.nextID++
		}
		frags[i] = placed{id, f}
	}
	slices.SortStableFunc(frags, func(x, y placed) int { return cmpU64(x.id, y.id) })
	a.replaceAll(op, schema, h)
	for _, p := range frags {
		if err := a.b.Insert(newFragmentWithID(p.frag, p.id)); err != nil {
			return a.invalid("fragment id %d is already in use", p.id)
		}
	}
	return nil
}

// replaceAll empties the table for Overwrite op's fragments: its schema,
// schema metadata and upserted configuration take effect.
func (a *applier) replaceAll(op *lancepb.Transaction_Overwrite, schema *Schema, h *lancepb.Manifest) {
	a.b.RemoveAll()
	a.b.SetSchema(schema)
	h.SchemaMetadata = cloneBytesMap(op.GetSchemaMetadata())
	for k, v := range op.GetConfigUpsertValues() {
		if h.Config == nil {
			h.Config = map[string]string{}
		}
		h.Config[k] = v
	}
}

// hasFiles reports whether any of frags has a data file.
func hasFiles(frags []*lancepb.DataFragment) bool {
	for _, f := range frags {
		if len(f.GetFiles()) > 0 {
			return true
		}
	}
	return false
}

// inferFormat is the data storage format of a new table: the version of
// its data files, which must all agree (Lance's try_infer_version), else the
// default.
func (a *applier) inferFormat(frags []*lancepb.DataFragment) (*lancepb.Manifest_DataStorageFormat, error) {
	var version string
	for _, f := range frags {
		for _, df := range f.GetFiles() {
			v, ok := fileFormatVersion(df)
			if !ok {
				return nil, a.invalid("data file %q has unknown file version %d.%d", df.GetPath(), df.GetFileMajorVersion(), df.GetFileMinorVersion())
			}
			if version != "" && v != version {
				return nil, a.invalid("data files have different versions: %s and %s", version, v)
			}
			version = v
		}
	}
	if version == "" {
		if a.defaultFormat != nil {
			return proto.CloneOf(a.defaultFormat), nil
		}
		// No file tells: what lancefile writes by default (its zero
		// Version), so that a creator who names no version and appends
		// such files later is not refused. Name one (producer's
		// StorageVersion; the CLI and the namespace do) to get another.
		version = "2.1"
	}
	return &lancepb.Manifest_DataStorageFormat{FileFormat: "lance", Version: version}, nil
}

// fileFormatVersion maps a data file's major.minor to Lance's file format
// version name.
func fileFormatVersion(df *lancepb.DataFile) (string, bool) {
	switch maj, mnr := df.GetFileMajorVersion(), df.GetFileMinorVersion(); {
	case maj == 0 && mnr <= 2:
		return "0.1", true // legacy
	case maj == 0 && mnr == 3, maj == 2 && mnr == 0:
		return "2.0", true
	case maj == 2 && mnr == 1:
		return "2.1", true
	case maj == 2 && mnr == 2:
		return "2.2", true // LanceDB 0.39's (Lance 12's) default
	}
	return "", false
}

// Rewrite (compaction) replaces groups of fragments by new ones. New
// fragments carry ids reserved beforehand by ReserveFragments (id 0 gets the
// next free id). They go where their ids sort: Lance sorts the fragment list
// by id after splicing each group in, so a compacted fragment whose
// reserved id is below a later append's id lands before it. The deprecated
// top-level old/new lists are read as one group, as Lance does.
func (a *applier) applyRewrite(op *lancepb.Transaction_Rewrite) error {
	groups := op.GetGroups()
	if len(groups) == 0 {
		groups = []*lancepb.Transaction_Rewrite_RewriteGroup{{
			OldFragments: op.GetOldFragments(),
			NewFragments: op.GetNewFragments(),
		}}
	}
	seen := map[uint64]bool{}
	for i, g := range groups {
		if g == nil || len(g.GetOldFragments()) == 0 {
			return a.invalid("rewrite group %d replaces no fragment", i)
		}
		for j, old := range g.GetOldFragments() {
			if old == nil {
				return a.invalid("rewrite group %d: old fragment %d is empty", i, j)
			}
			if err := a.uniqueIDs(seen, []uint64{old.GetId()}, "rewritten"); err != nil {
				return err
			}
		}
	}
	var news []*lancepb.DataFragment
	for i, g := range groups {
		for j, f := range g.GetNewFragments() {
			if f == nil {
				return a.invalid("rewrite group %d: new fragment %d is empty", i, j)
			}
			if err := a.checkFiles(f.GetFiles(), nil, "new fragment"); err != nil {
				return err
			}
			if err := a.checkDeletionFile(f, "new fragment"); err != nil {
				return err
			}
			if err := a.checkOverlays(f, f.GetOverlays(), false); err != nil {
				return err
			}
		}
		news = append(news, cloneAll(g.GetNewFragments())...)
	}
	for id := range seen {
		if err := a.b.Remove(id); err != nil {
			return err
		}
	}
	a.assignIDs(news)
	return a.insertAll(news)
}

// Merge replaces the schema and the whole fragment list (Lance's "add
// columns" and column type changes). Every fragment at head must still be
// there with the same number of rows (Lance's merge_fragments_valid). Fragment
// ids are not assigned. With stable row ids, a fragment whose data files
// changed gets all its rows stamped updated at the new version, and a new
// fragment gets both version sequences at the new version.
func (a *applier) applyMerge(op *lancepb.Transaction_Merge) error {
	schema, err := a.newSchema(op.GetSchema())
	if err != nil {
		return err
	}
	seen := map[uint64]bool{}
	frags := make([]*Fragment, 0, len(op.GetFragments()))
	for i, p := range op.GetFragments() {
		if p == nil {
			return a.invalid("merged fragment %d is empty", i)
		}
		if seen[p.GetId()] {
			return a.invalid("fragment %d is named twice", p.GetId())
		}
		seen[p.GetId()] = true
		h, exists := a.head.Fragment(p.GetId())
		if err := a.checkFiles(p.GetFiles(), h, "merged fragment"); err != nil {
			return err
		}
		if err := a.checkSchemaFields(p.GetFiles(), h, schema, "merged fragment"); err != nil {
			return err
		}
		if err := a.checkDeletionFile(p, "merged fragment"); err != nil {
			return err
		}
		if exists {
			if p.GetPhysicalRows() != h.PhysicalRows() {
				return a.invalid("merge changes the row count of fragment %d from %d to %d", p.GetId(), h.PhysicalRows(), p.GetPhysicalRows())
			}
			if proto.Equal(h.Proto(), p) {
				frags = append(frags, h) // unchanged: share it
				continue
			}
		}
		if err := a.checkOverlays(p, p.GetOverlays(), false); err != nil {
			return err
		}
		c := proto.CloneOf(p)
		if a.stable {
			if !exists {
				a.stampNewRows(c)
			} else if filesRewritten(h.Files(), c.GetFiles()) {
				a.stampUpdatedRows(c)
			}
		}
		frags = append(frags, NewFragment(c))
	}
	if len(seen) < a.head.NumFragments() {
		for f := range a.head.Fragments() {
			if !seen[f.ID()] {
				return a.invalid("merge drops fragment %d", f.ID())
			}
		}
	}
	slices.SortStableFunc(frags, func(x, y *Fragment) int { return cmpU64(x.ID(), y.ID()) })
	a.b.RemoveAll()
	for _, f := range frags {
		if err := a.b.Insert(f); err != nil {
			return err
		}
	}
	a.b.SetSchema(schema)
	a.b.Header().SchemaMetadata = cloneBytesMap(op.GetSchemaMetadata())
	return nil
}

// filesRewritten reports whether a Merge changed a fragment's data files,
// comparing what identifies the data (not file_size_bytes), as Lance's
// merge_fragment_physically_rewritten does.
func filesRewritten(prev, next []*lancepb.DataFile) bool {
	if len(prev) != len(next) {
		return true
	}
	for i, p := range prev {
		m := next[i]
		if !sameFile(p, m) || !slices.Equal(p.GetFields(), m.GetFields()) ||
			!slices.Equal(p.GetColumnIndices(), m.GetColumnIndices()) ||
			p.GetFileMajorVersion() != m.GetFileMajorVersion() || p.GetFileMinorVersion() != m.GetFileMinorVersion() {
			return true
		}
	}
	return false
}

// Restore makes an older version's content the next version. Like Lance,
// the restored manifest is taken as it was (schema, fragments, flags,
// config, tag); max_fragment_id does not go back (Lance does the same
// since 2026), and with stable row ids neither does next_row_id (Lance
// restores the old counter, which would hand out row ids again; cellguard
// refuses to).
func (a *applier) applyRestore(ctx context.Context, op *lancepb.Transaction_Restore, older Versions) error {
	v := op.GetVersion()
	var old *Manifest
	switch {
	case v == a.head.Version():
		old = a.head
	case v == 0 || v > a.head.Version():
		// Not a version that aged out: one that never existed. Retrying
		// cannot help, so this is an invalid transaction.
		return a.invalid("restore to version %d, which does not exist; the table is at version %d", v, a.head.Version())
	case older == nil:
		return a.errf(ErrVersionNotFound, "version %d is not available: no older versions are kept", v)
	default:
		m, err := older.Manifest(ctx, v)
		if err != nil {
			var te *Error
			if errors.As(err, &te) && errors.Is(err, ErrVersionNotFound) {
				return a.errf(ErrVersionNotFound, "version %d: %s", v, te.Msg)
			}
			return a.errf(ErrVersionNotFound, "version %d: %v", v, err)
		}
		if m == nil || m.Version() != v {
			return a.errf(ErrVersionNotFound, "version %d is not available", v)
		}
		old = m
	}
	a.b = old.edit()
	a.restored = true
	return nil
}

func cmpU64(x, y uint64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// cloneBytesMap copies a protobuf bytes map, values included.
func cloneBytesMap(m map[string][]byte) map[string][]byte {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = slices.Clone(v)
	}
	return out
}
