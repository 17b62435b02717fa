package decide

// idset.go is the set of decided transaction ids, which every decision
// looks up once and, almost always, adds to.
//
// Ids are uuids nearly always, kept as 16 bytes; anything else is kept as
// a string in a plain map. The uuids of a busy dataset number hundreds of
// thousands, and a hash map that large costs a cache (and TLB) miss on
// every insert, about half a microsecond: a sixth of a decision. So the
// uuids are kept as a small log-structured set instead:
//
//   - pending, the latest adds: appended in order, with a small
//     open-addressed index of where each is, which stays in cache (a Go
//     map of as many 16-byte keys is several times larger, and its
//     inserts missed the cache);
//   - runs, sorted arrays of the older ones, each more than twice as long
//     as the next. When pending is full its keys are sorted into a new
//     run, merged with every run not longer than it: sequential reads and
//     writes, a few nanoseconds per key, each key merged O(log n) times;
//   - gone, the uuids removed (a rolled-back decision) while in a run:
//     rare, and dropped from the runs at the next flush;
//   - a filter of a few bits per uuid in front of all of it. Most uuids
//     looked up are new; one whose bit is clear is answered at once. Bits
//     are set by every add and never cleared (a removed uuid costs a
//     search, never a wrong answer); the filter is rebuilt, twice as
//     large, when the set outgrows it.
//
// A lookup the filter lets through (a uuid decided before, or one new
// uuid in tens) searches pending and then each run, starting where a
// uniformly random key would sit (random uuids are uniform) and widening
// from there: a few cache lines for random uuids, a binary search for
// any others. TestIDSetMatchesMap checks the set against a Go map.

import (
	"cmp"
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"slices"
)

// idPending is how many uuids pending holds before they become a run.
const idPending = 4096

// Bits of filter per uuid: between idFilterBits and twice that, three
// bits per uuid in one word let through about 1 % of the uuids not in the
// set (TestIDSetFilterRate).
const idFilterBits = 16

// idKey is a uuid as two big-endian words: ordered as its bytes are.
type idKey struct{ hi, lo uint64 }

func keyOf(k [16]byte) idKey {
	return idKey{binary.BigEndian.Uint64(k[:8]), binary.BigEndian.Uint64(k[8:])}
}

func (k idKey) bytes() (b [16]byte) {
	binary.BigEndian.PutUint64(b[:8], k.hi)
	binary.BigEndian.PutUint64(b[8:], k.lo)
	return b
}

func cmpKey(a, b idKey) int {
	if a.hi != b.hi {
		return cmp.Compare(a.hi, b.hi)
	}
	return cmp.Compare(a.lo, b.lo)
}

// idSet holds decided transaction ids (see the file comment).
type idSet struct {
	pending pendingSet
	runs    [][]idKey           // sorted, no key twice, longest first
	gone    map[idKey]struct{}  // nil until a uuid in a run is removed
	n       int                 // uuids in the set: pending, plus runs, minus gone
	s       map[string]struct{} // nil until an id that is not a uuid is added
	seen    []uint64            // the filter: both bits of every key in the set are set
	shift   uint                // 64 - log2 of the filter's words
}

func newIDSet() idSet {
	return idSet{pending: newPendingSet()}
}

// filterBits returns k's word in a filter of 1<<(64-shift) words and
// the three bits it sets there.
func filterBits(k idKey, shift uint) (word uint64, mask uint64) {
	x := (k.hi ^ bits.RotateLeft64(k.lo, 29)) * 0x9e3779b97f4a7c15
	return x >> shift, 1<<(x>>14&63) | 1<<(x>>20&63) | 1<<(x>>26&63) // the product's middle bits: well mixed
}

func (d *idSet) mayHave(k idKey) bool {
	if d.seen == nil {
		return true
	}
	w, m := filterBits(k, d.shift)
	return d.seen[w]&m == m
}

func (d *idSet) hasKey(k idKey) bool {
	if !d.mayHave(k) {
		return false
	}
	if d.pending.has(k) {
		return true
	}
	return d.inRuns(k)
}

// inRuns reports whether k is in a run and not gone.
func (d *idSet) inRuns(k idKey) bool {
	for _, r := range d.runs {
		if _, ok := findKey(r, k); ok {
			return !inMap(d.gone, k)
		}
	}
	return false
}

// addKey adds uuid k.
func (d *idSet) addKey(k idKey) {
	if d.hasKey(k) {
		return
	}
	if _, ok := d.gone[k]; ok {
		delete(d.gone, k) // back in the run it never left
	} else {
		d.pending.add(k)
		if d.pending.len() >= idPending {
			d.flush()
		}
	}
	d.n++
	if d.n*idFilterBits > len(d.seen)*64 {
		d.rebuild()
		return
	}
	w, m := filterBits(k, d.shift)
	d.seen[w] |= m
}

func (d *idSet) removeKey(k idKey) {
	if d.pending.remove(k) {
		d.n--
		return
	}
	if d.inRuns(k) {
		if d.gone == nil {
			d.gone = map[idKey]struct{}{}
		}
		d.gone[k] = struct{}{}
		d.n--
	}
}

// pendingSet holds the uuids added since the last flush, at most
// idPending: keys in the order added, and slots, an open-addressed index
// (linear probing, at most half full) of each key's position in keys,
// plus one (0: empty). At most 16 KiB of slots stay in cache where a map
// missed it; keys are written in sequence. Both grow with the set, so a
// dataset with few decisions keeps little. The hash is seeded per set, so
// no choice of uuids makes them collide.
type pendingSet struct {
	keys  []idKey
	slots []uint16
	seed  maphash.Seed
}

func newPendingSet() pendingSet {
	return pendingSet{slots: make([]uint16, minPendingSlots), seed: maphash.MakeSeed()}
}

// minPendingSlots is the index's size when the set is new: room for
// three uuids, as many as most quiet datasets have decided.
const minPendingSlots = 8

// A position in keys, plus one, fits a slot.
const _ uint16 = idPending

func (p *pendingSet) len() int { return len(p.keys) }

// home returns the slot where k's probe starts.
func (p *pendingSet) home(k idKey) int {
	return int(maphash.Comparable(p.seed, k)) & (len(p.slots) - 1)
}

// find returns k's slot, or the empty slot where it would go.
func (p *pendingSet) find(k idKey) (int, bool) {
	mask := len(p.slots) - 1
	for i := p.home(k); ; i = (i + 1) & mask {
		switch j := p.slots[i]; {
		case j == 0:
			return i, false
		case p.keys[j-1] == k:
			return i, true
		}
	}
}

func (p *pendingSet) has(k idKey) bool {
	_, ok := p.find(k)
	return ok
}

// add adds k, which must not be there, to a set with room for it
// (len() < idPending).
func (p *pendingSet) add(k idKey) {
	if 2*(len(p.keys)+1) > len(p.slots) {
		p.grow()
	}
	i, _ := p.find(k)
	p.keys = append(p.keys, k)
	p.slots[i] = uint16(len(p.keys))
}

// grow doubles the index and puts every key in it again.
func (p *pendingSet) grow() {
	p.slots = make([]uint16, 2*len(p.slots))
	for pos, k := range p.keys {
		i, _ := p.find(k)
		p.slots[i] = uint16(pos + 1)
	}
}

// remove removes k and reports whether it was there. The last key takes
// its place in keys.
func (p *pendingSet) remove(k idKey) bool {
	i, ok := p.find(k)
	if !ok {
		return false
	}
	pos := int(p.slots[i]) - 1
	p.unslot(i)
	last := len(p.keys) - 1
	if pos != last {
		moved := p.keys[last]
		j, _ := p.find(moved)
		p.slots[j] = uint16(pos + 1)
		p.keys[pos] = moved
	}
	p.keys = p.keys[:last]
	return true
}

// unslot empties slot i and moves back the entries after it that could
// not be found past the hole (backward-shift deletion: no tombstones).
func (p *pendingSet) unslot(i int) {
	mask := len(p.slots) - 1
	for j := (i + 1) & mask; p.slots[j] != 0; j = (j + 1) & mask {
		// The entry at j may fill the hole at i if its probe starts
		// cyclically outside (i, j].
		if h := p.home(p.keys[p.slots[j]-1]); (j-h)&mask >= (j-i)&mask {
			p.slots[i] = p.slots[j]
			i = j
		}
	}
	p.slots[i] = 0
}

// reset empties the set, keeping its room.
func (p *pendingSet) reset() {
	p.keys = p.keys[:0]
	clear(p.slots)
}

// flush sorts pending into a run and merges it with the runs not longer
// than it. With removed uuids still in the runs, all runs are merged
// into one without them.
func (d *idSet) flush() {
	r := make([]idKey, d.pending.len())
	sortKeys(d.pending.keys, r)
	d.pending.reset() // keeps its room for the next ones
	if len(d.gone) > 0 {
		for _, old := range slices.Backward(d.runs) { // shortest first
			r = mergeRuns(old, r, d.gone)
		}
		d.runs = append(d.runs[:0], r)
		clear(d.gone)
		return
	}
	for len(d.runs) > 0 && len(d.runs[len(d.runs)-1]) <= len(r) {
		r = mergeRuns(d.runs[len(d.runs)-1], r, nil)
		d.runs = d.runs[:len(d.runs)-1]
	}
	d.runs = append(d.runs, r)
}

// Keys are sorted first by their top idBucketBits bits, which for
// random uuids puts about one key in each bucket, then within buckets.
const idBucketBits = 12

// sortKeys writes ks sorted into out (as long). A counting sort on the top bits does most of
// the work; a bucket of a few keys is finished by insertion, a larger one
// (keys that are not random) by a comparison sort.
func sortKeys(ks, out []idKey) {
	const shift = 64 - idBucketBits
	var start [1<<idBucketBits + 1]int32
	for _, k := range ks {
		start[k.hi>>shift+1]++
	}
	for b := 1; b < len(start); b++ {
		start[b] += start[b-1]
	}
	next := start
	for _, k := range ks {
		b := k.hi >> shift
		out[next[b]] = k
		next[b]++
	}
	for b := range 1 << idBucketBits {
		bucket := out[start[b]:start[b+1]]
		switch {
		case len(bucket) <= 1:
		case len(bucket) <= 16:
			insertionSort(bucket)
		default:
			slices.SortFunc(bucket, cmpKey)
		}
	}
}

func insertionSort(ks []idKey) {
	for i := 1; i < len(ks); i++ {
		for j := i; j > 0 && cmpKey(ks[j], ks[j-1]) < 0; j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
}

// mergeRuns returns the sorted union of sorted a and b, without the keys
// in drop.
func mergeRuns(a, b []idKey, drop map[idKey]struct{}) []idKey {
	out := make([]idKey, len(a)+len(b))
	n := 0
	for len(a) > 0 && len(b) > 0 {
		x, y := a[0], b[0]
		if x.hi < y.hi || x.hi == y.hi && x.lo <= y.lo {
			out[n] = x
			a = a[1:]
			if x == y {
				b = b[1:]
			}
		} else {
			out[n] = y
			b = b[1:]
		}
		n++
	}
	n += copy(out[n:], a)
	n += copy(out[n:], b)
	out = out[:n:n]
	if len(drop) > 0 {
		out = slices.DeleteFunc(out, func(k idKey) bool { return inMap(drop, k) })
	}
	return out
}

// findKey returns where k is, or would be, in sorted run r. It starts
// where k would sit if the keys were uniform (random uuids are), widens
// in doubling steps until k is bracketed, and searches the bracket.
func findKey(r []idKey, k idKey) (int, bool) {
	n := len(r)
	if n == 0 {
		return 0, false
	}
	g, _ := bits.Mul64(k.hi, uint64(n)) // < n
	i := int(g)
	var lo, hi int // the first key ≥ k is at an index in [lo, hi]
	if cmpKey(r[i], k) < 0 {
		lo, hi = widenUp(r, k, i+1)
	} else {
		lo, hi = widenDown(r, k, i)
	}
	p, found := slices.BinarySearchFunc(r[lo:hi], k, cmpKey)
	p += lo
	return p, found || p < n && r[p] == k
}

// widenUp brackets the first key ≥ k in r, knowing every key before
// from is less than k: steps of 1, 2, 4… up from from.
func widenUp(r []idKey, k idKey, from int) (lo, hi int) {
	lo, hi = from, len(r)
	for step := 1; lo+step-1 < len(r); step *= 2 {
		j := lo + step - 1
		if cmpKey(r[j], k) >= 0 {
			return lo, j
		}
		lo = j + 1
	}
	return lo, hi
}

// widenDown brackets the first key ≥ k in r, knowing r[to] ≥ k: steps
// of 1, 2, 4… down from to.
func widenDown(r []idKey, k idKey, to int) (lo, hi int) {
	hi = to
	for step := 1; hi-step >= 0; step *= 2 {
		j := hi - step
		if cmpKey(r[j], k) < 0 {
			return j + 1, hi
		}
		hi = j
	}
	return 0, hi
}

func inMap(m map[idKey]struct{}, k idKey) bool {
	if len(m) == 0 {
		return false
	}
	_, ok := m[k]
	return ok
}

// each calls f with every uuid in the set.
func (d *idSet) each(f func(idKey)) {
	for _, k := range d.pending.keys {
		f(k)
	}
	for _, r := range d.runs {
		for _, k := range r {
			if !inMap(d.gone, k) {
				f(k)
			}
		}
	}
}

// rebuild makes a filter of 2*idFilterBits bits per uuid in the set (at
// least 1024) and sets the bits of each.
func (d *idSet) rebuild() {
	n := uint(bits.Len(uint(max(2*idFilterBits*d.n/64, 16)) - 1)) // log2 of the words, rounded up
	d.seen, d.shift = make([]uint64, 1<<n), 64-n
	d.each(func(k idKey) {
		w, m := filterBits(k, d.shift)
		d.seen[w] |= m
	})
}

func uuidKey(id string) (idKey, bool) {
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
		return idKey{}, false
	}
	var k [2]uint64
	var bad byte // any digit's high bits: not hex, or upper case (keep case-distinct ids distinct)
	for i, at := range uuidBytes {
		hi, lo := lowerHex[id[at]], lowerHex[id[at+1]]
		bad |= hi | lo
		k[i/8] = k[i/8]<<8 | uint64(hi<<4|lo)
	}
	if bad&0xf0 != 0 {
		return idKey{}, false
	}
	return idKey{k[0], k[1]}, true
}

// uuidBytes are the offsets of a uuid's 16 bytes (two hex digits each) in
// its text form.
var uuidBytes = [16]uint8{0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34}

// lowerHex maps a lower-case hex digit to its value, anything else to 0xff.
var lowerHex = func() (t [256]byte) {
	for c := range t {
		switch {
		case '0' <= c && c <= '9':
			t[c] = byte(c - '0')
		case 'a' <= c && c <= 'f':
			t[c] = byte(c - 'a' + 10)
		default:
			t[c] = 0xff
		}
	}
	return t
}()

// decidedID is an id as the set keeps it: its uuid key when it is one,
// else the string (idOf).
type decidedID struct {
	key    idKey
	isUUID bool
	id     string
}

// idOf parses id once, for a lookup and an add of the same id.
func idOf(id string) decidedID {
	k, ok := uuidKey(id)
	return decidedID{key: k, isUUID: ok, id: id}
}

func (d *idSet) hasID(x decidedID) bool {
	if x.isUUID {
		return d.hasKey(x.key)
	}
	_, found := d.s[x.id]
	return found
}

func (d *idSet) addID(x decidedID) {
	if x.isUUID {
		d.addKey(x.key)
		return
	}
	d.addString(x.id)
}

// addString adds id, which is not a uuid.
func (d *idSet) addString(id string) {
	if d.s == nil {
		d.s = map[string]struct{}{}
	}
	d.s[id] = struct{}{}
}

func (d *idSet) Has(id string) bool { return d.hasID(idOf(id)) }

func (d *idSet) add(id string) { d.addID(idOf(id)) }

func (d *idSet) remove(id string) {
	if k, ok := uuidKey(id); ok {
		d.removeKey(k)
		return
	}
	delete(d.s, id)
}

func (d *idSet) len() int { return d.n + len(d.s) }
