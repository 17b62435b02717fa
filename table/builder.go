package table

import (
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// Builder assembles a new manifest from a base one. Every method leaves the
// base untouched; Build returns the result, which shares all fragments the
// builder did not replace. A Builder is not safe for concurrent use.
//
// The header is the base's until Header is called, which makes a private
// copy; the top-level fields a version sets for itself are in top
// (fields), so that the usual version, which changes nothing else, shares
// its base's header (header.go).
type Builder struct {
	header *lancepb.Manifest // private copy, created by Header
	live   bool              // header's top-level fields are current, top is not
	base   *lancepb.Manifest
	top    topFields
	schema *Schema
	frags  fragmentList // with pre: only the fragments after pre's
	// pre, when set, holds the fragments before frags, packed and not
	// read: a builder started on a packed manifest that has only been
	// appended to. from is that manifest's list; all() builds on its
	// decoded list when something needs every fragment, and added are
	// the fragments appended since (packed.go).
	pre   *packedFrags
	from  *packedList
	added []entry
	// indices is the index list of the manifest being built; the slice is
	// replaced, never modified in place (apply_indices.go).
	indices []*lancepb.IndexMetadata
	rules   IndexRules
}

// Edit starts building a manifest from m.
func (m *Manifest) Edit() *Builder {
	b := m.edit()
	return &b
}

func (m *Manifest) edit() Builder {
	b := Builder{base: m.header, top: m.top, schema: m.schema, indices: m.indices, rules: m.rules}
	if p := m.packed; p != nil && !p.decoded.Load() {
		b.pre, b.from, b.frags = p.pre, p, *p.tailList()
	} else {
		b.frags = *m.list()
	}
	return b
}

// all returns the builder's fragment list, every fragment in it: a
// builder holding packed fragments decodes them (as the manifest it
// started on decodes them, once) and holds them all from then on.
func (b *Builder) all() *fragmentList {
	if b.pre != nil {
		l := *b.from.decodedList()
		for _, e := range b.added {
			l = l.add(e.frag, e.seq)
		}
		b.frags, b.pre, b.from, b.added = l, nil, nil, nil
	}
	return &b.frags
}

// last returns the highest fragment id and its sequence key, and the
// highest sequence key, of a builder holding packed fragments.
func (b *Builder) last() (maxID, maxIDSeq, lastSeq uint64, ok bool) {
	if id, e, ok := b.frags.byID.MaxEntry(); ok {
		return id, e.seq, e.seq, true // the tail is in id order, after pre's
	}
	return b.pre.maxID, b.pre.maxIDSeq, b.pre.lastSeq, b.pre.n > 0
}

// appendAfterPacked adds f to a builder holding packed fragments when its id
// is above every other: at the end, seqGap after the last fragment. It
// reports false, changing nothing, when f's id is not above every other
// or the fragment with the highest id is not last in scan order.
func (b *Builder) appendAfterPacked(f *Fragment) bool {
	maxID, maxIDSeq, lastSeq, ok := b.last()
	if ok && (f.ID() <= maxID || maxIDSeq != lastSeq) {
		return false
	}
	e := entry{frag: f, seq: lastSeq + seqGap}
	b.frags = b.frags.add(f, e.seq)
	b.added = append(b.added, e)
	return true
}

// maxID returns the highest fragment id in the builder, if any.
func (b *Builder) maxID() (uint64, bool) {
	if b.pre != nil {
		id, _, _, ok := b.last()
		return id, ok
	}
	return b.frags.byID.Max()
}

// counts returns the feature counts of the builder's fragments.
func (b *Builder) counts() fragmentCounts {
	if b.pre != nil {
		return b.pre.count.plus(b.frags.count, 1)
	}
	return b.frags.count
}

// Header returns the header of the manifest being built, for modification.
// The first call clones the base header.
func (b *Builder) Header() *lancepb.Manifest {
	if b.header == nil {
		b.header = proto.CloneOf(b.base)
	}
	if !b.live {
		b.top.writeTo(b.header)
		b.live = true
	}
	return b.header
}

// fields returns the top-level header fields of the manifest being built,
// for modification; they are current until the next Header call.
func (b *Builder) fields() *topFields {
	if b.live {
		b.top = topOf(b.header)
		b.live = false
	}
	return &b.top
}

// nested returns the header of the manifest being built for reading its
// nested messages, lists and maps (not its top-level fields: fields).
func (b *Builder) nested() *lancepb.Manifest {
	if b.header != nil {
		return b.header
	}
	return b.base
}

// Schema returns the schema of the manifest being built.
func (b *Builder) Schema() *Schema { return b.schema }

// SetSchema replaces the schema.
func (b *Builder) SetSchema(s *Schema) { b.schema = s }

// Fragment returns the current fragment with the given id.
func (b *Builder) Fragment(id uint64) (*Fragment, bool) {
	l := &b.frags // a fragment after the packed ones is in the tail
	if b.pre != nil && b.pre.n > 0 && id <= b.pre.maxID {
		l = b.all()
	}
	e, ok := l.byID.Get(id)
	return e.frag, ok
}

// NumFragments returns the number of fragments currently in the builder.
func (b *Builder) NumFragments() int {
	if b.pre != nil {
		return b.pre.n + b.frags.byID.Len()
	}
	return b.frags.byID.Len()
}

// Fragments yields the current fragments in scan order.
func (b *Builder) Fragments(yield func(*Fragment) bool) {
	l := b.all()
	l.order.All(func(_ uint64, id uint64) bool {
		e, _ := l.byID.Get(id)
		return yield(e.frag)
	})
}

// Append adds f at the end of the scan order. Its id must be new.
func (b *Builder) Append(f *Fragment) error {
	if b.pre != nil && b.appendAfterPacked(f) {
		return nil
	}
	b.all()
	if _, dup := b.frags.byID.Get(f.ID()); dup {
		return errorf("build manifest", ErrInvalidTransaction, "fragment id %d already exists", f.ID())
	}
	b.frags = b.frags.add(f, b.frags.nextSeq())
	return nil
}

// Insert adds f at its place in fragment-id order: right after the fragment
// with the next smaller id, or first if there is none. Its id must be new.
//
// Lance sorts every manifest's fragments by id when it builds it, so in a
// manifest Lance wrote this is where Lance would put f. Appends (ids above
// every other) land at the end. It costs O(log n), and O(n) on the rare
// occasion that the sequence keys around the spot are exhausted.
func (b *Builder) Insert(f *Fragment) error {
	if b.pre != nil && b.appendAfterPacked(f) {
		return nil
	}
	b.all()
	id := f.ID()
	pid, last, hasPrev := b.frags.byID.MaxEntry()
	if hasPrev && id > pid {
		// An append: after the fragment with the largest id. When that
		// one is also last in scan order (as appends leave it), nothing
		// follows it, and seqAfter would say prev + seqGap.
		if end, _ := b.frags.order.Max(); end == last.seq {
			b.frags = b.frags.add(f, last.seq+seqGap)
			return nil
		}
	}
	if hasPrev && id <= pid { // not an append above every id
		if _, dup := b.frags.byID.Get(id); dup {
			return errorf("build manifest", ErrInvalidTransaction, "fragment id %d already exists", id)
		}
		hasPrev = false
		if id > 0 {
			pid, hasPrev = b.frags.byID.Floor(id - 1)
		}
	}
	seq, ok := b.seqAfter(pid, hasPrev)
	if !ok {
		b.renumber() // every gap is seqGap wide afterwards
		seq, _ = b.seqAfter(pid, hasPrev)
	}
	b.frags = b.frags.add(f, seq)
	return nil
}

// seqAfter picks the sequence key for a new fragment that follows the
// fragment with id pid in scan order (or comes first, if hasPrev is
// false), or reports false when its neighbours leave no room.
func (b *Builder) seqAfter(pid uint64, hasPrev bool) (uint64, bool) {
	var prev uint64 // sequence key of the predecessor; 0 for none
	var next uint64
	var hasNext bool
	if hasPrev {
		e, _ := b.frags.byID.Get(pid)
		prev = e.seq
		next, hasNext = b.frags.order.Ceil(prev + 1)
	} else {
		next, hasNext = b.frags.order.Min()
	}
	if !hasNext {
		return prev + seqGap, true
	}
	gap := next - prev
	if gap < 2 {
		return 0, false
	}
	// A short step leaves room for the fragments with the next ids, which
	// usually follow this one into the same gap.
	return prev + min(gap/2, seqGap/64), true
}

// Replace swaps in f for the fragment with the same id, keeping its place.
func (b *Builder) Replace(f *Fragment) error {
	b.all()
	if _, ok := b.frags.byID.Get(f.ID()); !ok {
		return errorf("build manifest", ErrInvalidTransaction, "fragment %d does not exist", f.ID())
	}
	b.frags = b.frags.replace(f)
	return nil
}

// Remove drops the fragment with the given id.
func (b *Builder) Remove(id uint64) error {
	b.all()
	if _, ok := b.frags.byID.Get(id); !ok {
		return errorf("build manifest", ErrInvalidTransaction, "fragment %d does not exist", id)
	}
	b.frags = b.frags.remove(id)
	return nil
}

// RemoveAll drops every fragment.
func (b *Builder) RemoveAll() {
	b.frags, b.pre, b.from, b.added = fragmentList{}, nil, nil, nil
}

// Splice removes the fragments in old and puts the fragments in repl, in
// order, where the first of old stood in scan order: the shape of a
// compaction. Every id in old must exist; ids in repl must be new.
func (b *Builder) Splice(old []uint64, repl []*Fragment) error {
	const op = "build manifest"
	if len(old) == 0 {
		for _, f := range repl {
			if err := b.Append(f); err != nil {
				return err
			}
		}
		return nil
	}
	b.all()
	first := uint64(0)
	for i, id := range old {
		e, ok := b.frags.byID.Get(id)
		if !ok {
			return errorf(op, ErrInvalidTransaction, "rewritten fragment %d does not exist", id)
		}
		if i == 0 || e.seq < first {
			first = e.seq
		}
	}
	for _, id := range old {
		b.frags = b.frags.remove(id)
	}
	for _, f := range repl {
		if _, dup := b.frags.byID.Get(f.ID()); dup {
			return errorf(op, ErrInvalidTransaction, "new fragment id %d already exists", f.ID())
		}
	}
	below, hasBelow, above, hasAbove := b.frags.order.Neighbors(first)
	if hasAbove && (above-below)/uint64(len(repl)+1) == 0 {
		// Compactions used up the gap here: spread the keys out again.
		belowID, _ := b.frags.order.Get(below)
		b.renumber()
		below, above, hasAbove = 0, 0, false
		if hasBelow {
			e, _ := b.frags.byID.Get(belowID)
			below = e.seq
		}
		_, _, above, hasAbove = b.frags.order.Neighbors(below)
	}
	if !hasAbove {
		above = below + uint64(len(repl)+1)*seqGap
	}
	step := (above - below) / uint64(len(repl)+1)
	for i, f := range repl {
		b.frags = b.frags.add(f, below+uint64(i+1)*step)
	}
	return nil
}

// renumber spreads the sequence keys evenly again. It costs O(n) and runs
// only if compactions exhausted the gap between two neighbours.
func (b *Builder) renumber() {
	var l fragmentList
	i := uint64(1)
	b.Fragments(func(f *Fragment) bool {
		l = l.add(f, i*seqGap)
		i++
		return true
	})
	b.frags = l
}

// Build returns the new manifest.
func (b *Builder) Build() *Manifest {
	top := *b.fields()
	h := b.base
	if b.header != nil { // modified here: perhaps another table's
		h = shareHeader(b.header)
	}
	m := &Manifest{header: h, top: top, schema: b.schema, frags: b.frags, indices: b.indices, rules: b.rules}
	if b.pre != nil {
		m.frags, m.packed = fragmentList{}, newPackedList(b.pre, b.frags)
	}
	b.base, b.header = m.header, nil // m is immutable: a later Header copies again
	return m
}
