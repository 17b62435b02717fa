package table

import (
	"context"
	"fmt"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// finishRowChange rebuilds every fragment post-image of ours, a Delete or
// Update, on the head's fragment, merging deletion vectors and column
// files where both sides changed them.
func (r *rebaser) finishRowChange(ctx context.Context) (*Conflict, error) {
	ours := rowChangeOf(r.out)
	var posts []*lancepb.DataFragment
	if d := r.out.GetDelete(); d != nil {
		posts = d.GetUpdatedFragments()
	} else {
		posts = r.out.GetUpdate().GetUpdatedFragments()
	}
	seen := fragSet{}
	var kept []*lancepb.DataFragment
	var gone []uint64
	for i, post := range posts {
		if post == nil {
			return nil, errorf(rebaseOp, ErrInvalidTransaction, "%s: updated fragment %d is empty", r.oursOp, i)
		}
		id := post.GetId()
		if seen.has(id) {
			return nil, errorf(rebaseOp, ErrInvalidTransaction, "%s has two post-images of fragment %d", r.oursOp, id)
		}
		seen[id] = struct{}{}
		read, head, err := r.fragments(id)
		if err != nil {
			return nil, err
		}
		if head == nil {
			return r.conflictOn(id, "fragment %d, which %s modifies, no longer exists", id, r.oursOp), nil
		}
		m, conflict, err := r.mergeFragment(ctx, ours, post, read, head)
		if err != nil || conflict != nil {
			return conflict, err
		}
		if m.removeWhole {
			gone = append(gone, id)
			continue
		}
		kept = append(kept, m.frag)
		if m.newFile != nil {
			r.newFiles = append(r.newFiles, *m.newFile)
		}
	}
	for _, id := range ours.removed {
		if _, _, err := r.fragments(id); err != nil {
			return nil, err
		}
		if _, ok := r.in.Head.Fragment(id); !ok {
			return r.conflictOn(id, "fragment %d, which %s removes, no longer exists", id, r.oursOp), nil
		}
	}
	if d := r.out.GetDelete(); d != nil {
		d.UpdatedFragments = kept
		d.DeletedFragmentIds = append(d.DeletedFragmentIds, gone...)
	} else if u := r.out.GetUpdate(); u != nil {
		u.UpdatedFragments = kept
		u.RemovedFragmentIds = append(u.RemovedFragmentIds, gone...)
		// Offsets of a fragment that is now removed have nothing to stamp.
		for _, id := range gone {
			delete(u.UpdatedFragmentOffsetBitmaps, id)
			delete(u.UpdatedFragmentOffsets, id)
		}
	}
	return nil, nil
}

// fragmentMerge is the rebased post-image of one fragment.
type fragmentMerge struct {
	frag        *lancepb.DataFragment
	removeWhole bool             // the merged deletions cover every row
	newFile     *NewDeletionFile // a deletion file to write, if any
}

// mergeFragment merges ours' post-image of a fragment with the head's
// version of it, three ways with the read version as the base. Each part
// of the fragment takes the head's value unless ours changed it:
//
//   - data files: a Delete or REWRITE_ROWS Update never changes them (Apply
//     replaces only the deletion file of such post-images), so they come
//     from the head; a REWRITE_COLUMNS Update's file changes are merged
//     into the head's files field by field (mergeFragmentFiles);
//   - overlays: always the head's (superseding overlay fields that ours
//     rewrote is Apply's job, as in Lance's build_manifest);
//   - deletion vector: merged (see Rebase);
//   - physical rows: must be unchanged on both sides;
//   - row-id and version sequences: ours' if only ours changed them, the
//     head's otherwise; both changing one differently is a conflict.
func (r *rebaser) mergeFragment(ctx context.Context, ours rowChange, post, read, head *lancepb.DataFragment) (fragmentMerge, *Conflict, error) {
	id := post.GetId()
	if post.GetPhysicalRows() != read.GetPhysicalRows() {
		return fragmentMerge{}, nil, errorf(rebaseOp, ErrInvalidTransaction,
			"post-image of fragment %d has %d physical rows, read version has %d", id, post.GetPhysicalRows(), read.GetPhysicalRows())
	}
	if head.GetPhysicalRows() != read.GetPhysicalRows() {
		return fragmentMerge{}, r.conflictOn(id, "fragment %d changed its physical rows concurrently", id), nil
	}
	res := proto.CloneOf(head)

	if ours.rewritesColumns() && !dataFilesEqual(post.GetFiles(), read.GetFiles()) {
		if dataFilesEqual(head.GetFiles(), read.GetFiles()) {
			res.Files = cloneDataFiles(post.GetFiles())
		} else {
			files, why, err := mergeFragmentFiles(read.GetFiles(), post.GetFiles(), head.GetFiles(), r.fields)
			if err != nil {
				return fragmentMerge{}, nil, withContext(err, "fragment %d", id)
			}
			if why != "" {
				return fragmentMerge{}, r.conflictOn(id, "data files of fragment %d changed on both sides: %s", id, why), nil
			}
			res.Files = files
		}
	}

	for _, part := range sequenceParts {
		p, rd, h := part.get(post), part.get(read), part.get(head)
		switch {
		case proto.Equal(p, rd), proto.Equal(p, h):
			// Keep the head's.
		case proto.Equal(h, rd):
			part.set(res, proto.CloneOf(p))
		default:
			return fragmentMerge{}, r.conflictOn(id, "the %s of fragment %d changed on both sides", part.name, id), nil
		}
	}

	m := fragmentMerge{frag: res}
	conflict, err := r.mergeDeletions(ctx, ours, post, read, head, &m)
	return m, conflict, err
}

// mergeDeletions sets the deletion file of m.frag and checks rows.
func (r *rebaser) mergeDeletions(ctx context.Context, ours rowChange, post, read, head *lancepb.DataFragment, m *fragmentMerge) (*Conflict, error) {
	id := post.GetId()
	oursChanged := !proto.Equal(post.GetDeletionFile(), read.GetDeletionFile())
	headChanged := !proto.Equal(head.GetDeletionFile(), read.GetDeletionFile())
	cov := r.coverage[id] // concurrent overlay coverage, for a row-moving Update
	needRows := (oursChanged && headChanged) ||
		(ours.update != nil && headChanged) ||
		(ours.movesRows() && oursChanged && cov != nil)
	if !needRows {
		if oursChanged {
			m.frag.DeletionFile = proto.CloneOf(post.GetDeletionFile())
		}
		return nil, nil
	}

	readRows, err := r.dv(ctx, id, read.GetDeletionFile())
	if err != nil {
		return nil, err
	}
	newRows := roaring.New() // rows ours deletes
	if oursChanged {
		postRows, err := r.dv(ctx, id, post.GetDeletionFile())
		if err != nil {
			return nil, err
		}
		if x := roaring.AndNot(readRows, postRows); !x.IsEmpty() {
			return nil, errorf(rebaseOp, ErrInvalidTransaction, "post-image of fragment %d restores deleted rows %v", id, sampleOffsets(x))
		}
		if !postRows.IsEmpty() && uint64(postRows.Maximum()) >= post.GetPhysicalRows() {
			return nil, errorf(rebaseOp, ErrInvalidTransaction, "post-image of fragment %d deletes row %d of %d", id, postRows.Maximum(), post.GetPhysicalRows())
		}
		newRows = roaring.AndNot(postRows, readRows)
	}
	headRows := readRows
	if headChanged {
		if headRows, err = r.dv(ctx, id, head.GetDeletionFile()); err != nil {
			return nil, err
		}
	}
	theirRows := roaring.AndNot(headRows, readRows) // rows deleted or moved concurrently

	if ours.update != nil {
		rewrote, known, err := r.rewrittenRows(ours.update, id, newRows)
		if err != nil {
			return nil, err
		}
		if !theirRows.IsEmpty() {
			if !known {
				return r.conflictOn(id, "this column rewrite does not list the rows of fragment %d it changed (updated_fragment_offset_bitmaps), and rows %v there were concurrently deleted",
					id, sampleOffsets(theirRows)), nil
			}
			if x := roaring.And(rewrote, theirRows); !x.IsEmpty() {
				return r.conflictOn(id, "this Update rewrote rows %v of fragment %d, which a concurrent transaction deleted or updated", sampleOffsets(x), id), nil
			}
		}
		if ours.movesRows() && cov != nil {
			if x := roaring.And(rewrote, cov); !x.IsEmpty() {
				return r.conflictOn(id, "rows %v this Update moved out of fragment %d carry values of a concurrent overlay", sampleOffsets(x), id), nil
			}
		}
	} else if x := roaring.And(newRows, theirRows); !x.IsEmpty() && r.updatedBy[id] {
		// Beyond Lance: rows deleted on both sides are fine when only
		// Deletes touched the fragment concurrently. A concurrent Update
		// may have moved the row, whose new copy our delete would miss.
		return r.conflictOn(id, "rows %v of fragment %d, which this Delete deletes, were concurrently deleted and may have been moved by an Update", sampleOffsets(x), id), nil
	}

	switch {
	case !oursChanged:
		// The head's deletion file, already in m.frag.
	case !headChanged:
		m.frag.DeletionFile = proto.CloneOf(post.GetDeletionFile())
	case roaring.AndNot(newRows, headRows).IsEmpty():
		// Everything ours deletes is deleted already: keep the head's.
	default:
		merged := roaring.Or(headRows, newRows)
		if merged.GetCardinality() >= head.GetPhysicalRows() {
			m.removeWhole = true
			return nil, nil
		}
		df := &lancepb.DeletionFile{
			FileType:       lancepb.DeletionFile_BITMAP,
			ReadVersion:    r.in.Head.Version(),
			Id:             DeletionFileID(r.out.GetUuid(), id),
			NumDeletedRows: merged.GetCardinality(),
		}
		m.frag.DeletionFile = df
		m.newFile = &NewDeletionFile{FragmentID: id, File: proto.CloneOf(df), Rows: merged}
	}
	return nil, nil
}

// rewrittenRows returns the rows of fragment id an Update rewrote: the rows
// it deleted there (moved out, for REWRITE_ROWS) and the matched offsets it
// lists. known is false for a REWRITE_COLUMNS update that lists no offsets
// for the fragment: then it may have rewritten any row.
func (r *rebaser) rewrittenRows(u *lancepb.Transaction_Update, id uint64, deleted *roaring.Bitmap) (*roaring.Bitmap, bool, error) {
	rows := deleted.Clone()
	known := u.GetUpdateMode() != lancepb.Transaction_REWRITE_COLUMNS
	if b, ok := u.GetUpdatedFragmentOffsetBitmaps()[id]; ok {
		bm, err := DecodeBitmap(b)
		if err != nil {
			return nil, false, withContext(err, "updated offsets of fragment %d", id)
		}
		rows.Or(bm)
		known = true
	}
	if l, ok := u.GetUpdatedFragmentOffsets()[id]; ok {
		rows.AddMany(l.GetValues())
		known = true
	}
	return rows, known, nil
}

// sequenceParts are the per-row metadata sequences of a fragment, each a
// oneof, merged three ways.
var sequenceParts = []struct {
	name string
	get  func(*lancepb.DataFragment) *lancepb.DataFragment
	set  func(dst, src *lancepb.DataFragment)
}{
	{
		name: "row-id sequence",
		get: func(f *lancepb.DataFragment) *lancepb.DataFragment {
			return &lancepb.DataFragment{RowIdSequence: f.RowIdSequence}
		},
		set: func(dst, src *lancepb.DataFragment) { dst.RowIdSequence = src.RowIdSequence },
	},
	{
		name: "last-updated version sequence",
		get: func(f *lancepb.DataFragment) *lancepb.DataFragment {
			return &lancepb.DataFragment{LastUpdatedAtVersionSequence: f.LastUpdatedAtVersionSequence}
		},
		set: func(dst, src *lancepb.DataFragment) {
			dst.LastUpdatedAtVersionSequence = src.LastUpdatedAtVersionSequence
		},
	},
	{
		name: "created version sequence",
		get: func(f *lancepb.DataFragment) *lancepb.DataFragment {
			return &lancepb.DataFragment{CreatedAtVersionSequence: f.CreatedAtVersionSequence}
		},
		set: func(dst, src *lancepb.DataFragment) { dst.CreatedAtVersionSequence = src.CreatedAtVersionSequence },
	},
}

func dataFilesEqual(a, b []*lancepb.DataFile) bool {
	return slices.EqualFunc(a, b, func(x, y *lancepb.DataFile) bool { return proto.Equal(x, y) })
}

func cloneDataFiles(files []*lancepb.DataFile) []*lancepb.DataFile {
	out := make([]*lancepb.DataFile, len(files))
	for i, f := range files {
		out[i] = proto.CloneOf(f)
	}
	return out
}

// dataFileKey identifies a data file within a fragment.
type dataFileKey struct {
	path    string
	base    uint32
	hasBase bool
}

func dataFileKeyOf(f *lancepb.DataFile) dataFileKey {
	return dataFileKey{path: f.GetPath(), base: f.GetBaseId(), hasBase: f != nil && f.BaseId != nil}
}

func (k dataFileKey) String() string { return k.path }

func indexDataFiles(files []*lancepb.DataFile, what string) (map[dataFileKey]*lancepb.DataFile, error) {
	m := make(map[dataFileKey]*lancepb.DataFile, len(files))
	for _, f := range files {
		if f == nil {
			return nil, errorf(rebaseOp, ErrMalformed, "%s lists an empty data file", what)
		}
		if _, dup := m[dataFileKeyOf(f)]; dup {
			return nil, errorf(rebaseOp, ErrMalformed, "%s lists data file %q twice", what, f.GetPath())
		}
		m[dataFileKeyOf(f)] = f
	}
	return m, nil
}

// mergeFragmentFiles merges the data files of one fragment changed by ours (post)
// and concurrently (head), both from read. It works file by file: a file
// takes the side that changed it; a file both sides changed must differ
// only in its field list, which is merged position by position (each side
// tombstoning different fields). Files new on either side are kept, ours
// after the head's. Then, on fields: no field (or nested field and its
// ancestor) may have moved on both sides, and no field may end up live in
// two files. why describes the first clash; err reports malformed input.
func mergeFragmentFiles(read, post, head []*lancepb.DataFile, fields fieldTree) (out []*lancepb.DataFile, why string, err error) {
	R, err := indexDataFiles(read, "read version")
	if err != nil {
		return nil, "", err
	}
	O, err := indexDataFiles(post, "post-image")
	if err != nil {
		return nil, "", err
	}
	H, err := indexDataFiles(head, "head")
	if err != nil {
		return nil, "", err
	}
	for _, h := range head {
		k := dataFileKeyOf(h)
		r, inR := R[k]
		o, inO := O[k]
		switch {
		case !inR && inO:
			return nil, "file " + k.String() + " is new on both sides", nil
		case !inR:
			out = append(out, h)
		case !inO && proto.Equal(h, r):
			// Ours dropped it.
		case !inO:
			return nil, "file " + k.String() + " was dropped here and changed concurrently", nil
		case proto.Equal(o, r):
			out = append(out, h)
		case proto.Equal(h, r):
			out = append(out, o)
		default:
			m, why := mergeFieldSlots(r, o, h)
			if why != "" {
				return nil, why, nil
			}
			out = append(out, m)
		}
	}
	for _, r := range read {
		if _, inH := H[dataFileKeyOf(r)]; inH {
			continue
		}
		if o, inO := O[dataFileKeyOf(r)]; inO && !proto.Equal(o, r) {
			return nil, "file " + dataFileKeyOf(r).String() + " was changed here and dropped concurrently", nil
		}
	}
	for _, o := range post {
		if _, inR := R[dataFileKeyOf(o)]; !inR {
			out = append(out, o)
		}
	}

	if x := fields.overlap(movedFields(read, post), movedFields(read, head)); len(x) > 0 {
		return nil, fmt.Sprintf("fields %v were rewritten on both sides", x), nil
	}
	where := map[int32]string{}
	for _, f := range out {
		for _, id := range f.GetFields() {
			if id < 0 {
				continue
			}
			if prev, dup := where[id]; dup {
				return nil, fmt.Sprintf("field %d would live in both %s and %s", id, prev, f.GetPath()), nil
			}
			where[id] = f.GetPath()
		}
	}
	return cloneDataFiles(out), "", nil
}

// mergeFieldSlots merges one data file that both sides changed: only the
// field list may differ from the read version, position by position.
func mergeFieldSlots(r, o, h *lancepb.DataFile) (*lancepb.DataFile, string) {
	n := len(r.GetFields())
	if len(o.GetFields()) != n || len(h.GetFields()) != n ||
		!proto.Equal(dataFileSansFields(r), dataFileSansFields(o)) || !proto.Equal(dataFileSansFields(r), dataFileSansFields(h)) {
		return nil, "file " + r.GetPath() + " changed in more than its field list on both sides"
	}
	m := proto.CloneOf(h)
	for i, rf := range r.GetFields() {
		of, hf := o.GetFields()[i], h.GetFields()[i]
		switch {
		case of == rf || of == hf:
			// Keep the head's.
		case hf == rf:
			m.Fields[i] = of
		default:
			return nil, fmt.Sprintf("field slot %d of file %s changed on both sides", i, r.GetPath())
		}
	}
	return m, ""
}

func dataFileSansFields(f *lancepb.DataFile) *lancepb.DataFile {
	c := proto.CloneOf(f)
	c.Fields = nil
	return c
}

// fieldLocation is where a field lives among a fragment's data files.
type fieldLocation struct {
	file   dataFileKey
	slot   int
	column int32
}

func fieldLocations(files []*lancepb.DataFile) map[int32]fieldLocation {
	locs := map[int32]fieldLocation{}
	for _, f := range files {
		for i, id := range f.GetFields() {
			if id < 0 {
				continue
			}
			col := int32(-1)
			if ci := f.GetColumnIndices(); i < len(ci) {
				col = ci[i]
			}
			if _, dup := locs[id]; !dup {
				locs[id] = fieldLocation{file: dataFileKeyOf(f), slot: i, column: col}
			}
		}
	}
	return locs
}

// movedFields returns the fields whose location differs between two
// file lists of a fragment, or that only one of them holds.
func movedFields(a, b []*lancepb.DataFile) []int64 {
	la, lb := fieldLocations(a), fieldLocations(b)
	var out []int64
	for id, loc := range la {
		if other, ok := lb[id]; !ok || other != loc {
			out = append(out, int64(id))
		}
	}
	for id := range lb {
		if _, ok := la[id]; !ok {
			out = append(out, int64(id))
		}
	}
	slices.Sort(out)
	return out
}
