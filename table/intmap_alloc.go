package table

// intmap_alloc.go allocates a trie node together with its slots: one
// allocation per node instead of two (the node, then its slice). A node is
// copied on every update of a path through it, so this halves the
// allocations of every manifest update.
//
// Slots come in size classes (1, 2, 3, 4, 6, 8, 12, 16, 24, 32); a node's
// slice has exactly its occupied slots as length and capacity, so nothing
// can append into the spare room of its class.

// nodeBlock is a node and the array its slots live in.
type nodeBlock[V, A any] struct {
	n imNode[V]
	a A
}

func leafIn[V, A any](used uint32, k int, slots func(*A) []V) *imNode[V] {
	x := new(nodeBlock[V, A])
	x.n.used = used
	x.n.values = slots(&x.a)[:k:k]
	return &x.n
}

func interiorIn[V, A any](used uint32, k int, slots func(*A) []*imNode[V]) *imNode[V] {
	x := new(nodeBlock[V, A])
	x.n.used = used
	x.n.children = slots(&x.a)[:k:k]
	return &x.n
}

// newLeaf returns a leaf node with the given occupied slots and room for
// their values (zero until set).
func newLeaf[V any](used uint32) *imNode[V] {
	switch k := bitCount(used); {
	case k <= 1:
		return leafIn(used, k, func(a *[1]V) []V { return a[:] })
	case k <= 2:
		return leafIn(used, k, func(a *[2]V) []V { return a[:] })
	case k <= 3:
		return leafIn(used, k, func(a *[3]V) []V { return a[:] })
	case k <= 4:
		return leafIn(used, k, func(a *[4]V) []V { return a[:] })
	case k <= 6:
		return leafIn(used, k, func(a *[6]V) []V { return a[:] })
	case k <= 8:
		return leafIn(used, k, func(a *[8]V) []V { return a[:] })
	case k <= 12:
		return leafIn(used, k, func(a *[12]V) []V { return a[:] })
	case k <= 16:
		return leafIn(used, k, func(a *[16]V) []V { return a[:] })
	case k <= 24:
		return leafIn(used, k, func(a *[24]V) []V { return a[:] })
	default:
		return leafIn(used, k, func(a *[32]V) []V { return a[:] })
	}
}

// newInterior returns an interior node with the given occupied slots and
// room for their children (nil until set).
func newInterior[V any](used uint32) *imNode[V] {
	switch k := bitCount(used); {
	case k <= 1:
		return interiorIn(used, k, func(a *[1]*imNode[V]) []*imNode[V] { return a[:] })
	case k <= 2:
		return interiorIn(used, k, func(a *[2]*imNode[V]) []*imNode[V] { return a[:] })
	case k <= 3:
		return interiorIn(used, k, func(a *[3]*imNode[V]) []*imNode[V] { return a[:] })
	case k <= 4:
		return interiorIn(used, k, func(a *[4]*imNode[V]) []*imNode[V] { return a[:] })
	case k <= 6:
		return interiorIn(used, k, func(a *[6]*imNode[V]) []*imNode[V] { return a[:] })
	case k <= 8:
		return interiorIn(used, k, func(a *[8]*imNode[V]) []*imNode[V] { return a[:] })
	case k <= 12:
		return interiorIn(used, k, func(a *[12]*imNode[V]) []*imNode[V] { return a[:] })
	case k <= 16:
		return interiorIn(used, k, func(a *[16]*imNode[V]) []*imNode[V] { return a[:] })
	case k <= 24:
		return interiorIn(used, k, func(a *[24]*imNode[V]) []*imNode[V] { return a[:] })
	default:
		return interiorIn(used, k, func(a *[32]*imNode[V]) []*imNode[V] { return a[:] })
	}
}

// putSlot fills dst, a node's slots, from src, the slots of the node it
// replaces, with x at i: inserted when grow is set, else overwriting
// src[i].
func putSlot[T any](dst, src []T, i int, x T, grow bool) {
	copy(dst, src[:i])
	dst[i] = x
	if grow {
		copy(dst[i+1:], src[i:])
	} else {
		copy(dst[i+1:], src[i+1:])
	}
}

// dropSlot fills dst from src without src[i].
func dropSlot[T any](dst, src []T, i int) {
	copy(dst, src[:i])
	copy(dst[i:], src[i+1:])
}
