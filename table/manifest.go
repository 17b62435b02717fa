package table

import (
	"iter"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// Manifest is one immutable version of a table: its schema, its fragments in
// scan order, and the rest of Lance's manifest header.
//
// Versions share everything they do not change: the schema, the header, and
// every fragment a transaction does not touch. Building the next version
// costs memory and time proportional to the change, not to the table.
type Manifest struct {
	header *lancepb.Manifest // every field but fields and fragments, shared; never modified
	top    topFields         // the top-level header fields of this version, over header's (header.go)
	schema *Schema
	frags  fragmentList // read through list: empty while packed
	// packed holds the fragments packed instead of frags (packed.go),
	// perhaps with fragments appended since; nil for most manifests.
	packed *packedList
	// indices is the version's index section in Lance's order; shared
	// between versions, never modified (apply_indices.go).
	indices []*lancepb.IndexMetadata
	rules   IndexRules // whose index rules Apply follows
}

// fragmentList keeps fragments in scan order with lookup by id. Scan order is
// a sparse sequence key per fragment: appends take keys past the end, and a
// compaction puts new fragments at the keys of the ones they replace.
type fragmentList struct {
	byID  intMap[entry]  // fragment id → fragment and its sequence key
	order seqOrder       // sequence key → fragment id
	count fragmentCounts // kept up to date by add, remove and replace
}

// fragmentCounts counts the fragments that carry what the feature flags
// report, so that a new version's flags cost O(1) instead of a scan.
type fragmentCounts struct {
	deletions int // fragments with a deletion file
	rowIDs    int // fragments with a row id sequence
	overlays  int // fragments with overlay files
	decoded   int // fragments kept decoded (Fragment.pb): a manifest with one is not packed
}

func countsOf(f *Fragment) fragmentCounts {
	var c fragmentCounts
	if f.has&hasDeletion != 0 {
		c.deletions = 1
	}
	if f.has&hasRowIDs != 0 {
		c.rowIDs = 1
	}
	if f.has&hasOverlays != 0 {
		c.overlays = 1
	}
	if f.pb != nil {
		c.decoded = 1
	}
	return c
}

func (c fragmentCounts) plus(d fragmentCounts, sign int) fragmentCounts {
	return fragmentCounts{
		deletions: c.deletions + sign*d.deletions,
		rowIDs:    c.rowIDs + sign*d.rowIDs,
		overlays:  c.overlays + sign*d.overlays,
		decoded:   c.decoded + sign*d.decoded,
	}
}

type entry struct {
	frag *Fragment
	seq  uint64
}

// seqGap is the distance between the sequence keys of appended fragments,
// leaving room to splice compacted fragments in between.
const seqGap = 1 << 16

// FromProto builds a Manifest from its protobuf form. It checks what the
// model relies on: a valid schema and unique fragment ids. pb must not be
// modified afterwards.
func FromProto(pb *lancepb.Manifest) (*Manifest, error) {
	schema, err := NewSchema(pb.GetFields())
	if err != nil {
		return nil, err
	}
	header := proto.CloneOf(pb)
	header.Fields, header.Fragments = nil, nil
	header = shareHeader(header)
	m := &Manifest{header: header, top: topOf(header), schema: schema, rules: rulesOf(header.GetWriterVersion())}
	for i, f := range pb.GetFragments() {
		if _, dup := m.frags.byID.Get(f.GetId()); dup {
			return nil, errorf("decode manifest", ErrMalformed, "duplicate fragment id %d at position %d", f.GetId(), i)
		}
		m.frags = m.frags.add(NewFragment(f), uint64(i+1)*seqGap)
	}
	return m, nil
}

// Proto returns the protobuf form. The fragments and fields in it are shared
// with m; callers must not modify the result.
func (m *Manifest) Proto() *lancepb.Manifest {
	pb := proto.CloneOf(m.header)
	m.top.writeTo(pb)
	pb.Fields = m.schema.Fields()
	pb.Fragments = make([]*lancepb.DataFragment, 0, m.NumFragments())
	for f := range m.Fragments() {
		pb.Fragments = append(pb.Fragments, f.Proto())
	}
	return pb
}

// Version returns the manifest's version number.
func (m *Manifest) Version() uint64 { return m.top.version }

// Schema returns the schema.
func (m *Manifest) Schema() *Schema { return m.schema }

// Header returns the manifest fields other than fields and fragments.
// Callers must not modify it. Versions share their header's nested
// messages, lists and maps; the top-level fields a version changes are
// its own, and Header puts them together (a new message, unless they are
// those of the header the version shares).
func (m *Manifest) Header() *lancepb.Manifest { return header(m.header, &m.top) }

// DataFormat returns the format of the table's data files (nil if the
// manifest names none). Callers must not modify it. Unlike Header, it
// puts nothing together: the data format is not a field a version sets.
func (m *Manifest) DataFormat() *lancepb.Manifest_DataStorageFormat { return m.header.GetDataFormat() }

// BasePaths returns the base paths data and deletion files may be relative
// to. Callers must not modify them.
func (m *Manifest) BasePaths() []*lancepb.BasePath { return m.header.GetBasePaths() }

// MaxFragmentID returns the highest fragment id ever used, if any.
func (m *Manifest) MaxFragmentID() (uint32, bool) {
	return m.top.maxID, m.top.hasMaxID
}

// Fragment returns the fragment with the given id.
func (m *Manifest) Fragment(id uint64) (*Fragment, bool) {
	e, ok := m.list().byID.Get(id)
	return e.frag, ok
}

// NumFragments returns the number of fragments.
func (m *Manifest) NumFragments() int {
	if m.IsPacked() {
		return m.packed.pre.n + m.packed.tailList().byID.Len()
	}
	return m.list().byID.Len()
}

// Fragments yields the fragments in scan order.
func (m *Manifest) Fragments() iter.Seq[*Fragment] {
	return func(yield func(*Fragment) bool) {
		l := m.list()
		l.order.All(func(_ uint64, id uint64) bool {
			e, _ := l.byID.Get(id)
			return yield(e.frag)
		})
	}
}

func (l fragmentList) add(f *Fragment, seq uint64) fragmentList {
	l.byID = l.byID.Set(f.ID(), entry{frag: f, seq: seq})
	l.order = l.order.Set(seq, f.ID())
	l.count = l.count.plus(countsOf(f), 1)
	return l
}

func (l fragmentList) remove(id uint64) fragmentList {
	e, ok := l.byID.Get(id)
	if !ok {
		return l
	}
	l.byID = l.byID.Delete(id)
	l.order = l.order.Delete(e.seq)
	l.count = l.count.plus(countsOf(e.frag), -1)
	return l
}

// replace swaps the fragment with f's id for f, keeping its position.
func (l fragmentList) replace(f *Fragment) fragmentList {
	e, _ := l.byID.Get(f.ID())
	l.byID = l.byID.Set(f.ID(), entry{frag: f, seq: e.seq})
	l.count = l.count.plus(countsOf(e.frag), -1).plus(countsOf(f), 1)
	return l
}

// nextSeq returns the sequence key for a fragment appended at the end.
func (l fragmentList) nextSeq() uint64 {
	last, ok := l.order.Max()
	if !ok {
		return seqGap
	}
	return last + seqGap
}
