package table

// packed.go holds a manifest's fragments in byte slices while nothing
// reads them: a quiet dataset's head. A resident head costs its Fragment
// structs, their encodings in separate allocations and two tries (lookup
// by id, scan order); packed, it costs the encodings back to back and a
// few bytes per fragment, compressed with zstd (fastest level) when that
// is smaller: a fragment's encoding repeats its neighbours' field lists,
// versions and path layout, and a path's hex digits take half their
// bytes. The first read decodes it, once, into fragments equal to the
// packed ones in every respect: ids, rows, deleted rows, parts, wire
// form and sequence keys (TestPackedManifestRoundTrip).
//
// The packed fragments are a few chunks, each packed on its own, with
// what an append needs to know about them (packedFrags), followed by a
// resident tail: the fragments appended since. An Append onto a packed
// head keeps the chunks as they are and adds to the tail (Builder), and
// packing such a manifest again packs only the tail, into a new chunk,
// merging the newest chunks when they get small next to their
// predecessors: a head of n fragments is at most a few chunks, and a
// fragment is compressed again a few times over its life, not at every
// append (TestPackedAppends).

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/klauspost/compress/zstd"
)

// packCodec is the zstd encoder and decoder every packed manifest
// shares; both are safe for concurrent use. Made at the first Packed.
var packCodec = sync.OnceValues(func() (*zstd.Encoder, *zstd.Decoder) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(2), zstd.WithLowerEncoderMem(true))
	if err != nil {
		panic("table: zstd encoder: " + err.Error()) // fixed options: cannot happen
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderLowmem(true)) // one per core: deciders decode
	if err != nil {
		panic("table: zstd decoder: " + err.Error())
	}
	return enc, dec
})

// packedChunk is fragments packed together: their appendPacked forms
// back to back, the first one's key delta counted from the last
// fragment before the chunk, so that chunks put one after another are
// the packed form of all their fragments. Never modified; manifests
// share it.
type packedChunk struct {
	n      int    // fragments
	size   int    // bytes of the packed form
	enc    []byte // the packed form, zstd-compressed when zipped
	zipped bool
}

// packedFrags is a run of packed chunks and what appending to them
// needs: the count, the highest id and key, the feature counts. Never
// modified; manifests share it.
type packedFrags struct {
	chunks   []*packedChunk
	n        int            // fragments in all chunks
	maxID    uint64         // highest fragment id (when n > 0)
	maxIDSeq uint64         // the sequence key of the fragment with maxID
	lastSeq  uint64         // highest sequence key (0 when n is 0)
	count    fragmentCounts // of the packed fragments (none kept decoded)
	held     int            // bytes the chunks hold
}

// packedList is a fragment list held packed: the fragments of pre, then
// those of tail, until first read. tail's ids are above pre's and its
// keys after pre's.
// Both lists are pointers, nil while empty or not built: every quiet
// head is a packedList, and most have no tail.
type packedList struct {
	pre     *packedFrags
	tail    *fragmentList // nil when no fragment follows pre's
	once    sync.Once
	decoded atomic.Bool   // list is built
	list    *fragmentList // set by decode
}

// noFragments is the empty list a packedList without a tail reads as.
var noFragments fragmentList

// tailList returns p's tail, the empty list when it has none. Callers
// must not modify it.
func (p *packedList) tailList() *fragmentList {
	if p.tail == nil {
		return &noFragments
	}
	return p.tail
}

// newPackedList returns pre followed by tail.
func newPackedList(pre *packedFrags, tail fragmentList) *packedList {
	p := &packedList{pre: pre}
	if tail.byID.Len() > 0 {
		p.tail = &tail
	}
	return p
}

// Chunk merging: a new chunk is merged into the one before it while that
// one has at most mergeRatio times its fragments, and a run longer than
// maxChunks is merged into one (with mergeRatio 4 that takes a table of
// about 4^maxChunks fragments).
const (
	mergeRatio = 4
	maxChunks  = 8
	// minZipped is the packed size below which a chunk is not offered to
	// zstd: a fragment or two, which it does not make smaller.
	minZipped = 256
)

// Packed returns a manifest equal to m whose fragments are held packed
// until one is read, which decodes them, once: a pass that builds the
// fragment map and scan order as FromProto does, without encoding a
// message (BenchmarkPackedHead). A manifest with packed fragments (a
// packed one, or one appended to a packed one) keeps its chunks and
// packs only the fragments after them. Packed returns m itself when
// m is packed (not read) with nothing after its chunks, or has a
// fragment kept decoded (one whose message cannot be encoded) that it
// would pack.
// m is not changed, and the two share everything but their fragments.
func (m *Manifest) Packed() *Manifest {
	if !m.Packable() {
		return m
	}
	var pre *packedFrags
	if p := m.packed; p != nil {
		pre = p.pre.with(p.tailList())
	} else {
		pre = (&packedFrags{}).with(&m.frags)
	}
	c := *m
	c.frags = fragmentList{}
	c.packed = newPackedList(pre, fragmentList{})
	return &c
}

// Packable reports whether Packed would pack m: it is not packed
// with nothing after its chunks, and has no fragment kept decoded
// among those Packed packs.
func (m *Manifest) Packable() bool {
	p := m.packed
	if p == nil {
		return m.frags.count.decoded == 0
	}
	if p.tailList().count.decoded > 0 {
		return false
	}
	return p.decoded.Load() || p.tailList().byID.Len() > 0
}

// IsPacked reports whether m holds its fragments packed, not yet read
// (fragments appended since it was packed may be resident).
func (m *Manifest) IsPacked() bool { return m.packed != nil && !m.packed.decoded.Load() }

// PackedChunks returns the number of chunks m's packed fragments are
// in (0 when m is not packed).
func (m *Manifest) PackedChunks() int {
	if !m.IsPacked() {
		return 0
	}
	return len(m.packed.pre.chunks)
}

// with returns f followed by l's fragments, which come after f's in
// scan order and have higher ids, as a new run: l packed into a chunk
// of its own, merged with f's last chunks as the merge rule says.
func (f *packedFrags) with(l *fragmentList) *packedFrags {
	if l.byID.Len() == 0 {
		return f
	}
	g := *f
	prev := f.lastSeq
	size := 0
	l.order.All(func(seq uint64, id uint64) bool {
		e, _ := l.byID.Get(id)
		size += packedSize(e.frag, seq-prev)
		prev = seq
		return true
	})
	b := make([]byte, 0, size)
	prev = f.lastSeq
	l.order.All(func(seq uint64, id uint64) bool {
		e, _ := l.byID.Get(id)
		b = appendPacked(b, e.frag, seq-prev)
		prev = seq
		return true
	})
	maxID, last, _ := l.byID.MaxEntry()
	g.n += l.byID.Len()
	g.maxID, g.maxIDSeq = maxID, last.seq
	g.lastSeq, _ = l.order.Max()
	g.count = g.count.plus(l.count, 1)
	chunks := slices.Clip(f.chunks)
	n := l.byID.Len()
	// Merge the new fragments with the last chunks while those are not
	// much larger, or with all of them when there are too many.
	k := len(chunks)
	for k > 0 && chunks[k-1].n <= mergeRatio*n {
		k--
		n += chunks[k].n
	}
	if k > 0 && k+1 > maxChunks {
		k = 0
	}
	if k < len(chunks) {
		b = slices.Concat(unpackChunks(chunks[k:]), b)
	}
	g.chunks = append(chunks[:k:k], newChunk(b, g.n-countOf(chunks[:k])))
	g.held = 0
	for _, c := range g.chunks {
		g.held += cap(c.enc)
	}
	return &g
}

func countOf(chunks []*packedChunk) int {
	n := 0
	for _, c := range chunks {
		n += c.n
	}
	return n
}

// newChunk makes a chunk of the packed form b of n fragments,
// compressed when that is smaller.
func newChunk(b []byte, n int) *packedChunk {
	c := &packedChunk{n: n, size: len(b), enc: b}
	if len(b) >= minZipped {
		enc, _ := packCodec()
		if z := enc.EncodeAll(b, nil); len(z) < len(b) {
			c.enc, c.zipped = append(make([]byte, 0, len(z)), z...), true // exactly its length: it stays
		}
	}
	if !c.zipped && cap(c.enc) != len(c.enc) {
		c.enc = slices.Clip(append(make([]byte, 0, len(b)), b...))
	}
	return c
}

// unpack returns c's packed form, decompressed.
func (c *packedChunk) unpack(dst []byte) []byte {
	if !c.zipped {
		return append(dst, c.enc...)
	}
	_, dec := packCodec()
	n := len(dst)
	b, err := dec.DecodeAll(c.enc, dst)
	if err != nil || len(b)-n != c.size {
		panic("table: packed fragments do not decompress") // newChunk compressed them: cannot happen
	}
	return b
}

// unpackChunks returns the packed forms of chunks one after another.
func unpackChunks(chunks []*packedChunk) []byte {
	size := 0
	for _, c := range chunks {
		size += c.size
	}
	b := make([]byte, 0, size)
	for _, c := range chunks {
		b = c.unpack(b)
	}
	return b
}

// appendPacked appends f, dseq after the previous fragment's sequence
// key: the key delta, id, rows, deleted rows, parts and wire form.
func appendPacked(b []byte, f *Fragment, dseq uint64) []byte {
	b = binary.AppendUvarint(b, dseq)
	b = binary.AppendUvarint(b, f.id)
	b = binary.AppendUvarint(b, f.rows)
	b = binary.AppendUvarint(b, f.deleted)
	b = append(b, byte(f.has))
	b = binary.AppendUvarint(b, uint64(len(f.enc)))
	return append(b, f.enc...)
}

// packedSize is the length appendPacked appends.
func packedSize(f *Fragment, dseq uint64) int {
	n := len(f.enc)
	return uvarintLen(dseq) + uvarintLen(f.id) + uvarintLen(f.rows) + uvarintLen(f.deleted) + 1 + uvarintLen(uint64(n)) + n
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// list returns m's fragment list, decoding a packed one at its first use.
func (m *Manifest) list() *fragmentList {
	p := m.packed
	if p == nil {
		return &m.frags
	}
	return p.decodedList()
}

// decodedList returns p's fragments, decoding them at the first call.
func (p *packedList) decodedList() *fragmentList {
	p.once.Do(p.decode)
	return p.list
}

// maxListedID returns the highest id of m's fragments, if it has any,
// without decoding packed ones.
func (m *Manifest) maxListedID() (uint64, bool) {
	p := m.packed
	if p == nil || p.decoded.Load() {
		return m.list().byID.Max()
	}
	if id, ok := p.tailList().byID.Max(); ok {
		return id, true
	}
	return p.pre.maxID, p.pre.n > 0
}

// residentFragment returns m's fragment with the given id when m holds
// it as a Fragment already: every fragment, unless m is packed and not
// yet read, and then only the fragments appended since it was packed
// (ChangeIndex.ReplaceHead: a history entry that is a packed fragment,
// decoded by a manifest sharing the chunk, keeps that fragment instead
// of standing for the head's; it answers the same).
func (m *Manifest) residentFragment(id uint64) (*Fragment, bool) {
	if p := m.packed; p != nil && !p.decoded.Load() {
		if p.pre.n > 0 && id <= p.pre.maxID {
			return nil, false
		}
		e, ok := p.tailList().byID.Get(id)
		return e.frag, ok
	}
	return m.Fragment(id)
}

// PackedBytes returns the bytes m holds its fragments in while packed
// (0 when it is not packed): its chunks and the encodings of the
// fragments after them.
func (m *Manifest) PackedBytes() int {
	if !m.IsPacked() {
		return 0
	}
	n := m.packed.pre.held
	tail := m.packed.tailList()
	tail.order.All(func(_ uint64, id uint64) bool {
		e, _ := tail.byID.Get(id)
		n += e.frag.EncodedSize()
		return true
	})
	return n
}

// decode builds the list from its packed form, then adds the tail. The
// fragments are one array and, in an uncompressed chunk, their
// encodings share the chunk's bytes; a compressed chunk is decompressed
// into one buffer they share: decoding allocates little beyond the
// tries.
func (p *packedList) decode() {
	frags := make([]Fragment, p.pre.n)
	var l fragmentList
	seq, i := uint64(0), 0
	for _, c := range p.pre.chunks {
		b := c.enc
		if c.zipped {
			b = c.unpack(make([]byte, 0, c.size))
		}
		for range c.n {
			var d, n uint64
			f := &frags[i]
			i++
			d, b = packedUvarint(b)
			f.id, b = packedUvarint(b)
			f.rows, b = packedUvarint(b)
			f.deleted, b = packedUvarint(b)
			if len(b) == 0 {
				panic("table: packed fragments end early")
			}
			f.has, b = parts(b[0]), b[1:]
			n, b = packedUvarint(b)
			if uint64(len(b)) < n {
				panic("table: packed fragments end early")
			}
			f.enc, b = b[:n:n], b[n:]
			seq += d
			l = l.add(f, seq)
		}
		if len(b) != 0 {
			panic("table: packed fragments have bytes left over")
		}
	}
	if i != len(frags) {
		panic("table: packed fragments miscounted")
	}
	tail := p.tailList()
	tail.order.All(func(seq uint64, id uint64) bool {
		e, _ := tail.byID.Get(id)
		l = l.add(e.frag, seq)
		return true
	})
	p.list = &l
	p.decoded.Store(true)
}

// packedUvarint reads one varint of a packed list, which appendPacked
// wrote: a malformed one cannot occur.
func packedUvarint(b []byte) (uint64, []byte) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		panic("table: packed fragments do not decode")
	}
	return v, b[n:]
}
