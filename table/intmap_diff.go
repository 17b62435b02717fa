package table

import "math/bits"

// diffMaps calls fn for every key whose binding differs between a and b:
// present in one only, or present in both with values same reports as
// different. It walks only the trie nodes the two maps do not share, so
// diffing two versions that differ in k keys costs O(k log32 maxKey), not
// O(size). Keys are visited in ascending order. Equal values (==) are the
// same without asking same.
//
// A key in the range of either map's tail (intmap_tail.go) is compared by
// range: the tail on one side, the trie's leaf there (or the other tail)
// on the other. Every other key is in both tries, where it is diffed by
// structure.
//
// Two versions with one trie and views of one tail buffer, as an append
// leaves them, differ in the longer view's extra entries only: those are
// all it visits (diffTries is the general walk; checkDiff compares both).
func diffMaps[V comparable](a, b intMap[V], same func(x, y V) bool, fn func(key uint64, x V, inA bool, y V, inB bool)) {
	if a.root == b.root && a.shift == b.shift && a.tail == b.tail {
		diffViews(a, b, fn)
		return
	}
	diffTries(a, b, same, fn)
}

// diffTries is diffMaps without its shortcut.
func diffTries[V comparable](a, b intMap[V], same func(x, y V) bool, fn func(key uint64, x V, inA bool, y V, inB bool)) {
	ra, rb, shift := alignRoots(a, b)
	if a.tn == 0 && b.tn == 0 {
		diffNodes(ra, rb, shift, 0, same, fn)
		return
	}
	var ranges [2]uint64 // the tails' ranges (key >> imBits), ascending
	nr := 0
	if a.tn > 0 {
		ranges[nr], nr = a.tail.prefix, nr+1
	}
	if b.tn > 0 && (nr == 0 || ranges[0] != b.tail.prefix) {
		ranges[nr], nr = b.tail.prefix, nr+1
	}
	if nr == 2 && ranges[0] > ranges[1] {
		ranges[0], ranges[1] = ranges[1], ranges[0]
	}
	next := 0 // ranges[next:] are still to diff
	upTo := func(hi uint64) {
		for next < nr && ranges[next] < hi {
			diffRange(a, b, ranges[next], same, fn)
			next++
		}
	}
	diffNodes(ra, rb, shift, 0, same, func(key uint64, x V, inX bool, y V, inY bool) {
		hi := key >> imBits
		if nr > 0 && hi == ranges[0] || nr > 1 && hi == ranges[1] {
			return // a tail's range: diffRange compares it whole
		}
		upTo(hi)
		fn(key, x, inX, y, inY)
	})
	upTo(^uint64(0))
}

// leafRange returns the occupied slots and values of m in the leaf range
// hi: its tail's, or the trie leaf's.
func leafRange[V any](m intMap[V], hi uint64) (uint32, []V) {
	if m.tn > 0 && m.tail.prefix == hi {
		return m.tail.used(m.tn), m.tail.vals[:m.tn]
	}
	key := hi << imBits
	if m.root == nil || capacityShift(key) > m.shift {
		return 0, nil
	}
	n := m.root
	for shift := m.shift; shift > 0; shift -= imBits {
		slot := (key >> shift) & imMask
		if n.used&(1<<slot) == 0 {
			return 0, nil
		}
		n = n.child(slot)
	}
	return n.used, n.values
}

// diffRange calls fn for the keys of leaf range hi that differ between a
// and b, ascending.
func diffRange[V comparable](a, b intMap[V], hi uint64, same func(x, y V) bool, fn func(uint64, V, bool, V, bool)) {
	if a.tn > 0 && a.tail == b.tail {
		diffViews(a, b, fn)
		return
	}
	ux, vx := leafRange(a, hi)
	uy, vy := leafRange(b, hi)
	var zero V
	for used := ux | uy; used != 0; used &= used - 1 {
		slot := uint32(bits.TrailingZeros32(used))
		bit := uint32(1) << slot
		below := bit - 1
		inX, inY := ux&bit != 0, uy&bit != 0
		x, y := zero, zero
		if inX {
			x = vx[bits.OnesCount32(ux&below)]
		}
		if inY {
			y = vy[bits.OnesCount32(uy&below)]
		}
		if inX != inY || x != y && !same(x, y) {
			fn(hi<<imBits|uint64(slot), x, inX, y, inY)
		}
	}
}

// diffViews calls fn for the keys that differ between a and b, whose
// tails are views of one buffer (or both empty): the shorter's entries are
// the longer's first ones, so only the longer's others differ.
func diffViews[V any](a, b intMap[V], fn func(uint64, V, bool, V, bool)) {
	var zero V
	for i := min(a.tn, b.tn); i < max(a.tn, b.tn); i++ {
		v := a.tail.vals[i]
		if i < a.tn {
			fn(a.tail.key(i), v, true, zero, false)
		} else {
			fn(a.tail.key(i), zero, false, v, true)
		}
	}
}

// alignRoots returns both roots at the same height: the shorter trie is
// wrapped, as Set grows a trie, so that shared subtrees line up.
func alignRoots[V any](a, b intMap[V]) (*imNode[V], *imNode[V], uint) {
	ra, rb := a.root, b.root
	sa, sb := a.shift, b.shift
	if ra == nil {
		sa = sb
	}
	if rb == nil {
		sb = sa
	}
	for sa < sb {
		ra, sa = wrapNode(ra), sa+imBits
	}
	for sb < sa {
		rb, sb = wrapNode(rb), sb+imBits
	}
	return ra, rb, sa
}

func wrapNode[V any](n *imNode[V]) *imNode[V] {
	if n == nil {
		return nil
	}
	return newParent(n)
}

func diffNodes[V comparable](x, y *imNode[V], shift uint, prefix uint64, same func(a, b V) bool, fn func(uint64, V, bool, V, bool)) {
	if x == y {
		return
	}
	var ux, uy uint32
	if x != nil {
		ux = x.used
	}
	if y != nil {
		uy = y.used
	}
	var zero V
	for used := ux | uy; used != 0; used &= used - 1 {
		slot := uint64(bits.TrailingZeros32(used))
		bit := uint32(1) << slot
		key := prefix | slot<<shift
		inX, inY := ux&bit != 0, uy&bit != 0
		if shift == 0 {
			vx, vy := zero, zero
			if inX {
				vx = x.values[x.rank(slot)]
			}
			if inY {
				vy = y.values[y.rank(slot)]
			}
			if inX != inY || vx != vy && !same(vx, vy) {
				fn(key, vx, inX, vy, inY)
			}
			continue
		}
		var cx, cy *imNode[V]
		if inX {
			cx = x.child(slot)
		}
		if inY {
			cy = y.child(slot)
		}
		if cx != cy { // most children are shared: skip the call
			diffNodes(cx, cy, shift-imBits, key, same, fn)
		}
	}
}
