package table

import (
	"slices"
	"sort"

	"cellguard/proto/lancepb"
)

// ConflictIndex remembers, for a contiguous range of committed versions,
// what each committed transaction touches as the conflict rules see it:
// its operation kind and the fragments it modifies, removes, compacts,
// gives new column files or overlays. Given a transaction being committed
// ("ours"), it names the committed versions Rebase must check ours
// against (Candidates): those of a kind that can conflict with ours
// whatever they touch, and those that touch a fragment ours touches.
//
// Every other committed transaction is Compatible with ours and takes no
// part in rebasing it: CheckConflict compares the two only through shared
// fragments, and Rebase consults what a committed transaction touched only
// for fragments ours touches. So a rebase costs what overlaps ours, not
// how far behind head ours was read; an Append read 10,000 versions back
// among appends and deletes checks nothing. The scope of each operation
// (scopeOf) is derived from the matrix in conflict_ops.go and
// conflict_rows.go; TestConflictIndexScope checks it against CheckConflict
// on random pairs and TestConflictIndexRebase against the full walk on
// random histories.
//
// A ConflictIndex is not safe for concurrent use. It has no I/O.
type ConflictIndex struct {
	first uint64      // version of steps[0]
	steps []touchStep // one per version from first, ascending
	// byKind holds, per operation seen, the versions of that kind: a
	// list of the few kinds a table sees rather than one slot per kind.
	byKind []kindVersions
	// The arrays steps and each kind's versions slide over (pushSlid):
	// the oldest version leaves from the front, the newest comes in at
	// the back.
	stepArr []touchStep
	byFrag  map[uint64][]uint64 // fragment → versions that touched it, ascending
}

// kindVersions is the versions of one kind of operation, ascending, and
// the array they slide over.
type kindVersions struct {
	op  Op
	vs  []uint64
	arr []uint64
}

// kind returns op's versions, adding an empty entry for a kind not seen.
// The pointer is valid until the next call.
func (x *ConflictIndex) kind(op Op) *kindVersions {
	for i := range x.byKind {
		if x.byKind[i].op == op {
			return &x.byKind[i]
		}
	}
	x.byKind = append(x.byKind, kindVersions{op: op})
	return &x.byKind[len(x.byKind)-1]
}

// touchStep is what one committed transaction touches.
type touchStep struct {
	op    Op
	frags []uint64
}

// opLimit bounds the Op values; opSet is a set of them.
const opLimit = OpAppendFRITransitions + 1

type opSet uint32

func opsOf(ops ...Op) opSet {
	var s opSet
	for _, o := range ops {
		s |= 1 << o
	}
	return s
}

func (s opSet) has(o Op) bool { return o < opLimit && s&(1<<o) != 0 }

// Kinds a committed transaction of which is always a candidate: those
// cellguard does not support, so that Rebase reports them exactly as the
// full walk would.
var unsupportedOps = opsOf(OpUnknown, OpUpdateMemWalState, OpClone, OpAppendFRITransitions)

// NewConflictIndex returns an empty index.
func NewConflictIndex() *ConflictIndex {
	return &ConflictIndex{byFrag: map[uint64][]uint64{}}
}

// Reset forgets every version.
func (x *ConflictIndex) Reset() {
	x.first, x.steps, x.byKind, x.byFrag = 0, nil, nil, map[uint64][]uint64{}
}

// Len returns the number of versions the index covers.
func (x *ConflictIndex) Len() int { return len(x.steps) }

// last returns the newest version covered (first-1 when empty).
func (x *ConflictIndex) last() uint64 { return x.first + uint64(len(x.steps)) - 1 }

// Add records txn, committed at version, and returns about how many bytes
// the record takes. The index covers a contiguous range: a version that
// does not follow the newest one starts it again from version.
func (x *ConflictIndex) Add(version uint64, txn *lancepb.Transaction) int {
	if len(x.steps) == 0 || version != x.last()+1 {
		x.Reset()
		x.first = version
	}
	op, err := OpOf(txn)
	if err != nil {
		op = OpUnknown
	}
	st := touchStep{op: op, frags: touchedBy(txn, op)}
	x.steps = pushSlid(x.steps, &x.stepArr, st)
	k := x.kind(op)
	k.vs = pushSlid(k.vs, &k.arr, version)
	for _, id := range st.frags {
		x.byFrag[id] = append(x.byFrag[id], version)
	}
	return touchCost + fragTouchCost*len(st.frags)
}

// Approximate bytes of a version in the index: its step and kind entry,
// and per fragment its id in the step and the version in the fragment's
// list (with a share of the map).
const (
	touchCost     = 48
	fragTouchCost = 32
)

// Forget drops version v. Only the ends can go: the oldest version (the
// range shrinks from below), or v and everything after it (as when
// provisional versions are rolled back). A version outside the range is
// ignored.
func (x *ConflictIndex) Forget(v uint64) {
	switch {
	case len(x.steps) == 0 || v < x.first || v > x.last():
	case v == x.first:
		x.dropOldest()
	default:
		for len(x.steps) > 0 && x.last() >= v {
			x.dropNewest()
		}
	}
}

func (x *ConflictIndex) dropOldest() {
	st := x.steps[0]
	k := x.kind(st.op)
	k.vs = k.vs[1:]
	for _, id := range st.frags {
		if vs := x.byFrag[id][1:]; len(vs) > 0 {
			x.byFrag[id] = vs
		} else {
			delete(x.byFrag, id)
		}
	}
	x.steps[0] = touchStep{}
	x.steps = x.steps[1:]
	x.first++
	if len(x.steps) == 0 {
		x.Reset()
	}
}

func (x *ConflictIndex) dropNewest() {
	n := len(x.steps) - 1
	st := x.steps[n]
	k := x.kind(st.op)
	k.vs = k.vs[:len(k.vs)-1]
	for _, id := range st.frags {
		if vs := x.byFrag[id]; len(vs) > 1 {
			x.byFrag[id] = vs[:len(vs)-1]
		} else {
			delete(x.byFrag, id)
		}
	}
	x.steps[n] = touchStep{}
	x.steps = x.steps[:n]
	if len(x.steps) == 0 {
		x.Reset()
	}
}

// Covers reports whether the index knows every version in (after, upTo].
func (x *ConflictIndex) Covers(after, upTo uint64) bool {
	if upTo <= after {
		return true
	}
	return len(x.steps) > 0 && after+1 >= x.first && upTo <= x.last()
}

// Candidates appends to dst, ascending, the versions in (after, upTo] that
// Rebase must check ours against: every other version in the range holds a
// transaction Compatible with ours that touches none of its fragments.
// It reports false, appending nothing, when the index does not cover the
// range or ours' operation is not one cellguard supports: then every
// version is a candidate.
func (x *ConflictIndex) Candidates(ours *lancepb.Transaction, after, upTo uint64, dst []uint64) ([]uint64, bool) {
	op, err := OpOf(ours)
	if err != nil || !op.Supported() || !x.Covers(after, upTo) {
		return dst, false
	}
	if upTo <= after {
		return dst, true
	}
	always, frags := scopeOf(ours, op)
	always |= unsupportedOps
	start := len(dst)
	for _, k := range x.byKind { // any order: found is sorted below
		if always.has(k.op) {
			dst = appendRange(dst, k.vs, after, upTo)
		}
	}
	for _, id := range frags {
		dst = appendRange(dst, x.byFrag[id], after, upTo)
	}
	found := dst[start:]
	slices.Sort(found)
	return dst[:start+len(slices.Compact(found))], true
}

// appendRange appends the versions of vs (ascending) in (after, upTo].
func appendRange(dst, vs []uint64, after, upTo uint64) []uint64 {
	i := sort.Search(len(vs), func(i int) bool { return vs[i] > after })
	for ; i < len(vs) && vs[i] <= upTo; i++ {
		dst = append(dst, vs[i])
	}
	return dst
}

// touchedBy returns the fragments a committed transaction touches as the
// conflict rules and Rebase (rebaser.note) see them.
func touchedBy(txn *lancepb.Transaction, op Op) []uint64 {
	switch op {
	case OpDelete, OpUpdate:
		rc := rowChangeOf(txn)
		return append(rc.updated, rc.removed...)
	case OpRewrite:
		return rewriteOldIDs(txn.GetRewrite())
	case OpDataReplacement:
		return replacementIDs(txn.GetDataReplacement())
	case OpDataOverlay:
		return overlayIDs(txn.GetDataOverlay())
	}
	return nil
}

// The operation kinds that can conflict with a transaction whatever
// fragments they touch, by the kind of that transaction. They follow the
// matrix: a kind not listed is Compatible with ours unless it touches a
// fragment ours touches.
var (
	replacers    = opsOf(OpOverwrite, OpRestore)
	nullability  = opsOf(OpProject, OpMerge) // may alter nullability (pre-checks)
	allSupported = opsOf(OpAppend, OpDelete, OpOverwrite, OpCreateIndex, OpRewrite, OpMerge, OpRestore,
		OpReserveFragments, OpUpdate, OpProject, OpUpdateConfig, OpDataReplacement, OpUpdateBases, OpDataOverlay)
	alwaysByOp = [opLimit]opSet{
		OpAppend:           replacers | nullability,
		OpReserveFragments: replacers,
		OpRestore:          0,
		OpOverwrite:        opsOf(OpOverwrite, OpUpdateConfig),
		OpUpdateConfig:     opsOf(OpOverwrite, OpUpdateConfig, OpMerge),
		OpUpdateBases:      opsOf(OpUpdateBases),
		OpMerge:            allSupported,
		OpProject:          allSupported,
		OpCreateIndex:      replacers | opsOf(OpCreateIndex, OpUpdate, OpMerge, OpRewrite, OpDataReplacement, OpProject),
		OpRewrite:          replacers | opsOf(OpMerge, OpCreateIndex, OpRewrite),
		OpDataReplacement:  replacers | nullability | opsOf(OpCreateIndex),
		OpDataOverlay:      replacers | nullability,
		OpDelete:           replacers | nullability,
		OpUpdate:           replacers | nullability,
	}
)

// scopeOf returns what ours, of kind op, can conflict with: the kinds
// that always can, and the fragments through which the others can.
func scopeOf(ours *lancepb.Transaction, op Op) (always opSet, frags []uint64) {
	always = alwaysByOp[op]
	switch op {
	case OpUpdate:
		if hasKeyFilter(ours.GetUpdate()) {
			// keyFilterCheck: any Append or Update may insert the same keys.
			always |= opsOf(OpAppend, OpUpdate)
		}
		return always, touchedBy(ours, op)
	case OpDelete, OpRewrite, OpDataReplacement, OpDataOverlay:
		return always, touchedBy(ours, op)
	}
	return always, nil
}

// pushSlid appends v to s, a queue over the array *arr whose oldest
// entries leave by reslicing (s = s[1:]). Left to append, such a queue
// would get a new array each time it reached the end of its own, however
// few entries it held: a steady window of versions allocated as it
// slid. pushSlid moves the entries back to the start of the array
// instead, and makes an array twice as long only when they fill more than
// half of it; the first array holds 4 (most states of a many-dataset
// committer keep a few versions). s must be nil or a slice of *arr.
func pushSlid[T any](s []T, arr *[]T, v T) []T {
	if len(s) == cap(s) {
		a := *arr
		if len(s) > len(a)/2 {
			a = make([]T, max(2*len(s), 4))
			*arr = a
		}
		n := copy(a, s)
		clear(a[n:]) // what moved entries left behind
		s = a[:n]
	}
	return append(s, v)
}
