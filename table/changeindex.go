package table

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"cellguard/proto/lancepb"
)

// ChangeIndex remembers how a table's fragments, schema and base paths
// changed over a range of versions, so that the cells a precondition names
// can be read as they were at an old version without rebuilding that
// version's manifest, and the version that changed them can be found
// without replaying the versions in between.
//
// It covers every version from Horizon to Head. For each fragment that
// changed after the horizon it keeps the fragment as it was at the horizon
// and after each later change; the schema and the base paths likewise. A
// fragment with no history is, at every covered version, what it is at
// head. Fragment values are shared with the manifests, so what the index
// really holds is the fragment versions no manifest holds any more, one
// small record per change, and one journal entry per version.
//
// The index learns versions by diffing consecutive manifests (Advance). A
// diff sees exactly what a reader of the two manifests sees, whatever
// operation, rebase or restore produced them; deriving changes from the
// operation instead would restate Apply's rules and could drift from them.
// The diff walks only the fragment-trie nodes the two manifests do not
// share, so it costs what the transaction changed, not the table's size.
//
// Memory is bounded by IndexLimits.MaxBytes. When an Advance exceeds it,
// the oldest versions are forgotten: the horizon moves forward, and reads
// at versions before it report false. Nothing is ever answered wrongly;
// older questions are refused.
//
// A ChangeIndex is not safe for concurrent use. It has no I/O and no
// clock: the same calls give the same state.
type ChangeIndex struct {
	lim     IndexLimits
	head    *Manifest
	horizon uint64
	frags   map[uint64]*fragHistory
	schemas []schemaAt  // ascending; schemas[0] is the schema at the horizon
	bases   []basesAt   // ascending; bases[0] is the base paths at the horizon
	journal []indexStep // versions after the horizon that changed something, ascending
	jstart  int         // journal[:jstart] are forgotten
	bytes   int
	// ids is the chunk the journal's fragment ids are cut from: a step's
	// ids are a full slice of it, never appended to, so steps share
	// chunks instead of allocating a slice each (see addID).
	ids []uint64
	// fresh are the fragments added after the horizon that were absent
	// at it, under ids above every earlier fresh one: appended fragments.
	// Ascending by id and by version; fresh[:fstart] are forgotten. One
	// that has not changed since (moved false) has no history in frags:
	// it is absent before its version and what it is at head from then
	// on. One that changed is moved to frags, its addition the first
	// change there, and stays here, marked, until its version is
	// forgotten or rolled back. It costs what a history with one change
	// would (historyCost + changeCost), without a map entry or an
	// allocation of its own.
	fresh  []freshFrag
	fstart int
}

// freshFrag is a fragment added at version, absent before it.
type freshFrag struct {
	id, version uint64
	moved       bool // it changed since: its history is in frags
}

// freshCost is what a fresh fragment counts against MaxBytes: a history
// with its one change.
const freshCost = historyCost + changeCost

// idChunk is how many fragment ids a chunk of ChangeIndex.ids holds at
// most; the first chunks are smaller (firstIDChunk, doubling), so that a
// dataset that changed a few fragments does not hold a full chunk.
const (
	idChunk      = 256
	firstIDChunk = 8
)

// IndexLimits bound a ChangeIndex. A zero field takes its default.
type IndexLimits struct {
	// MaxBytes bounds the memory the index holds beyond the head manifest:
	// fragment versions only the index still references, counted by their
	// encoded size, plus a fixed cost per change and per version. The
	// default is DefaultIndexBytes.
	MaxBytes int
}

// DefaultIndexBytes is the default IndexLimits.MaxBytes: 1 MiB.
const DefaultIndexBytes = 1 << 20

// Per-record costs counted against MaxBytes, close to their size in memory.
const (
	changeCost  = 40 // a fragChange and its share of the slice
	stepCost    = 64 // an indexStep, its slice header and the uuid string header
	historyCost = 64 // a fragHistory and its map slot
	fragCost    = 64 // a Fragment (wrapper and slice header) beyond its encoded size
)

// ErrIndexGap reports an Advance with a manifest that is not the version
// after the index's head. The index is unchanged; Rebuild it from the new
// head to continue.
var ErrIndexGap = errors.New("change index: not the next version")

type fragHistory struct {
	base    *Fragment    // the fragment at the horizon; nil: absent
	changes []fragChange // after the horizon, ascending
	// first holds the first change, so that a fragment changed once (an
	// appended one) costs one allocation, not two.
	first [1]fragChange
}

type fragChange struct {
	version uint64
	frag    *Fragment // the fragment from version on; nil: absent
	cost    int       // bytes counted for this change and the version it superseded
}

type schemaAt struct {
	version uint64
	schema  *Schema
}

type basesAt struct {
	version uint64
	bases   []*lancepb.BasePath
}

// indexStep is one version that changed something the index tracks.
type indexStep struct {
	version uint64
	txn     string
	frags   []uint64 // fragment ids added, removed or changed
	schema  bool
	bases   bool
}

func (s *indexStep) cost() int { return stepCost + 8*len(s.frags) + len(s.txn) }

// NewChangeIndex returns an index whose horizon and head are head: it
// knows head and nothing before it. head may be nil for a dataset not yet
// created; the first Advance then starts the index.
func NewChangeIndex(head *Manifest, lim IndexLimits) *ChangeIndex {
	ix := &ChangeIndex{lim: lim}
	if ix.lim.MaxBytes <= 0 {
		ix.lim.MaxBytes = DefaultIndexBytes
	}
	ix.Rebuild(head)
	return ix
}

// Rebuild forgets everything and starts again from m, for example a
// checkpoint loaded at start-up: the index then covers m's version only,
// and grows as later versions are advanced. Nothing is known about the
// versions before m, so the cost is O(1).
func (ix *ChangeIndex) Rebuild(m *Manifest) {
	ix.head, ix.frags, ix.journal, ix.jstart, ix.bytes = m, map[uint64]*fragHistory{}, nil, 0, 0
	ix.fresh, ix.fstart = nil, 0
	ix.schemas, ix.bases, ix.horizon = nil, nil, 0
	if m == nil {
		return
	}
	ix.horizon = m.Version()
	ix.schemas = []schemaAt{{m.Version(), m.Schema()}}
	ix.bases = []basesAt{{m.Version(), m.BasePaths()}}
}

// Head returns the newest manifest the index knows, nil before creation.
func (ix *ChangeIndex) Head() *Manifest { return ix.head }

// Horizon returns the oldest version the index can answer for. It moves
// forward when the index forgets old versions to stay within its limits.
func (ix *ChangeIndex) Horizon() uint64 { return ix.horizon }

// Bytes returns the memory counted against IndexLimits.MaxBytes.
func (ix *ChangeIndex) Bytes() int { return ix.bytes }

// Advance adds next, the manifest committed by transaction txnUUID right
// after the index's head. It diffs the two manifests and records every
// fragment added, removed or changed, and a changed schema or base path
// list. next must be the manifest that follows Head: version Head+1. A
// gap or a nil manifest returns an error wrapping ErrIndexGap and leaves
// the index unchanged. On an index without a head, Advance starts it at
// next.
func (ix *ChangeIndex) Advance(next *Manifest, txnUUID string) error {
	if next == nil {
		return fmt.Errorf("%w: nil manifest", ErrIndexGap)
	}
	if ix.head == nil {
		ix.Rebuild(next)
		return nil
	}
	if want := ix.head.Version() + 1; next.Version() != want {
		return fmt.Errorf("%w: version %d after head %d", ErrIndexGap, next.Version(), ix.head.Version())
	}
	// The uuid is copied: a decoded one is its staged body's own bytes,
	// which the index would otherwise keep alive as long as the step.
	st := indexStep{version: next.Version(), txn: strings.Clone(txnUUID)}
	from := len(ix.ids)
	a, b := ix.head.list, next.list
	if hp, np := ix.head.packed, next.packed; hp != nil && np != nil && hp.pre == np.pre {
		// The same packed fragments, then each its own: only what
		// follows them can differ, and nothing is decoded.
		a, b = hp.tailList, np.tailList
	}
	diffMaps(a().byID, b().byID, sameEntry, func(id uint64, x entry, inX bool, y entry, inY bool) {
		ix.record(id, x.frag, y.frag, st.version)
		from = ix.addID(from, id)
	})
	if n := len(ix.ids); n > from {
		st.frags = ix.ids[from:n:n]
	}
	if ix.head.Schema() != next.Schema() {
		ix.schemas = append(ix.schemas, schemaAt{st.version, next.Schema()})
		st.schema = true
	}
	if !SameBasePaths(ix.head.BasePaths(), next.BasePaths()) {
		ix.bases = append(ix.bases, basesAt{st.version, next.BasePaths()})
		st.bases = true
	}
	if len(st.frags) > 0 || st.schema || st.bases {
		ix.journal = append(ix.journal, st)
		ix.bytes += st.cost()
	}
	ix.head = next
	ix.compact()
	return nil
}

// addID appends id to the ids of the step being built, ix.ids[from:],
// and returns where they start: in a new chunk when the current one is
// full (the step's ids so far are moved there).
func (ix *ChangeIndex) addID(from int, id uint64) int {
	if len(ix.ids) == cap(ix.ids) {
		n := len(ix.ids) - from
		size := min(max(2*cap(ix.ids), firstIDChunk), idChunk)
		chunk := make([]uint64, n, max(size, 2*n))
		copy(chunk, ix.ids[from:])
		ix.ids, from = chunk, 0
	}
	ix.ids = append(ix.ids, id)
	return from
}

func sameEntry(x, y entry) bool {
	return SameFragment(x.frag, y.frag)
}

// SameBasePaths reports whether two base path lists define the same ids,
// paths and dataset-root flags in the same order: what file locations
// depend on.
func SameBasePaths(a, b []*lancepb.BasePath) bool {
	return slices.EqualFunc(a, b, func(x, y *lancepb.BasePath) bool {
		return x == y || x.GetId() == y.GetId() && x.GetPath() == y.GetPath() && x.GetIsDatasetRoot() == y.GetIsDatasetRoot()
	})
}

// record notes that fragment id went from before to after at version v.
func (ix *ChangeIndex) record(id uint64, before, after *Fragment, v uint64) {
	h := ix.frags[id]
	if h == nil {
		if before == nil && after != nil && ix.aboveFresh(id) {
			ix.fresh = append(ix.fresh, freshFrag{id: id, version: v})
			ix.bytes += freshCost
			return
		}
		h = &fragHistory{}
		h.changes = h.first[:0]
		if i, ok := ix.findFresh(id); ok {
			// A fresh fragment changes: its addition becomes its
			// history's first change (its cost already counted).
			ix.fresh[i].moved = true
			h.changes = append(h.changes, fragChange{version: ix.fresh[i].version, frag: before, cost: changeCost})
		} else {
			h.base = before
			ix.bytes += historyCost
		}
		ix.frags[id] = h
	}
	h.pin(before)
	c := fragChange{version: v, frag: after, cost: changeCost + fragBytes(h.latest())}
	h.changes = append(h.changes, c)
	ix.bytes += c.cost
}

// aboveFresh reports whether id is above every fresh fragment's.
func (ix *ChangeIndex) aboveFresh(id uint64) bool {
	n := len(ix.fresh)
	return n == ix.fstart || ix.fresh[n-1].id < id
}

// findFresh returns the index in fresh of fragment id, if it is there.
func (ix *ChangeIndex) findFresh(id uint64) (int, bool) {
	f := ix.fresh[ix.fstart:]
	if len(f) == 0 || id < f[0].id || id > f[len(f)-1].id {
		return 0, false
	}
	i := sort.Search(len(f), func(i int) bool { return f[i].id >= id })
	return ix.fstart + i, i < len(f) && f[i].id == id
}

// freshAt reports whether fragment id is fresh and unchanged since, and
// the version that added it.
func (ix *ChangeIndex) freshAt(id uint64) (uint64, bool) {
	if i, ok := ix.findFresh(id); ok && !ix.fresh[i].moved {
		return ix.fresh[i].version, true
	}
	return 0, false
}

// forgetFresh drops fragment id's fresh entry if it is the oldest and
// was added at v, as the step of version v is forgotten. It reports
// whether that was all (the fragment has no history to forget).
func (ix *ChangeIndex) forgetFresh(id, v uint64) bool {
	if ix.fstart == len(ix.fresh) || ix.fresh[ix.fstart].id != id || ix.fresh[ix.fstart].version != v {
		return false
	}
	e := ix.fresh[ix.fstart]
	ix.fresh[ix.fstart] = freshFrag{}
	ix.fstart++
	if e.moved {
		return false
	}
	ix.bytes -= freshCost
	return true
}

// unfresh drops fragment id's fresh entry if it is the newest and was
// added at v, as the step of version v is rolled back; it reports
// whether that was all, as forgetFresh does.
func (ix *ChangeIndex) unfresh(id, v uint64) bool {
	n := len(ix.fresh)
	if n == ix.fstart || ix.fresh[n-1].id != id || ix.fresh[n-1].version != v {
		return false
	}
	e := ix.fresh[n-1]
	ix.fresh = ix.fresh[:n-1]
	if e.moved {
		return false
	}
	ix.bytes -= freshCost
	return true
}

// atHead stands, in a history, for the fragment the head holds under
// the history's id (ReplaceHead). It is resolved by View.Fragment and
// replaced by that fragment (pin) before the head changes it.
var atHead = new(Fragment)

// pin replaces atHead in h with f, the head's fragment about to change.
func (h *fragHistory) pin(f *Fragment) {
	if h.base == atHead {
		h.base = f
	}
	for i := range h.changes {
		if h.changes[i].frag == atHead {
			h.changes[i].frag = f
		}
	}
}

// ReplaceHead makes m the index's head in place of a manifest of the same
// version with the same content (m is Manifest.Packed of the head, or the
// head itself), so that the index no longer keeps the old head's
// fragments alive: a history entry that is the head's fragment stands
// for whatever fragment m holds under that id. The index answers
// exactly as before. m must equal the head; a manifest of another
// version is refused with ErrIndexGap.
func (ix *ChangeIndex) ReplaceHead(m *Manifest) error {
	old := ix.head
	if old == nil || m == nil || m.Version() != old.Version() {
		return fmt.Errorf("%w: replacing the head with another version", ErrIndexGap)
	}
	for id, h := range ix.frags {
		cur, ok := old.residentFragment(id)
		if !ok {
			continue
		}
		if h.base != nil && SameFragment(h.base, cur) {
			h.base = atHead
		}
		for i := range h.changes {
			if f := h.changes[i].frag; f != nil && SameFragment(f, cur) {
				h.changes[i].frag = atHead
			}
		}
	}
	ix.head = m
	return nil
}

func (h *fragHistory) latest() *Fragment {
	if n := len(h.changes); n > 0 {
		return h.changes[n-1].frag
	}
	return h.base
}

// at returns the fragment at version v (not before the horizon).
func (h *fragHistory) at(v uint64) *Fragment {
	i := sort.Search(len(h.changes), func(i int) bool { return h.changes[i].version > v })
	if i == 0 {
		return h.base
	}
	return h.changes[i-1].frag
}

func fragBytes(f *Fragment) int {
	if f == nil {
		return 0
	}
	return fragCost + f.EncodedSize()
}

// compact forgets the oldest versions until the index fits its limits.
func (ix *ChangeIndex) compact() {
	limit := ix.lim.MaxBytes
	if limit <= 0 {
		limit = DefaultIndexBytes
	}
	for ix.bytes > limit && ix.jstart < len(ix.journal) {
		ix.forgetOldest()
	}
	if ix.jstart > 64 && ix.jstart > len(ix.journal)/2 {
		n := copy(ix.journal, ix.journal[ix.jstart:])
		clear(ix.journal[n:])
		ix.journal, ix.jstart = ix.journal[:n], 0
	}
	if ix.fstart > 64 && ix.fstart > len(ix.fresh)/2 {
		n := copy(ix.fresh, ix.fresh[ix.fstart:])
		ix.fresh, ix.fstart = ix.fresh[:n], 0
	}
}

// Shrink forgets the oldest versions until the index holds at most
// maxBytes (all of them for 0), as when memory is needed elsewhere. The
// horizon moves up: older reads are no longer answered from the index.
// Later Advances grow it again up to IndexLimits.MaxBytes.
func (ix *ChangeIndex) Shrink(maxBytes int) {
	for ix.bytes > maxBytes && ix.jstart < len(ix.journal) {
		ix.forgetOldest()
	}
	if ix.jstart == len(ix.journal) {
		ix.journal, ix.jstart = nil, 0
	}
	if ix.fstart == len(ix.fresh) {
		ix.fresh, ix.fstart = nil, 0
	}
}

// forgetOldest moves the horizon to the oldest journal version.
func (ix *ChangeIndex) forgetOldest() {
	st := &ix.journal[ix.jstart]
	for _, id := range st.frags {
		if ix.forgetFresh(id, st.version) {
			continue
		}
		h := ix.frags[id]
		c := h.changes[0]
		ix.bytes -= c.cost
		h.base = c.frag
		h.changes[0] = fragChange{}
		h.changes = h.changes[1:]
		if len(h.changes) == 0 {
			delete(ix.frags, id) // the fragment is what it is at head
			ix.bytes -= historyCost
		}
	}
	ix.horizon = st.version
	ix.bytes -= st.cost()
	*st = indexStep{}
	ix.jstart++
	for len(ix.schemas) > 1 && ix.schemas[1].version <= ix.horizon {
		ix.schemas = ix.schemas[1:]
	}
	for len(ix.bases) > 1 && ix.bases[1].version <= ix.horizon {
		ix.bases = ix.bases[1:]
	}
}

// Rollback makes to, a manifest the index was advanced through (or its
// current head), the head again and forgets every version after it, as
// when a provisional batch of decisions is abandoned. If to is older than
// the horizon or newer than the head, the index is rebuilt from to.
func (ix *ChangeIndex) Rollback(to *Manifest) {
	if ix.head == nil || to == nil || to.Version() < ix.horizon || to.Version() > ix.head.Version() {
		ix.Rebuild(to)
		return
	}
	v := to.Version()
	for n := len(ix.journal); n > ix.jstart && ix.journal[n-1].version > v; n-- {
		st := &ix.journal[n-1]
		for _, id := range slices.Backward(st.frags) { // fresh ones come off fresh's end
			if ix.unfresh(id, st.version) {
				continue
			}
			h := ix.frags[id]
			k := len(h.changes) - 1
			ix.bytes -= h.changes[k].cost
			h.changes[k] = fragChange{}
			h.changes = h.changes[:k]
			if k == 0 {
				delete(ix.frags, id)
				ix.bytes -= historyCost
			}
		}
		ix.bytes -= st.cost()
		*st = indexStep{}
		ix.journal = ix.journal[:n-1]
	}
	for n := len(ix.schemas); n > 1 && ix.schemas[n-1].version > v; n-- {
		ix.schemas[n-1] = schemaAt{}
		ix.schemas = ix.schemas[:n-1]
	}
	for n := len(ix.bases); n > 1 && ix.bases[n-1].version > v; n-- {
		ix.bases[n-1] = basesAt{}
		ix.bases = ix.bases[:n-1]
	}
	ix.head = to
}

// Txn returns the uuid of the transaction that committed version v, for
// versions after the horizon that changed something the index tracks.
func (ix *ChangeIndex) Txn(v uint64) (string, bool) {
	j := ix.journal[ix.jstart:]
	i := sort.Search(len(j), func(i int) bool { return j[i].version >= v })
	if i < len(j) && j[i].version == v {
		return j[i].txn, true
	}
	return "", false
}

// Changes returns, ascending, up to limit versions after version after at
// which fragment frag, the schema or the base paths changed: the only
// versions at which anything a precondition on frag can see changed.
// Versions at or before the horizon are not known and never returned.
// It costs O(log n + max) for a fragment with n changes.
func (ix *ChangeIndex) Changes(frag, after uint64, limit int) []uint64 {
	var fv []uint64
	if h := ix.frags[frag]; h != nil {
		i := sort.Search(len(h.changes), func(i int) bool { return h.changes[i].version > after })
		for _, c := range h.changes[i:min(len(h.changes), i+limit)] {
			fv = append(fv, c.version)
		}
	} else if v, ok := ix.freshAt(frag); ok && v > after && limit > 0 {
		fv = append(fv, v)
	}
	sv := versionsAfter(ix.schemas, after, limit, func(s schemaAt) uint64 { return s.version })
	bv := versionsAfter(ix.bases, after, limit, func(b basesAt) uint64 { return b.version })
	out := mergeVersions(mergeVersions(fv, sv), bv)
	return out[:min(len(out), limit)]
}

// versionsAfter lists up to limit versions of s (after its first element,
// which is the state at the horizon) that are greater than after.
func versionsAfter[T any](s []T, after uint64, limit int, version func(T) uint64) []uint64 {
	var out []uint64
	for _, x := range s[min(1, len(s)):] {
		if v := version(x); v > after && len(out) < limit {
			out = append(out, v)
		}
	}
	return out
}

func mergeVersions(a, b []uint64) []uint64 {
	if len(b) == 0 {
		return a
	}
	out := make([]uint64, 0, len(a)+len(b))
	out = append(append(out, a...), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// At returns the table as it was at version v, as far as the index knows
// it: every fragment, the schema and the base paths. It reports false for
// versions before the horizon or after the head. A View is valid until the
// index is next advanced, rolled back or rebuilt.
func (ix *ChangeIndex) At(v uint64) (View, bool) {
	if ix.head == nil || v < ix.horizon || v > ix.head.Version() {
		return View{}, false
	}
	return View{ix: ix, v: v}, true
}

// View is the table at one version, read through a ChangeIndex. It answers
// the questions the precondition evaluator asks a manifest.
type View struct {
	ix *ChangeIndex
	v  uint64
}

// Version returns the view's version.
func (w View) Version() uint64 { return w.v }

// Fragment returns the fragment with the given id at the view's version.
func (w View) Fragment(id uint64) (*Fragment, bool) {
	h := w.ix.frags[id]
	if h == nil {
		if v, ok := w.ix.freshAt(id); ok && w.v < v {
			return nil, false // added after the view's version
		}
		return w.ix.head.Fragment(id)
	}
	f := h.at(w.v)
	if f == atHead {
		return w.ix.head.Fragment(id)
	}
	return f, f != nil
}

// Schema returns the schema at the view's version.
func (w View) Schema() *Schema {
	s := w.ix.schemas
	i := sort.Search(len(s), func(i int) bool { return s[i].version > w.v })
	return s[max(i, 1)-1].schema
}

// BasePaths returns the base paths at the view's version.
func (w View) BasePaths() []*lancepb.BasePath {
	b := w.ix.bases
	i := sort.Search(len(b), func(i int) bool { return b[i].version > w.v })
	return b[max(i, 1)-1].bases
}
