package table

// packed.go holds a manifest's fragments in one byte slice while nothing
// reads them: a quiet dataset's head. A resident head costs its Fragment
// structs, their encodings in separate allocations and two tries (lookup
// by id, scan order); packed, it costs the encodings back to back and a
// few bytes per fragment, compressed with zstd (fastest level) when that
// is smaller: a fragment's encoding repeats its neighbours' field lists,
// versions and path layout, and a path's hex digits take half their
// bytes. The first read decodes it, once, into fragments equal to the
// packed ones in every respect: ids, rows, deleted rows, parts, wire
// form and sequence keys (TestPackedManifestRoundTrip).

import (
	"encoding/binary"
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

// packedList is a fragment list in its packed form until first read.
type packedList struct {
	once    sync.Once
	decoded atomic.Bool // list is built
	n       int         // fragments
	size    int         // bytes of the packed form
	enc     []byte      // the packed form (appendPacked), zstd-compressed when zipped; nil once decoded
	zipped  bool
	held    int // cap(enc) before decoding
	list    fragmentList
}

// Packed returns a manifest equal to m whose fragments are held packed
// until one is read, which decodes them, once: a pass that builds the
// fragment map and scan order as FromProto does, without encoding a
// message (BenchmarkPackedHead). It returns m itself when m is packed already or
// has a fragment kept decoded (one whose message cannot be encoded).
// m is not changed, and the two share everything but their fragments.
func (m *Manifest) Packed() *Manifest {
	if m.IsPacked() {
		return m
	}
	l := m.list()
	if l.count.decoded > 0 {
		return m
	}
	size, prev := 0, uint64(0)
	l.order.All(func(seq uint64, id uint64) bool {
		e, _ := l.byID.Get(id)
		size += packedSize(e.frag, seq-prev)
		prev = seq
		return true
	})
	b := make([]byte, 0, size)
	prev = 0
	l.order.All(func(seq uint64, id uint64) bool {
		e, _ := l.byID.Get(id)
		b = appendPacked(b, e.frag, seq-prev)
		prev = seq
		return true
	})
	pl := &packedList{n: l.byID.Len(), size: len(b), enc: b}
	enc, _ := packCodec()
	if z := enc.EncodeAll(b, nil); len(z) < len(b) {
		pl.enc, pl.zipped = append(make([]byte, 0, len(z)), z...), true // exactly its length: it stays
	}
	pl.held = cap(pl.enc)
	p := *m
	p.frags = fragmentList{}
	p.packed = pl
	return &p
}

// Packable reports whether Packed would pack m: it is not packed
// already and has no fragment kept decoded.
func (m *Manifest) Packable() bool { return !m.IsPacked() && m.list().count.decoded == 0 }

// IsPacked reports whether m holds its fragments packed, not yet read.
func (m *Manifest) IsPacked() bool { return m.packed != nil && !m.packed.decoded.Load() }

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
	p.once.Do(p.decode)
	return &p.list
}

// PackedBytes returns the bytes m holds its fragments in while packed
// (0 when it is not packed).
func (m *Manifest) PackedBytes() int {
	if !m.IsPacked() {
		return 0
	}
	return m.packed.held
}

// decode builds the list from its packed form. The fragments are one
// array and their encodings share the packed bytes: decoding allocates
// little beyond the tries.
func (p *packedList) decode() {
	b := p.enc
	if p.zipped {
		_, dec := packCodec()
		var err error
		if b, err = dec.DecodeAll(p.enc, make([]byte, 0, p.size)); err != nil || len(b) != p.size {
			panic("table: packed fragments do not decompress") // Packed compressed them: cannot happen
		}
	}
	frags := make([]Fragment, p.n)
	var l fragmentList
	seq := uint64(0)
	for i := range frags {
		var d, n uint64
		f := &frags[i]
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
	p.list, p.enc = l, nil
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
