package table

import "slices"

// seqOrder is the scan order of a manifest's fragments: a persistent map
// from sequence key to fragment id, iterated in key order.
//
// Sequence keys are sparse (appends step by seqGap, 2^16, to leave room for
// fragments spliced in between), and a trie keyed by them directly would
// spend a chain of nearly empty nodes on every fragment. seqOrder instead
// splits a key at seqGap: the high part indexes an intMap, dense for
// appended fragments, and each of its values is a small sorted bucket of
// the keys sharing that high part, usually just one. An update copies one
// bucket and one trie path, so versions still share all else.
type seqOrder struct {
	m intMap[[]seqEntry] // key / seqGap → the entries with that quotient, ascending
}

type seqEntry struct{ seq, id uint64 }

func seqHigh(seq uint64) uint64 { return seq / seqGap }

// Get returns the fragment id at seq.
func (o seqOrder) Get(seq uint64) (uint64, bool) {
	b, _ := o.m.Get(seqHigh(seq))
	i, ok := searchSeq(b, seq)
	if !ok {
		return 0, false
	}
	return b[i].id, true
}

func searchSeq(b []seqEntry, seq uint64) (int, bool) {
	return slices.BinarySearchFunc(b, seq, func(e seqEntry, s uint64) int { return cmpU64(e.seq, s) })
}

// Set returns an order with seq bound to id.
func (o seqOrder) Set(seq, id uint64) seqOrder {
	hi := seqHigh(seq)
	b, _ := o.m.Get(hi)
	i, found := searchSeq(b, seq)
	return seqOrder{m: o.m.Set(hi, withSlot(b, i, seqEntry{seq, id}, !found))}
}

// Delete returns an order without seq.
func (o seqOrder) Delete(seq uint64) seqOrder {
	hi := seqHigh(seq)
	b, _ := o.m.Get(hi)
	i, found := searchSeq(b, seq)
	switch {
	case !found:
		return o
	case len(b) == 1:
		return seqOrder{m: o.m.Delete(hi)}
	default:
		return seqOrder{m: o.m.Set(hi, withoutSlot(b, i))}
	}
}

// All yields the entries in ascending key order until yield returns false.
func (o seqOrder) All(yield func(seq, id uint64) bool) {
	o.m.All(func(_ uint64, b []seqEntry) bool {
		for _, e := range b {
			if !yield(e.seq, e.id) {
				return false
			}
		}
		return true
	})
}

// Min returns the smallest key, or false for an empty order.
func (o seqOrder) Min() (uint64, bool) {
	hi, ok := o.m.Min()
	if !ok {
		return 0, false
	}
	b, _ := o.m.Get(hi)
	return b[0].seq, true
}

// Max returns the largest key, or false for an empty order.
func (o seqOrder) Max() (uint64, bool) {
	hi, ok := o.m.Max()
	if !ok {
		return 0, false
	}
	b, _ := o.m.Get(hi)
	return b[len(b)-1].seq, true
}

// Ceil returns the smallest key that is at least k.
func (o seqOrder) Ceil(k uint64) (uint64, bool) {
	hi := seqHigh(k)
	b, _ := o.m.Get(hi)
	if i, _ := searchSeq(b, k); i < len(b) {
		return b[i].seq, true
	}
	if hi == seqHigh(^uint64(0)) {
		return 0, false
	}
	next, ok := o.m.Ceil(hi + 1)
	if !ok {
		return 0, false
	}
	b, _ = o.m.Get(next)
	return b[0].seq, true
}

// Floor returns the largest key that is at most k.
func (o seqOrder) Floor(k uint64) (uint64, bool) {
	hi := seqHigh(k)
	b, _ := o.m.Get(hi)
	i, found := searchSeq(b, k)
	if found {
		return k, true
	}
	if i > 0 {
		return b[i-1].seq, true
	}
	if hi == 0 {
		return 0, false
	}
	prev, ok := o.m.Floor(hi - 1)
	if !ok {
		return 0, false
	}
	b, _ = o.m.Get(prev)
	return b[len(b)-1].seq, true
}

// Neighbors returns the largest key below k and the smallest key above k.
func (o seqOrder) Neighbors(k uint64) (below uint64, hasBelow bool, above uint64, hasAbove bool) {
	if k > 0 {
		below, hasBelow = o.Floor(k - 1)
	}
	if k < ^uint64(0) {
		above, hasAbove = o.Ceil(k + 1)
	}
	return below, hasBelow, above, hasAbove
}
