package decide

import "math/bits"

// versionWindow holds values by version for the few hundred consecutive
// versions a state keeps (its window of manifests and transactions): a
// ring over the versions from the oldest held to the newest, where a map
// would hash, probe and leave tombstones on every version in and out.
// Versions arrive at the top and leave from either end; one in the middle
// may be missing. The ring spans the oldest to the newest version held,
// so it costs memory for the span, not the count: a state's window keeps
// both close.
type versionWindow[T any] struct {
	first uint64 // version at slots[head]; meaningless while n is 0
	head  int
	n     int // versions spanned, from first
	count int // values held
	slots []windowSlot[T]
}

// minSlots is the smallest ring a window allocates.
const minSlots = 4

type windowSlot[T any] struct {
	v  T
	ok bool
}

// len returns the number of values held.
func (w *versionWindow[T]) len() int { return w.count }

// wrap returns i modulo the ring's length, a power of two (reserve):
// a mask where a division would take tens of cycles, several times a
// decision.
func (w *versionWindow[T]) wrap(i int) int { return i & (len(w.slots) - 1) }

// slot returns the slot of version v, which must be within the span.
func (w *versionWindow[T]) slot(v uint64) *windowSlot[T] {
	return &w.slots[w.wrap(w.head+int(v-w.first))]
}

func (w *versionWindow[T]) spans(v uint64) bool {
	return w.n > 0 && v >= w.first && v-w.first < uint64(w.n)
}

// get returns the value at version v.
func (w *versionWindow[T]) get(v uint64) (T, bool) {
	if !w.spans(v) {
		var zero T
		return zero, false
	}
	s := w.slot(v)
	return s.v, s.ok
}

// set binds version v to x, replacing what it held.
func (w *versionWindow[T]) set(v uint64, x T) {
	switch {
	case w.n == 0:
		w.reserve(1)
		w.first, w.head, w.n = v, 0, 1
	case v < w.first:
		grow := w.first - v
		w.reserve(w.n + int(grow))
		w.head = w.wrap(w.head - int(grow)) // grow < len(slots) after reserve; the mask wraps a negative
		w.first, w.n = v, w.n+int(grow)
	case v-w.first >= uint64(w.n):
		n := int(v-w.first) + 1
		w.reserve(n)
		w.n = n
	}
	s := w.slot(v)
	if !s.ok {
		w.count++
	}
	*s = windowSlot[T]{v: x, ok: true}
}

// remove drops version v and returns what it held.
func (w *versionWindow[T]) remove(v uint64) (T, bool) {
	var zero T
	if !w.spans(v) {
		return zero, false
	}
	s := w.slot(v)
	if !s.ok {
		return zero, false
	}
	x := s.v
	*s = windowSlot[T]{}
	w.count--
	for w.n > 0 && !w.slots[w.head].ok { // the span starts at the oldest held
		w.head = w.wrap(w.head + 1)
		w.first++
		w.n--
	}
	for w.n > 0 && !w.slot(w.first+uint64(w.n)-1).ok { // and ends at the newest
		w.n--
	}
	if w.count == 0 && len(w.slots) > minSlots {
		w.slots = nil // an emptied window (dropped caches) gives its ring back
	}
	return x, true
}

// reserve makes room for a span of n versions, keeping the ring's order.
// The slots beyond the current span are empty. The ring starts at
// minSlots and doubles: most of a many-dataset committer's states hold a
// few versions, and their rings are a fair share of what such a state
// costs.
func (w *versionWindow[T]) reserve(n int) {
	if n <= len(w.slots) {
		return
	}
	slots := make([]windowSlot[T], 1<<bits.Len(uint(max(n, minSlots)-1))) // a power of two: see wrap
	for i := range w.n {
		slots[i] = w.slots[w.wrap(w.head+i)]
	}
	w.slots, w.head = slots, 0
}
