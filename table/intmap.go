package table

import "math/bits"

// intMap is a persistent map from uint64 keys to values: every update returns
// a new map and leaves the old one intact, sharing all untouched nodes. It is
// a 32-way radix trie whose height grows with the largest key, so lookups and
// updates cost O(log32 maxKey) and iteration is in ascending key order.
//
// Manifests keep their fragments in intMaps so that a new version copies only
// the few trie nodes on the paths it changes, never the whole fragment list.
//
// Nodes are compressed: a bitmap says which of the 32 slots are occupied and
// a slice holds only those, in slot order (the rank of a slot's bit is its
// index). A sparse trie, such as the scan order's keys spaced 2^16 apart,
// then costs a few dozen bytes per node instead of a full 32-slot array.
//
// The newest keys, when they are the highest, are kept in a tail beside
// the trie (intmap_tail.go), so that appending keys in ascending order
// copies no trie path.
type intMap[V any] struct {
	root  *imNode[V]
	shift uint // bit position of the root's slot index; 0 for a one-level trie
	size  int  // entries in the trie and the tail
	tail  *tailBuf[V]
	tn    int    // entries of tail this map holds; 0 when tail is nil
	tp    uint64 // tail.prefix, here so that a lookup outside the tail loads nothing more
}

const (
	imBits  = 5
	imWidth = 1 << imBits
	imMask  = imWidth - 1
)

type imNode[V any] struct {
	used     uint32       // bitmap of occupied slots
	children []*imNode[V] // interior levels: one per occupied slot, in slot order
	values   []V          // leaf level (shift 0): one per occupied slot, in slot order
}

// rank returns the index in children or values of slot, occupied or not.
func (n *imNode[V]) rank(slot uint64) int {
	return bits.OnesCount32(n.used & (uint32(1)<<slot - 1))
}

// child returns the child at an occupied slot.
func (n *imNode[V]) child(slot uint64) *imNode[V] { return n.children[n.rank(slot)] }

// newParent returns an interior node whose only child, at slot 0, is c.
func newParent[V any](c *imNode[V]) *imNode[V] {
	n := newInterior[V](1)
	n.children[0] = c
	return n
}

func bitCount(used uint32) int { return bits.OnesCount32(used) }

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

// Get returns the value stored at key. (A pointer receiver: a lookup
// loads the few words it needs, not the whole map.)
func (m *intMap[V]) Get(key uint64) (V, bool) {
	var zero V
	if m.tn > 0 && key>>imBits == m.tp {
		if i, ok := m.tail.search(m.tn, key); ok {
			return m.tail.vals[i], true
		}
		return zero, false
	}
	if m.root == nil || capacityShift(key) > m.shift { // imGet, written out: lookups are hot
		return zero, false
	}
	n := m.root
	for shift := m.shift; ; shift -= imBits {
		slot := (key >> shift) & imMask
		if n.used&(1<<slot) == 0 {
			return zero, false
		}
		if shift == 0 {
			return n.values[n.rank(slot)], true
		}
		n = n.child(slot)
	}
}

// imGet returns the value at key in the trie under root.
func imGet[V any](root *imNode[V], shift uint, key uint64) (V, bool) {
	var zero V
	if root == nil || capacityShift(key) > shift {
		return zero, false
	}
	n := root
	for ; ; shift -= imBits {
		slot := (key >> shift) & imMask
		if n.used&(1<<slot) == 0 {
			return zero, false
		}
		if shift == 0 {
			return n.values[n.rank(slot)], true
		}
		n = n.child(slot)
	}
}

// Set returns a map with key bound to v.
//
// A key in the range of the leaf after the highest key's starts or joins
// the tail (intmap_tail.go); any other key goes into the trie.
func (m intMap[V]) Set(key uint64, v V) intMap[V] {
	hi := key >> imBits
	if m.tn > 0 {
		prev := m.tp
		switch {
		case hi == prev:
			return m.setInTail(key, v)
		case hi < prev:
			return m.setInTrie(key, v)
		}
		m = m.flushTail()
		if hi == prev+1 {
			return m.startTail(key, v)
		}
		return m.setInTrie(key, v)
	}
	if m.root == nil || hi == imMax(m.root, m.shift, 0)>>imBits+1 {
		return m.startTail(key, v)
	}
	return m.setInTrie(key, v)
}

// setInTrie binds key, below the tail's range, to v in the trie.
func (m intMap[V]) setInTrie(key uint64, v V) intMap[V] {
	root, shift := m.grown(key)
	newRoot, added := imSet(root, shift, key, v)
	if added {
		m.size++
	}
	m.root, m.shift = newRoot, shift
	return m
}

// grown returns the trie's root and shift, grown to hold key.
func (m intMap[V]) grown(key uint64) (*imNode[V], uint) {
	root, shift := m.root, m.shift
	if root == nil {
		shift = capacityShift(key)
	}
	for capacityShift(key) > shift { // grow: the old root becomes child 0
		shift += imBits
		if root != nil {
			root = newParent(root)
		}
	}
	return root, shift
}

func imSet[V any](n *imNode[V], shift uint, key uint64, v V) (*imNode[V], bool) {
	var used uint32
	if n != nil {
		used = n.used
	}
	slot := (key >> shift) & imMask
	had := used&(1<<slot) != 0
	i := bits.OnesCount32(used & (uint32(1)<<slot - 1))
	if shift == 0 {
		c := newLeaf[V](used | 1<<slot)
		var old []V
		if n != nil {
			old = n.values
		}
		putSlot(c.values, old, i, v, !had)
		return c, !had
	}
	var old *imNode[V]
	var children []*imNode[V]
	if n != nil {
		children = n.children
	}
	if had {
		old = children[i]
	}
	child, added := imSet(old, shift-imBits, key, v)
	c := newInterior[V](used | 1<<slot)
	putSlot(c.children, children, i, child, !had)
	return c, added
}

// Delete returns a map without key.
func (m intMap[V]) Delete(key uint64) intMap[V] {
	if m.tn > 0 && key>>imBits == m.tp {
		return m.deleteFromTail(key)
	}
	if _, ok := imGet(m.root, m.shift, key); !ok {
		return m
	}
	m.root = imDelete(m.root, m.shift, key)
	m.size--
	if m.root == nil {
		m.shift = 0
	}
	return m
}

func imDelete[V any](n *imNode[V], shift uint, key uint64) *imNode[V] {
	slot := (key >> shift) & imMask
	i := n.rank(slot)
	if shift == 0 {
		if used := n.used &^ (1 << slot); used != 0 {
			c := newLeaf[V](used)
			dropSlot(c.values, n.values, i)
			return c
		}
		return nil
	}
	if child := imDelete(n.children[i], shift-imBits, key); child != nil {
		c := newInterior[V](n.used)
		putSlot(c.children, n.children, i, child, false)
		return c
	}
	if used := n.used &^ (1 << slot); used != 0 {
		c := newInterior[V](used)
		dropSlot(c.children, n.children, i)
		return c
	}
	return nil
}

// All yields the entries in ascending key order until yield returns false.
func (m intMap[V]) All(yield func(uint64, V) bool) {
	if m.root != nil && !imWalk(m.root, m.shift, 0, yield) {
		return
	}
	for i := range m.tn {
		if !yield(m.tail.key(i), m.tail.vals[i]) {
			return
		}
	}
}

func imWalk[V any](n *imNode[V], shift uint, prefix uint64, yield func(uint64, V) bool) bool {
	i := 0
	for used := n.used; used != 0; used &= used - 1 {
		slot := uint64(bits.TrailingZeros32(used))
		key := prefix | slot<<shift
		if shift == 0 {
			if !yield(key, n.values[i]) {
				return false
			}
		} else if !imWalk(n.children[i], shift-imBits, key, yield) {
			return false
		}
		i++
	}
	return true
}

// Max returns the largest key, or false for an empty map.
func (m intMap[V]) Max() (uint64, bool) {
	if m.tn > 0 {
		return m.tail.key(m.tn - 1), true
	}
	if m.root == nil {
		return 0, false
	}
	return imMax(m.root, m.shift, 0), true
}

// MaxEntry returns the largest key and its value, or false for an empty
// map: Max and Get in one, without a lookup when the key is in the tail.
func (m *intMap[V]) MaxEntry() (uint64, V, bool) {
	if m.tn > 0 {
		return m.tail.key(m.tn - 1), m.tail.vals[m.tn-1], true
	}
	if m.root == nil {
		var zero V
		return 0, zero, false
	}
	k := imMax(m.root, m.shift, 0)
	v, _ := imGet(m.root, m.shift, k)
	return k, v, true
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
		if m.tn > 0 {
			return m.tail.key(0), true
		}
		return 0, false
	}
	return imMin(m.root, m.shift, 0), true
}

// Floor returns the largest key that is at most k. It costs O(log32 maxKey).
func (m intMap[V]) Floor(k uint64) (uint64, bool) {
	if m.tn > 0 && k >= m.tail.key(0) {
		return m.tail.floor(m.tn, k), true
	}
	if m.root == nil {
		return 0, false
	}
	if capacityShift(k) > m.shift { // k is beyond every key the trie can hold
		return imMax(m.root, m.shift, 0), true
	}
	return imFloor(m.root, m.shift, 0, k)
}

// Ceil returns the smallest key that is at least k. It costs O(log32 maxKey).
func (m intMap[V]) Ceil(k uint64) (uint64, bool) {
	if m.tn > 0 && k >= m.tail.key(0) { // every trie key is below k
		return m.tail.ceil(m.tn, k)
	}
	if m.root != nil && capacityShift(k) <= m.shift {
		if key, ok := imCeil(m.root, m.shift, 0, k); ok {
			return key, true
		}
	}
	if m.tn == 0 {
		return 0, false
	}
	return m.tail.ceil(m.tn, k)
}

func imMin[V any](n *imNode[V], shift uint, prefix uint64) uint64 {
	for {
		slot := uint64(bits.TrailingZeros32(n.used))
		prefix |= slot << shift
		if shift == 0 {
			return prefix
		}
		n, shift = n.child(slot), shift-imBits
	}
}

func imMax[V any](n *imNode[V], shift uint, prefix uint64) uint64 {
	for {
		slot := uint64(31 - bits.LeadingZeros32(n.used))
		prefix |= slot << shift
		if shift == 0 {
			return prefix
		}
		n, shift = n.child(slot), shift-imBits
	}
}

func imFloor[V any](n *imNode[V], shift uint, prefix, k uint64) (uint64, bool) {
	slot := (k >> shift) & imMask
	if shift > 0 && n.used&(1<<slot) != 0 {
		if key, ok := imFloor(n.child(slot), shift-imBits, prefix|slot<<shift, k); ok {
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
	return imMax(n.child(s), shift-imBits, prefix|s<<shift), true
}

func imCeil[V any](n *imNode[V], shift uint, prefix, k uint64) (uint64, bool) {
	slot := (k >> shift) & imMask
	if shift > 0 && n.used&(1<<slot) != 0 {
		if key, ok := imCeil(n.child(slot), shift-imBits, prefix|slot<<shift, k); ok {
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
	return imMin(n.child(s), shift-imBits, prefix|s<<shift), true
}
