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
	n, key := m.root, uint64(0)
	for shift := m.shift; ; shift -= imBits {
		slot := uint64(31 - bits.LeadingZeros32(n.used))
		key |= slot << shift
		if shift == 0 {
			return key, true
		}
		n = n.children[slot]
	}
}

// Neighbors returns the largest key below k and the smallest key above k.
func (m intMap[V]) Neighbors(k uint64) (below uint64, hasBelow bool, above uint64, hasAbove bool) {
	m.All(func(key uint64, _ V) bool {
		switch {
		case key < k:
			below, hasBelow = key, true
		case key > k:
			above, hasAbove = key, true
			return false
		}
		return true
	})
	return below, hasBelow, above, hasAbove
}
