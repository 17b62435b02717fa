package evaluator

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// Evaluate decides preconditions: pinned is the manifest at the
// transaction's read version, head the manifest the commit would land on.
// The verdict accepts when every protected cell is provably unchanged and
// otherwise lists every cell group (precondition × declared field ×
// fragment) that may have changed, with the first applicable Reason.
//
// It never under-rejects: whenever a protected cell's value, type or
// existence could differ, it rejects. The rules, for each declared field f
// (with its nested relatives) and each selected fragment with rows R:
//
//   - f is in head's schema (FieldDropped) with the same logical type,
//     nullability and parent, and the same nested fields (SchemaChanged);
//     names and metadata are ignored, so a rename is not a change;
//   - the fragment is in head with the same physical rows (FragmentRemoved);
//   - the sequence of (data file path, base, position, column) holding f
//     is the same (BaseDataReplaced); files holding only other fields may
//     change;
//   - the overlays whose coverage of f intersects R are the same, in order:
//     same file, committed version, position and column, and the same
//     coverage up to the last protected row, which fixes both coverage ∩ R
//     and the rank at which each protected value is stored (OverlayChanged);
//   - deletions, by Options.Policy (ProtectedRowsDeleted, DeletionsChanged).
//
// Evaluate checks pre against pinned (as Validate does) but applies no
// Limits: bound untrusted input with Prepare first.
//
// A rejection is a result, not an error. Errors report misuse (nil
// manifests, an unknown policy), preconditions that are invalid against
// pinned (*InvalidError), and manifests that cannot be read, such as an
// overlay bitmap that does not decode (ErrMalformedManifest). A deletion
// vector that cannot be read is not an error: the changed deletion file
// counts as a change, and the violation says so.
//
// Cost depends only on what the preconditions name: one lookup by id per
// fragment in each manifest and, for fragments that differ between the two
// manifests, work proportional to their files, overlays and the changed
// deletion vectors. A fragment shared by both manifests (the common case)
// costs two lookups and a pointer comparison. The accept path allocates
// nothing unless overlays or changed deletion vectors of a named fragment
// must be decoded and compared.
func Evaluate(ctx context.Context, pinned, head *table.Manifest, pre []Precondition, opts Options) (Verdict, error) {
	if pinned == nil || head == nil {
		return Verdict{}, errors.New("evaluator: Evaluate needs the pinned and the head manifest")
	}
	return evaluate(ctx, ofManifest(pinned), ofManifest(head), pre, opts)
}

// snapshot is what evaluation reads of a table version: a *table.Manifest,
// or a table.View of an older version through a change index. It is a
// struct rather than an interface: a View held in an interface is an
// allocation, and evaluating through the index makes one per decision.
type snapshot struct {
	m *table.Manifest // nil for a view
	w table.View
}

func ofManifest(m *table.Manifest) snapshot { return snapshot{m: m} }
func ofView(w table.View) snapshot          { return snapshot{w: w} }

func (s snapshot) Version() uint64 {
	if s.m != nil {
		return s.m.Version()
	}
	return s.w.Version()
}

func (s snapshot) Schema() *table.Schema {
	if s.m != nil {
		return s.m.Schema()
	}
	return s.w.Schema()
}

func (s snapshot) Fragment(id uint64) (*table.Fragment, bool) {
	if s.m != nil {
		return s.m.Fragment(id)
	}
	return s.w.Fragment(id)
}

func (s snapshot) BasePaths() []*lancepb.BasePath {
	if s.m != nil {
		return s.m.BasePaths()
	}
	return s.w.BasePaths()
}

// evaluate is Evaluate over snapshots.
func evaluate(ctx context.Context, pinned, head snapshot, pre []Precondition, opts Options) (Verdict, error) {
	if opts.Policy > Ignore {
		return Verdict{}, fmt.Errorf("evaluator: unknown deletion policy %d", opts.Policy)
	}
	for i := range pre {
		if err := checkPinned(pinned, &pre[i]); err != nil {
			return Verdict{}, err.at(i)
		}
	}
	ev := evaluation{p: pinned, h: head, opts: opts, sameSchema: pinned.Schema() == head.Schema()}
	for i := range pre {
		if err := ev.precondition(ctx, i, &pre[i]); err != nil {
			return Verdict{}, err
		}
	}
	if len(ev.out) == 0 {
		return Verdict{Outcome: Accept}, nil
	}
	return Verdict{Outcome: Reject, Violations: ev.out}, nil
}

// evaluation is the state of one Evaluate call.
type evaluation struct {
	p, h       snapshot
	opts       Options
	sameSchema bool
	bases      int8 // base paths equal in both manifests: 0 unknown, 1 yes, -1 no
	out        []Violation
	files      [2]fragFiles // the last fragments' decoded data files
	filesNext  int
}

// fragFiles is a fragment's data files, decoded once for all the fields
// an evaluation compares in it (table.Fragment decodes on every call).
type fragFiles struct {
	f     *table.Fragment
	files []*lancepb.DataFile
}

// filesOf returns f's data files, remembering the two most recent
// fragments: the pinned and head forms of the fragment being judged.
func (ev *evaluation) filesOf(f *table.Fragment) []*lancepb.DataFile {
	for _, c := range ev.files {
		if c.f == f {
			return c.files
		}
	}
	files := f.Files()
	ev.files[ev.filesNext] = fragFiles{f: f, files: files}
	ev.filesNext = (ev.filesNext + 1) % len(ev.files)
	return files
}

// sameBases reports whether both manifests define the same base paths, so
// that a fragment shared by both reads the same files. Computed once.
func (ev *evaluation) sameBases() bool {
	if ev.bases == 0 {
		ev.bases = -1
		if table.SameBasePaths(ev.p.BasePaths(), ev.h.BasePaths()) {
			ev.bases = 1
		}
	}
	return ev.bases == 1
}

// fieldState is what Evaluate knows about one declared field.
type fieldState struct {
	id      int32
	reason  Reason // schema verdict: FieldDropped, SchemaChanged or 0
	detail  string
	fam     []int32 // nested relatives in pinned's schema, once famDone
	famDone bool
}

// finding is a violation's reason, detail and sample rows for one cell group.
type finding struct {
	reason Reason
	detail string
	rows   []uint32 // nil: sample the protected rows
}

func (ev *evaluation) precondition(ctx context.Context, i int, p *Precondition) error {
	var buf [16]fieldState // no allocation for up to 16 declared fields
	var fs []fieldState
	if len(p.Fields) <= len(buf) {
		fs = buf[:len(p.Fields)]
	} else {
		fs = make([]fieldState, len(p.Fields))
	}
	for j, f := range p.Fields {
		fs[j].id = f
		if !ev.sameSchema {
			fs[j].reason, fs[j].detail = ev.schemaCheck(f)
		}
	}
	for _, fr := range p.Rows.frags {
		if err := ev.fragment(ctx, i, fs, fr); err != nil {
			return err
		}
	}
	return nil
}

func (ev *evaluation) fragment(ctx context.Context, i int, fs []fieldState, fr fragRows) error {
	fp, _ := ev.p.Fragment(fr.id) // checkPinned made sure it exists
	fh, ok := ev.h.Fragment(fr.id)
	var whole finding // applies to every field of the fragment
	unchanged := false
	switch {
	case !ok:
		whole = finding{reason: FragmentRemoved, detail: fmt.Sprintf("fragment %d is not in version %d", fr.id, ev.h.Version())}
	case table.SameFragment(fp, fh) && ev.sameBases():
		unchanged = true
	case fp.PhysicalRows() != fh.PhysicalRows():
		whole = finding{reason: FragmentRemoved, detail: fmt.Sprintf("fragment %d was replaced by another with %d physical rows (was %d)",
			fr.id, fh.PhysicalRows(), fp.PhysicalRows())}
	}
	var del finding
	delDone := false
	n := fp.PhysicalRows()
	for j := range fs {
		st := &fs[j]
		switch {
		case st.reason != 0:
			ev.add(i, st.id, fr, n, finding{reason: st.reason, detail: st.detail})
			continue
		case whole.reason != 0:
			ev.add(i, st.id, fr, n, whole)
			continue
		case unchanged:
			continue
		}
		if !st.famDone {
			st.fam, st.famDone = family(ev.p.Schema(), st.id), true
		}
		got, err := ev.cells(fp, fh, fr, st.id, st.fam)
		if err != nil {
			return err
		}
		if got.reason == 0 {
			if !delDone {
				del, delDone = ev.deletions(ctx, fp, fh, fr), true
			}
			got = del
		}
		if got.reason != 0 {
			ev.add(i, st.id, fr, n, got)
		}
	}
	return nil
}

func (ev *evaluation) add(i int, f int32, fr fragRows, n uint64, x finding) {
	rows := slices.Clone(x.rows) // a fragment's finding may serve several fields
	if rows == nil {
		rows = sampleRows(fr, n)
	}
	ev.out = append(ev.out, Violation{
		Precondition: i,
		FieldID:      f,
		FragmentID:   fr.id,
		Reason:       x.reason,
		Rows:         rows,
		Detail:       x.detail,
	})
}

// sampleRows returns up to MaxSampleRows protected offsets.
func sampleRows(fr fragRows, n uint64) []uint32 {
	var out []uint32
	if fr.rows == nil {
		for o := uint64(0); o < n && len(out) < MaxSampleRows; o++ {
			out = append(out, uint32(o))
		}
		return out
	}
	return firstN(fr.rows, MaxSampleRows)
}

func firstN(bm *roaring.Bitmap, k int) []uint32 {
	var out []uint32
	it := bm.Iterator()
	for it.HasNext() && len(out) < k {
		out = append(out, it.Next())
	}
	return out
}

// schemaCheck compares declared field f and its nested relatives between
// the two schemas.
func (ev *evaluation) schemaCheck(f int32) (Reason, string) {
	sp, sh := ev.p.Schema(), ev.h.Schema()
	a, _ := sp.Field(f)
	b, ok := sh.Field(f)
	if !ok {
		return FieldDropped, fmt.Sprintf("field %d (%s) is not in the schema at version %d", f, a.GetName(), ev.h.Version())
	}
	if d := fieldDiff(a, b); d != "" {
		return SchemaChanged, fmt.Sprintf("field %d (%s): %s", f, b.GetName(), d)
	}
	famP, famH := family(sp, f), family(sh, f)
	for _, g := range famP {
		ga, _ := sp.Field(g)
		gb, ok := sh.Field(g)
		if !ok {
			return SchemaChanged, fmt.Sprintf("field %d (%s): nested field %d (%s) was dropped", f, b.GetName(), g, ga.GetName())
		}
		if d := fieldDiff(ga, gb); d != "" {
			return SchemaChanged, fmt.Sprintf("field %d (%s): nested field %d (%s): %s", f, b.GetName(), g, gb.GetName(), d)
		}
	}
	for _, g := range famH {
		if !contains(famP, g) {
			gb, _ := sh.Field(g)
			return SchemaChanged, fmt.Sprintf("field %d (%s): nested field %d (%s) was added", f, b.GetName(), g, gb.GetName())
		}
	}
	return 0, ""
}

// fieldDiff describes how two versions of a field differ in what the cells
// mean: logical type, nullability or parent. Names and metadata do not count.
func fieldDiff(a, b *lancepb.Field) string {
	switch {
	case a.GetLogicalType() != b.GetLogicalType():
		return fmt.Sprintf("type %s → %s", a.GetLogicalType(), b.GetLogicalType())
	case a.GetNullable() != b.GetNullable():
		return fmt.Sprintf("nullable %t → %t", a.GetNullable(), b.GetNullable())
	case a.GetParentId() != b.GetParentId():
		return fmt.Sprintf("parent %d → %d", a.GetParentId(), b.GetParentId())
	}
	return ""
}

func contains(s []int32, v int32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// family returns f's nested relatives in s: its ancestors (whose validity
// and layout wrap f's values) and its descendants (whose values make up
// f's). It is nil for a top-level field without children, and allocates
// only for nested fields. It scans s once; cycles in malformed schemas end
// after s.Len() steps.
func family(s *table.Schema, f int32) []int32 {
	fld, ok := s.Field(f)
	if !ok {
		return nil
	}
	var out []int32
	for p, steps := fld.GetParentId(), 0; p >= 0 && steps < s.Len(); steps++ {
		out = append(out, p)
		pf, ok := s.Field(p)
		if !ok {
			break
		}
		p = pf.GetParentId()
	}
	for _, g := range s.Fields() {
		if g.GetParentId() < 0 || g.GetId() == f {
			continue
		}
		if descends(s, g, f) && !contains(out, g.GetId()) {
			out = append(out, g.GetId())
		}
	}
	return out
}

// descends reports whether g is a descendant of f.
func descends(s *table.Schema, g *lancepb.Field, f int32) bool {
	for p, steps := g.GetParentId(), 0; p >= 0 && steps < s.Len(); steps++ {
		if p == f {
			return true
		}
		pf, ok := s.Field(p)
		if !ok {
			return false
		}
		p = pf.GetParentId()
	}
	return false
}

// cells compares the stored values of field f and its relatives in a
// fragment that differs between the manifests: base data first, then
// overlays.
func (ev *evaluation) cells(fp, fh *table.Fragment, fr fragRows, f int32, fam []int32) (finding, error) {
	if x := ev.base(fp, fh, f, f); x.reason != 0 {
		return x, nil
	}
	for _, g := range fam {
		if x := ev.base(fp, fh, f, g); x.reason != 0 {
			return x, nil
		}
	}
	if x, err := ev.overlays(fp, fh, fr, f, f); x.reason != 0 || err != nil {
		return x, err
	}
	for _, g := range fam {
		if x, err := ev.overlays(fp, fh, fr, f, g); x.reason != 0 || err != nil {
			return x, err
		}
	}
	return finding{}, nil
}

// slot is one place a field's base values are stored.
type slot struct {
	path    string
	base    uint32
	hasBase bool
	pos     int   // position in DataFile.fields
	col     int32 // column index; -1 when the file records none
}

func (s slot) String() string {
	b := ""
	if s.hasBase {
		b = fmt.Sprintf(" (base %d)", s.base)
	}
	return fmt.Sprintf("%s%s column %d", s.path, b, s.col)
}

// slotIter yields the slots of one field in a fragment's files, in order.
type slotIter struct {
	files []*lancepb.DataFile
	fi, k int
	g     int32
}

func (it *slotIter) next() (slot, bool) {
	for ; it.fi < len(it.files); it.fi, it.k = it.fi+1, 0 {
		df := it.files[it.fi]
		fields := df.GetFields()
		for ; it.k < len(fields); it.k++ {
			if fields[it.k] != it.g {
				continue
			}
			k := it.k
			it.k++
			col := int32(-1)
			if ci := df.GetColumnIndices(); k < len(ci) {
				col = ci[k]
			}
			return slot{path: df.GetPath(), base: df.GetBaseId(), hasBase: df.BaseId != nil, pos: k, col: col}, true
		}
	}
	return slot{}, false
}

// base compares where field g's base values live. Every slot holding g
// counts, in file order, so even a manifest that lists a field twice is
// judged by everything a reader might use.
func (ev *evaluation) base(fp, fh *table.Fragment, f, g int32) finding {
	a := slotIter{files: ev.filesOf(fp), g: g}
	b := slotIter{files: ev.filesOf(fh), g: g}
	for {
		sa, okA := a.next()
		sb, okB := b.next()
		switch {
		case !okA && !okB:
			return finding{}
		case !okA:
			return finding{reason: BaseDataReplaced, detail: ev.fieldLabel(f, g) + "gained data file " + sb.String()}
		case !okB:
			return finding{reason: BaseDataReplaced, detail: ev.fieldLabel(f, g) + "lost data file " + sa.String()}
		case sa != sb:
			return finding{reason: BaseDataReplaced, detail: ev.fieldLabel(f, g) + "data file " + sa.String() + " → " + sb.String()}
		case sa.hasBase && !ev.sameBasePath(sa.base):
			return finding{reason: BaseDataReplaced, detail: ev.fieldLabel(f, g) + fmt.Sprintf("base path %d was redefined", sa.base)}
		}
	}
}

// fieldLabel prefixes details about field g, a relative of declared field f.
func (ev *evaluation) fieldLabel(f, g int32) string {
	if f == g {
		return fmt.Sprintf("field %d: ", f)
	}
	return fmt.Sprintf("field %d, nested field %d: ", f, g)
}

// sameBasePath reports whether base path id resolves to the same place in
// both manifests.
func (ev *evaluation) sameBasePath(id uint32) bool {
	if ev.sameBases() {
		return true
	}
	a, okA := basePath(ev.p, id)
	b, okB := basePath(ev.h, id)
	return okA == okB && (!okA || a.GetPath() == b.GetPath() && a.GetIsDatasetRoot() == b.GetIsDatasetRoot())
}

func basePath(m snapshot, id uint32) (*lancepb.BasePath, bool) {
	for _, bp := range m.BasePaths() {
		if bp.GetId() == id {
			return bp, true
		}
	}
	return nil, false
}
