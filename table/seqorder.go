package table

// seqOrder is the scan order of a manifest's fragments: a persistent map
// from sequence key to fragment id, iterated in key order.
//
// Sequence keys are sparse (appends step by seqGap, 2^16, to leave room for
// fragments spliced in between), and a trie keyed by them directly would
// spend a chain of nearly empty nodes on every fragment. seqOrder instead
// splits a key at seqGap: the high part indexes an intMap, dense for
// appended fragments, and each of its values is a small sorted bucket of
// the keys sharing that high part, usually just one, held in the trie's
// leaf itself. An update copies one trie path (and a bucket of two or
// more), so versions still share all else.
type seqOrder struct {
	m intMap[seqBucket] // key / seqGap → the entries with that quotient, ascending
}

type seqEntry struct{ seq, id uint64 }

// seqBucket is the entries sharing a quotient: one held in place (an
// appended fragment's), or two or more in a slice that is never modified.
type seqBucket struct {
	one  seqEntry    // the only entry, when many is nil
	many *[]seqEntry // two or more entries, ascending
}

func (b seqBucket) len() int {
	if b.many != nil {
		return len(*b.many)
	}
	return 1
}

// noEntries is the bucket of a quotient no key has.
var noEntries = seqBucket{many: new([]seqEntry)}

// bucket returns the bucket of quotient hi, noEntries if there is none.
func (o seqOrder) bucket(hi uint64) seqBucket {
	if b, ok := o.m.Get(hi); ok {
		return b
	}
	return noEntries
}

func (b seqBucket) at(i int) seqEntry {
	if b.many != nil {
		return (*b.many)[i]
	}
	return b.one
}

// search returns where seq is or would be in b, and whether it is there.
func (b seqBucket) search(seq uint64) (int, bool) {
	lo, hi := 0, b.len()
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if b.at(m).seq < seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < b.len() && b.at(lo).seq == seq
}

// bucketOf returns a bucket holding entries.
func bucketOf(entries []seqEntry) seqBucket {
	if len(entries) == 1 {
		return seqBucket{one: entries[0]}
	}
	return seqBucket{many: &entries}
}

// entries returns a new slice of b's entries with e at i (inserted when
// grow is set, else replacing), or without the entry at i when drop is set.
func (b seqBucket) edited(i int, e seqEntry, grow, drop bool) []seqEntry {
	n := b.len()
	out := make([]seqEntry, 0, n+1)
	for j := 0; j < n; j++ {
		if j == i {
			if drop {
				continue
			}
			out = append(out, e)
			if !grow {
				continue
			}
		}
		out = append(out, b.at(j))
	}
	if i == n && !drop {
		out = append(out, e)
	}
	return out
}

func seqHigh(seq uint64) uint64 { return seq / seqGap }

// Get returns the fragment id at seq.
func (o seqOrder) Get(seq uint64) (uint64, bool) {
	b := o.bucket(seqHigh(seq))
	i, ok := b.search(seq)
	if !ok {
		return 0, false
	}
	return b.at(i).id, true
}

// Set returns an order with seq bound to id.
func (o seqOrder) Set(seq, id uint64) seqOrder {
	hi := seqHigh(seq)
	b := o.bucket(hi)
	e := seqEntry{seq, id}
	i, found := b.search(seq)
	if b.len() == 0 || found && b.len() == 1 {
		return seqOrder{m: o.m.Set(hi, seqBucket{one: e})}
	}
	return seqOrder{m: o.m.Set(hi, bucketOf(b.edited(i, e, !found, false)))}
}

// Delete returns an order without seq.
func (o seqOrder) Delete(seq uint64) seqOrder {
	hi := seqHigh(seq)
	b := o.bucket(hi)
	i, found := b.search(seq)
	switch {
	case !found:
		return o
	case b.len() == 1:
		return seqOrder{m: o.m.Delete(hi)}
	default:
		return seqOrder{m: o.m.Set(hi, bucketOf(b.edited(i, seqEntry{}, false, true)))}
	}
}

// All yields the entries in ascending key order until yield returns false.
func (o seqOrder) All(yield func(seq, id uint64) bool) {
	o.m.All(func(_ uint64, b seqBucket) bool {
		for i := range b.len() {
			if e := b.at(i); !yield(e.seq, e.id) {
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
	b := o.bucket(hi)
	return b.at(0).seq, true
}

// Max returns the largest key, or false for an empty order.
func (o *seqOrder) Max() (uint64, bool) {
	_, b, ok := o.m.MaxEntry()
	if !ok {
		return 0, false
	}
	return b.at(b.len() - 1).seq, true
}

// Ceil returns the smallest key that is at least k.
func (o seqOrder) Ceil(k uint64) (uint64, bool) {
	hi := seqHigh(k)
	b := o.bucket(hi)
	if i, _ := b.search(k); i < b.len() {
		return b.at(i).seq, true
	}
	if hi == seqHigh(^uint64(0)) {
		return 0, false
	}
	next, ok := o.m.Ceil(hi + 1)
	if !ok {
		return 0, false
	}
	b = o.bucket(next)
	return b.at(0).seq, true
}

// Floor returns the largest key that is at most k.
func (o seqOrder) Floor(k uint64) (uint64, bool) {
	hi := seqHigh(k)
	b := o.bucket(hi)
	i, found := b.search(k)
	if found {
		return k, true
	}
	if i > 0 {
		return b.at(i - 1).seq, true
	}
	if hi == 0 {
		return 0, false
	}
	prev, ok := o.m.Floor(hi - 1)
	if !ok {
		return 0, false
	}
	b = o.bucket(prev)
	return b.at(b.len() - 1).seq, true
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
