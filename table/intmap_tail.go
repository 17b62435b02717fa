package table

import (
	"math/bits"
	"sync/atomic"
)

// intmap_tail.go keeps the newest keys of an intMap out of the trie, in a
// tail, as persistent vectors do: appending a key above every other then
// copies no trie path at all.
//
// Fragment ids and scan-order keys grow as a table is appended to, so most
// updates of a manifest's tries add a key above every key there is. In the
// trie alone, each such update copies the whole path to the rightmost leaf
// (four nodes, ~1.5 KB, in a table of a million fragments). With a tail,
// the new key goes into a buffer of one leaf's width (imWidth keys sharing
// key>>imBits) that versions share: a version sees the first n entries of
// the buffer, n kept in the map value itself, so a later version may fill
// entries beyond n without any earlier version seeing them. The buffer is
// moved into the trie as one leaf only when a key of the next leaf's range
// arrives: one path copy per imWidth appends.
//
// Two versions must never both write the same entry of a shared buffer
// (two branches made from one version, as when a provisional decision is
// rolled back and another made in its place). A buffer therefore records
// how many of its entries have been written (claimed); a version of n
// entries appends in place only if it claims entry n (compare-and-swap of
// claimed from n to n+1), and otherwise copies the buffer first. Entries
// below a version's n are never written again, so readers of that version
// need no synchronisation beyond what handed them the map.

// tailBuf holds the tail entries: keys prefix<<imBits | slots[i], ascending.
type tailBuf[V any] struct {
	prefix  uint64        // key >> imBits, the same for every entry
	claimed atomic.Uint32 // entries written, by whichever version wrote them
	slots   [imWidth]uint8
	vals    [imWidth]V
}

// The helpers below take the buffer and a version's entry count rather
// than the map: a method on the map value would copy it (five words) on
// every lookup, and the copy costs more than the lookup.

// key returns the key of entry i.
func (t *tailBuf[V]) key(i int) uint64 {
	return t.prefix<<imBits | uint64(t.slots[i])
}

// search returns where key's slot is or would be among the first n
// entries, and whether it is there. key must be in the tail's range.
func (t *tailBuf[V]) search(n int, key uint64) (int, bool) {
	s := uint8(key & imMask)
	lo, hi := 0, n
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if t.slots[mid] < s {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, lo < n && t.slots[lo] == s
}

// used returns the bitmap of the first n entries' slots.
func (t *tailBuf[V]) used(n int) uint32 {
	var used uint32
	for _, s := range t.slots[:n] {
		used |= 1 << s
	}
	return used
}

// withTail returns m with its tail replaced by the first n entries of t
// (none when n is 0) and size changed by delta.
func (m intMap[V]) withTail(t *tailBuf[V], n, delta int) intMap[V] {
	m.tail, m.tn, m.tp, m.size = nil, 0, 0, m.size+delta
	if n > 0 {
		m.tail, m.tn, m.tp = t, n, t.prefix
	}
	return m
}

// copyTail returns a new buffer with the first n entries of m's tail.
func (m intMap[V]) copyTail(n int) *tailBuf[V] {
	t := &tailBuf[V]{prefix: m.tail.prefix}
	copy(t.slots[:n], m.tail.slots[:n])
	copy(t.vals[:n], m.tail.vals[:n])
	t.claimed.Store(uint32(n))
	return t
}

// setInTail binds key, in the tail's range, to v.
func (m intMap[V]) setInTail(key uint64, v V) intMap[V] {
	n := m.tn
	i, found := m.tail.search(n, key)
	switch {
	case found:
		t := m.copyTail(n)
		t.vals[i] = v
		return m.withTail(t, n, 0)
	case i == n && m.tail.claimed.CompareAndSwap(uint32(n), uint32(n+1)):
		m.tail.slots[n], m.tail.vals[n] = uint8(key&imMask), v // entry n is ours alone
		return m.withTail(m.tail, n+1, 1)
	}
	t := m.copyTail(i)
	t.slots[i], t.vals[i] = uint8(key&imMask), v
	copy(t.slots[i+1:n+1], m.tail.slots[i:n])
	copy(t.vals[i+1:n+1], m.tail.vals[i:n])
	t.claimed.Store(uint32(n + 1))
	return m.withTail(t, n+1, 1)
}

// deleteFromTail removes key, in the tail's range, if present.
func (m intMap[V]) deleteFromTail(key uint64) intMap[V] {
	n := m.tn
	i, found := m.tail.search(n, key)
	switch {
	case !found:
		return m
	case i == n-1: // the last entry: a shorter view of the same buffer
		return m.withTail(m.tail, n-1, -1)
	}
	t := m.copyTail(i)
	copy(t.slots[i:n-1], m.tail.slots[i+1:n])
	copy(t.vals[i:n-1], m.tail.vals[i+1:n])
	t.claimed.Store(uint32(n - 1))
	return m.withTail(t, n-1, -1)
}

// startTail returns m, whose tail is empty, with a tail holding key alone.
func (m intMap[V]) startTail(key uint64, v V) intMap[V] {
	t := &tailBuf[V]{prefix: key >> imBits}
	t.slots[0], t.vals[0] = uint8(key&imMask), v
	t.claimed.Store(1)
	return m.withTail(t, 1, 1)
}

// flushTail returns m with its tail moved into the trie as one leaf.
func (m intMap[V]) flushTail() intMap[V] {
	if m.tn == 0 {
		return m
	}
	leaf := newLeaf[V](m.tail.used(m.tn))
	copy(leaf.values, m.tail.vals[:m.tn])
	key := m.tail.prefix << imBits
	root, shift := m.grown(key)
	if shift == 0 {
		root = leaf // key is 0: the trie, below it, is empty
	} else {
		root = imPlaceLeaf(root, shift, key, leaf)
	}
	return intMap[V]{root: root, shift: shift, size: m.size}
}

// imPlaceLeaf returns n with leaf as the leaf of key's range, which must
// be empty in n.
func imPlaceLeaf[V any](n *imNode[V], shift uint, key uint64, leaf *imNode[V]) *imNode[V] {
	var used uint32
	var children []*imNode[V]
	if n != nil {
		used, children = n.used, n.children
	}
	slot := (key >> shift) & imMask
	had := used&(1<<slot) != 0
	i := bits.OnesCount32(used & (uint32(1)<<slot - 1))
	child := leaf
	if shift > imBits {
		var old *imNode[V]
		if had {
			old = children[i]
		}
		child = imPlaceLeaf(old, shift-imBits, key, leaf)
	}
	c := newInterior[V](used | 1<<slot)
	putSlot(c.children, children, i, child, !had)
	return c
}

// floor returns the largest key at most k among the first n entries; k
// must be at least the first entry's key.
func (t *tailBuf[V]) floor(n int, k uint64) uint64 {
	if k>>imBits > t.prefix {
		return t.key(n - 1)
	}
	i, found := t.search(n, k)
	if found {
		return k
	}
	return t.key(i - 1)
}

// ceil returns the smallest key at least k among the first n entries, if
// there is one (none if n is 0).
func (t *tailBuf[V]) ceil(n int, k uint64) (uint64, bool) {
	if n == 0 || k > t.key(n-1) {
		return 0, false
	}
	if k>>imBits < t.prefix {
		return t.key(0), true
	}
	i, _ := t.search(n, k)
	return t.key(i), true
}
