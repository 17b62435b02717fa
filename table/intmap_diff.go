package table

import "math/bits"

// diffMaps calls fn for every key whose binding differs between a and b:
// present in one only, or present in both with values same reports as
// different. It walks only the trie nodes the two maps do not share, so
// diffing two versions that differ in k keys costs O(k log32 maxKey), not
// O(size). Keys are visited in ascending order. Equal values (==) are the
// same without asking same.
func diffMaps[V comparable](a, b intMap[V], same func(x, y V) bool, fn func(key uint64, x V, inA bool, y V, inB bool)) {
	ra, rb, shift := alignRoots(a, b)
	diffNodes(ra, rb, shift, 0, same, fn)
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
