package committer

// idset.go holds the decided transaction ids: every id a dataset has a
// decision for, consulted for every staged message (a redelivery is
// acked, not decided again) and extended by every decision. A dataset
// that has decided a million transactions holds a million ids, so a
// lookup that misses and the insert after it are the set's whole cost:
// uuids (almost every id) live in uuidSet, a table built for 16-byte
// keys, other ids in a map.

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
)

// idSet holds decided transaction ids; uuids are stored as 16 bytes.
type idSet struct {
	u *uuidSet
	s map[string]struct{}
}

func newIDSet() idSet { return idSet{u: newUUIDSet(), s: map[string]struct{}{}} }

func (d idSet) has(id string) bool {
	if k, ok := uuidKey(id); ok {
		return d.u.has(k)
	}
	_, found := d.s[id]
	return found
}

func (d idSet) add(id string) {
	if k, ok := uuidKey(id); ok {
		d.u.add(k)
		return
	}
	d.s[id] = struct{}{}
}

func (d idSet) remove(id string) {
	if k, ok := uuidKey(id); ok {
		d.u.remove(k)
		return
	}
	delete(d.s, id)
}

func (d idSet) len() int { return d.u.len() + len(d.s) }

func uuidKey(id string) ([16]byte, bool) {
	var k [16]byte
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
		return k, false
	}
	for i, at := range uuidBytes {
		hi, lo := lowerHex[id[at]], lowerHex[id[at+1]]
		if (hi|lo)&0xf0 != 0 {
			return [16]byte{}, false // not hex, or upper case: keep case-distinct ids distinct
		}
		k[i] = hi<<4 | lo
	}
	return k, true
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

// uuidSet is a set of 16-byte keys: open addressing with linear probing,
// split into segments the way extendible hashing splits buckets, so that
// growing never rehashes the whole set at once (a pause proportional to
// every id ever decided) but one segment of at most maxSegSlots slots
// (past 1<<maxSetDepth segments, some 50 million ids, segments grow
// larger instead of splitting further).
//
// A key's hash picks its segment by its top bits (dir is indexed by the
// top depth bits; a segment of local depth d < depth fills the 2^(depth-d)
// consecutive entries that share its top d bits) and its home slot by
// its low bits. Within a segment a key sits at its home slot or after it,
// with no empty slot between (linear probing): a lookup reads one cache
// line or two, where a Go map at this size reads its directory, a table
// and a group's control word before the slot.
//
// The all-zero key marks an empty slot, so that key itself is kept as a
// flag. The hash is keyed by random seeds drawn when the set is made: a
// producer choosing its uuids cannot make them collide on purpose.
type uuidSet struct {
	seed  [3]uint64
	dir   []*uuidSegment
	depth uint // global depth: dir has 1<<depth entries
	n     int
	zero  bool // the all-zero key is in the set
}

// uuidSegment is one open-addressing table of a uuidSet.
type uuidSegment struct {
	depth uint       // local depth: its keys share their top depth hash bits
	n     int        // keys held
	slots []uuidPair // a power of two long; uuidPair{} is empty
}

// uuidPair is a 16-byte key as two words.
type uuidPair [2]uint64

const (
	minSegSlots = 8    // a new set's one segment: small datasets stay small
	maxSegSlots = 1024 // 16 KiB; a full segment beyond this splits in two
	maxSetDepth = 16   // a segment this deep grows instead of splitting (dir ≤ 512 KiB)
)

func newUUIDSet() *uuidSet {
	return &uuidSet{seed: [3]uint64{rand.Uint64(), rand.Uint64(), rand.Uint64()}}
}

func pairOf(k [16]byte) uuidPair {
	return uuidPair{binary.LittleEndian.Uint64(k[:8]), binary.LittleEndian.Uint64(k[8:])}
}

func (p uuidPair) bytes() (k [16]byte) {
	binary.LittleEndian.PutUint64(k[:8], p[0])
	binary.LittleEndian.PutUint64(k[8:], p[1])
	return k
}

// hash mixes p with the set's seeds: two 64×64→128-bit multiplications,
// each folding its high half into its low half.
func (s *uuidSet) hash(p uuidPair) uint64 {
	hi, lo := bits.Mul64(p[0]^s.seed[0], p[1]^s.seed[1])
	hi, lo = bits.Mul64(hi^s.seed[2], lo^0x9e3779b97f4a7c15)
	return hi ^ lo
}

// segment returns the segment of hash h.
func (s *uuidSet) segment(h uint64) *uuidSegment {
	if s.depth == 0 {
		return s.dir[0]
	}
	return s.dir[h>>(64-s.depth)]
}

// find returns the slot holding p in g, or the empty slot ending its run
// (found false).
func (g *uuidSegment) find(p uuidPair, h uint64) (int, bool) {
	mask := uint64(len(g.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch g.slots[i] {
		case p:
			return int(i), true
		case uuidPair{}:
			return int(i), false
		}
	}
}

func (s *uuidSet) has(k [16]byte) bool {
	p := pairOf(k)
	if p == (uuidPair{}) {
		return s.zero
	}
	if s.dir == nil {
		return false
	}
	h := s.hash(p)
	_, found := s.segment(h).find(p, h)
	return found
}

func (s *uuidSet) add(k [16]byte) {
	p := pairOf(k)
	if p == (uuidPair{}) {
		if !s.zero {
			s.zero = true
			s.n++
		}
		return
	}
	if s.dir == nil {
		s.dir = []*uuidSegment{{slots: make([]uuidPair, minSegSlots)}}
	}
	h := s.hash(p)
	g := s.segment(h)
	i, found := g.find(p, h)
	if found {
		return
	}
	g.slots[i] = p
	g.n++
	s.n++
	if 4*g.n > 3*len(g.slots) {
		s.grow(g, h)
	}
}

// grow makes room in g (more than three quarters full), which holds hash
// h: doubled while small, split in two once at maxSegSlots.
func (s *uuidSet) grow(g *uuidSegment, h uint64) {
	if len(g.slots) < maxSegSlots || g.depth >= maxSetDepth {
		old := g.slots
		g.slots = make([]uuidPair, 2*len(old))
		s.refill(old, g)
		return
	}
	if g.depth == s.depth {
		dir := make([]*uuidSegment, 2*len(s.dir))
		for i, e := range s.dir {
			dir[2*i], dir[2*i+1] = e, e
		}
		s.dir, s.depth = dir, s.depth+1
	}
	// g's entries in dir share the hash's top g.depth bits: the first
	// half of them goes to lo (next bit 0), the second half to hi.
	d := g.depth + 1
	lo := &uuidSegment{depth: d, slots: make([]uuidPair, len(g.slots))}
	hi := &uuidSegment{depth: d, slots: make([]uuidPair, len(g.slots))}
	span := uint64(1) << (s.depth - g.depth)
	first := (h >> (64 - s.depth)) &^ (span - 1)
	for i := range span {
		if i < span/2 {
			s.dir[first+i] = lo
		} else {
			s.dir[first+i] = hi
		}
	}
	s.refill(g.slots, nil)
}

// refill inserts the keys of slots, no longer in the set's tables, into
// to, or into their segments when to is nil. A refilled segment's count
// is its keys.
func (s *uuidSet) refill(slots []uuidPair, to *uuidSegment) {
	if to != nil {
		to.n = 0
	}
	for _, p := range slots {
		if p == (uuidPair{}) {
			continue
		}
		h := s.hash(p)
		g := to
		if g == nil {
			g = s.segment(h)
		}
		i, _ := g.find(p, h)
		g.slots[i] = p
		g.n++
	}
}

func (s *uuidSet) remove(k [16]byte) {
	p := pairOf(k)
	if p == (uuidPair{}) {
		if s.zero {
			s.zero = false
			s.n--
		}
		return
	}
	if s.dir == nil {
		return
	}
	h := s.hash(p)
	g := s.segment(h)
	i, found := g.find(p, h)
	if !found {
		return
	}
	// Backward shift: move each later key of the run that may sit at i
	// (its home is not in (i, j]) into the hole, so that no key is left
	// behind an empty slot.
	mask := len(g.slots) - 1
	for j := (i + 1) & mask; g.slots[j] != (uuidPair{}); j = (j + 1) & mask {
		home := int(s.hash(g.slots[j])) & mask
		if (j-home)&mask >= (j-i)&mask {
			g.slots[i] = g.slots[j]
			i = j
		}
	}
	g.slots[i] = uuidPair{}
	g.n--
	s.n--
}

func (s *uuidSet) len() int { return s.n }

// appendTo appends the set's keys to ks, in no particular order.
func (s *uuidSet) appendTo(ks [][16]byte) [][16]byte {
	if s.zero {
		ks = append(ks, [16]byte{})
	}
	for i := 0; i < len(s.dir); {
		g := s.dir[i]
		for _, p := range g.slots {
			if p != (uuidPair{}) {
				ks = append(ks, p.bytes())
			}
		}
		i += 1 << (s.depth - g.depth)
	}
	return ks
}
