package table

import "math/bits"

// intMap is a persistent map from uint64 keys to values: every update returns
// a new map and leaves the old one intact, sharing all untouched nodes. It is
// a 32-way radix trie whose height grows with the largest key, so lookups and
// updates cost O(log32 maxKey) and iteration is in ascending key order.
//
// Manifests keep their fragments in intMaps so that a new version copies only
// the few trie nodes on the paths it changes, never the whole fragment list.
type intMap[V any] struct {
	root  *imNode[V]
	shift uint // bit position of the root's slot index; 0 for a one-level trie
	size  int
}

const (
	imBits  = 5
	imWidth = 1 << imBits
	imMask  = imWidth - 1
)

type imNode[V any] struct {
	used     uint32 // bitmap of occupied slots
	children [imWidth]*imNode[V]
	values   [imWidth]V // used only at the leaf level (shift 0)
}

// Len returns the number of entries.
func (m intMap[V]) Len() int { return m.size }

// capacityShift is the shift a trie needs to hold key.
func capacityShift(key uint64) uint {
	if key < imWidth {
		return 0
	}
	n := uint(bits.Len64(key)) // bits needed
	return ((n - 1) / imBits) * imBits
}

// Get returns the value stored at key.
func (m intMap[V]) Get(key uint64) (V, bool) {
	var zero V
	if m.root == nil || capacityShift(key) > m.shift {
		return zero, false
	}
	n := m.root
	for shift := m.shift; ; shift -= imBits {
		slot := (key >> shift) & imMask
		if n.used&(1<<slot) == 0 {
			return zero, false
		}
		if shift == 0 {
			return n.values[slot], true
		}
		n = n.children[slot]
	}
}

// Set returns a map with key bound to v.
func (m intMap[V]) Set(key uint64, v V) intMap[V] {
	root, shift := m.root, m.shift
	if root == nil {
		shift = capacityShift(key)
	}
	for capacityShift(key) > shift { // grow: the old root becomes child 0
		shift += imBits
		if root != nil {
			grown := &imNode[V]{used: 1}
			grown.children[0] = root
			root = grown
		}
	}
	newRoot, added := imSet(root, shift, key, v)
	size := m.size
	if added {
		size++
	}
	return intMap[V]{root: newRoot, shift: shift, size: size}
}

func imSet[V any](n *imNode[V], shift uint, key uint64, v V) (*imNode[V], bool) {
	c := &imNode[V]{}
	if n != nil {
		*c = *n
	}
	slot := (key >> shift) & imMask
	had := c.used&(1<<slot) != 0
	c.used |= 1 << slot
	if shift == 0 {
		c.values[slot] = v
		return c, !had
	}
	child, added := imSet(c.children[slot], shift-imBits, key, v)
	c.children[slot] = child
	return c, added
}

// Delete returns a map without key.
func (m intMap[V]) Delete(key uint64) intMap[V] {
	if _, ok := m.Get(key); !ok {
		return m
	}
	root := imDelete(m.root, m.shift, key)
	if root == nil {
		return intMap[V]{}
	}
	return intMap[V]{root: root, shift: m.shift, size: m.size - 1}
}

func imDelete[V any](n *imNode[V], shift uint, key uint64) *imNode[V] {
	slot := (key >> shift) & imMask
	c := *n
	if shift == 0 {
		var zero V
		c.values[slot] = zero
		c.used &^= 1 << slot
	} else if child := imDelete(n.children[slot], shift-imBits, key); child == nil {
		c.children[slot] = nil
		c.used &^= 1 << slot
	} else {
		c.children[slot] = child
	}
	if c.used == 0 {
		return nil
	}
	return &c
}

// All yields the entries in ascending key order until yield returns false.
func (m intMap[V]) All(yield func(uint64, V) bool) {
	if m.root != nil {
		imWalk(m.root, m.shift, 0, yield)
	}
}

func imWalk[V any](n *imNode[V], shift uint, prefix uint64, yield func(uint64, V) bool) bool {
	for used := n.used; used != 0; used &= used - 1 {
		slot := uint64(bits.TrailingZeros32(used))
		key := prefix | slot<<shift
		if shift == 0 {
			if !yield(key, n.values[slot]) {
				return false
			}
		} else if !imWalk(n.children[slot], shift-imBits, key, yield) {
			return false
		}
	}
	return true
}

// Max returns the largest key, or false for an empty map.
func (m intMap[V]) Max() (uint64, bool) {
	if m.root == nil {
		return 0, false
	}
	return imMax(m.root, m.shift, 0), true
}

// Neighbors returns the largest key below k and the smallest key above k.
func (m intMap[V]) Neighbors(k uint64) (below uint64, hasBelow bool, above uint64, hasAbove bool) {
	if k > 0 {
		below, hasBelow = m.Floor(k - 1)
	}
	if k < ^uint64(0) {
		above, hasAbove = m.Ceil(k + 1)
	}
	return below, hasBelow, above, hasAbove
}

// Min returns the smallest key, or false for an empty map.
func (m intMap[V]) Min() (uint64, bool) {
	if m.root == nil {
		return 0, false
	}
	return imMin(m.root, m.shift, 0), true
}

// Floor returns the largest key that is at most k. It costs O(log32 maxKey).
func (m intMap[V]) Floor(k uint64) (uint64, bool) {
	if m.root == nil {
		return 0, false
	}
	if capacityShift(k) > m.shift { // k is beyond every key the trie can hold
		return m.Max()
	}
	return imFloor(m.root, m.shift, 0, k)
}

// Ceil returns the smallest key that is at least k. It costs O(log32 maxKey).
func (m intMap[V]) Ceil(k uint64) (uint64, bool) {
	if m.root == nil || capacityShift(k) > m.shift {
		return 0, false
	}
	return imCeil(m.root, m.shift, 0, k)
}

func imMin[V any](n *imNode[V], shift uint, prefix uint64) uint64 {
	for {
		slot := uint64(bits.TrailingZeros32(n.used))
		prefix |= slot << shift
		if shift == 0 {
			return prefix
		}
		n, shift = n.children[slot], shift-imBits
	}
}

func imMax[V any](n *imNode[V], shift uint, prefix uint64) uint64 {
	for {
		slot := uint64(31 - bits.LeadingZeros32(n.used))
		prefix |= slot << shift
		if shift == 0 {
			return prefix
		}
		n, shift = n.children[slot], shift-imBits
	}
}

func imFloor[V any](n *imNode[V], shift uint, prefix, k uint64) (uint64, bool) {
	slot := (k >> shift) & imMask
	if shift > 0 && n.used&(1<<slot) != 0 {
		if key, ok := imFloor(n.children[slot], shift-imBits, prefix|slot<<shift, k); ok {
			return key, true
		}
	}
	// The largest occupied slot below slot (or at slot, on the leaf level).
	limit := slot
	if shift == 0 {
		limit++
	}
	lower := n.used & (uint32(1)<<limit - 1)
	if lower == 0 {
		return 0, false
	}
	s := uint64(31 - bits.LeadingZeros32(lower))
	if shift == 0 {
		return prefix | s, true
	}
	return imMax(n.children[s], shift-imBits, prefix|s<<shift), true
}

func imCeil[V any](n *imNode[V], shift uint, prefix, k uint64) (uint64, bool) {
	slot := (k >> shift) & imMask
	if shift > 0 && n.used&(1<<slot) != 0 {
		if key, ok := imCeil(n.children[slot], shift-imBits, prefix|slot<<shift, k); ok {
			return key, true
		}
	}
	// The smallest occupied slot above slot (or at slot, on the leaf level).
	from := slot + 1
	if shift == 0 {
		from = slot
	}
	if from >= imWidth {
		return 0, false
	}
	upper := n.used &^ (uint32(1)<<from - 1)
	if upper == 0 {
		return 0, false
	}
	s := uint64(bits.TrailingZeros32(upper))
	if shift == 0 {
		return prefix | s, true
	}
	return imMin(n.children[s], shift-imBits, prefix|s<<shift), true
}
