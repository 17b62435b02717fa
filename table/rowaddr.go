package table

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"

	"github.com/RoaringBitmap/roaring/v2"
)

// RowSet selects physical rows of fragments: fragment id → offsets of the
// selected rows within the fragment. A nil bitmap selects the whole
// fragment, whatever its length; a fragment that is not a key is not
// selected at all.
//
// Its byte form is Lance's RowAddrTreeMap (see DecodeRowAddrTreeMap), the
// form a worker uses to say which rows it read.
type RowSet map[uint32]*roaring.Bitmap

// DecodeRowAddrTreeMap decodes Lance's RowAddrTreeMap serialization:
//
//	u32 LE  number of entries
//	per entry, in strictly ascending fragment id:
//	  u32 LE  fragment id
//	  u32 LE  byte length n
//	  n bytes: a portable 32-bit roaring bitmap of physical offsets
//	           (n = 0 selects the whole fragment)
//
// It rejects truncated input, trailing bytes, fragment ids out of order or
// repeated, bitmaps that fail DecodeBitmap or do not fill their declared
// length, and a present but empty bitmap (a writer that meant "no rows"
// leaves the fragment out). Errors wrap ErrMalformed and name the fragment.
func DecodeRowAddrTreeMap(b []byte) (RowSet, error) {
	const op = "decode row address map"
	if len(b) < 4 {
		return nil, errorf(op, ErrMalformed, "truncated: %d bytes, want at least 4", len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	rest := b[4:]
	// Every entry takes at least 8 bytes, which bounds the map we allocate.
	if uint64(n) > uint64(len(rest))/8 {
		return nil, errorf(op, ErrMalformed, "%d entries cannot fit in %d bytes", n, len(rest))
	}
	s := make(RowSet, n)
	var prev uint32
	for i := range n {
		if len(rest) < 8 {
			return nil, errorf(op, ErrMalformed, "entry %d truncated", i)
		}
		frag := binary.LittleEndian.Uint32(rest)
		size := binary.LittleEndian.Uint32(rest[4:])
		rest = rest[8:]
		if i > 0 && frag <= prev {
			if frag == prev {
				return nil, errorf(op, ErrMalformed, "fragment %d appears twice", frag)
			}
			return nil, errorf(op, ErrMalformed, "fragment %d follows fragment %d: ids must ascend", frag, prev)
		}
		prev = frag
		if uint64(size) > uint64(len(rest)) {
			return nil, errorf(op, ErrMalformed, "fragment %d: bitmap length %d overruns input (%d bytes left)", frag, size, len(rest))
		}
		if size == 0 {
			s[frag] = nil
			continue
		}
		bm, err := decodeBitmap(rest[:size])
		if err != "" {
			return nil, errorf(op, ErrMalformed, "fragment %d: %s", frag, err)
		}
		if bm.IsEmpty() {
			return nil, errorf(op, ErrMalformed, "fragment %d: explicitly empty bitmap", frag)
		}
		s[frag] = bm
		rest = rest[size:]
	}
	if len(rest) != 0 {
		return nil, errorf(op, ErrMalformed, "%d trailing bytes after %d entries", len(rest), n)
	}
	return s, nil
}

// AppendRowAddrTreeMap appends the RowAddrTreeMap form of s to dst and
// returns the extended slice. The output is a function of the selected
// rows alone: entries are in ascending fragment id and every bitmap is
// written run-optimized, so equal sets give equal bytes. An entry with an
// empty (non-nil) bitmap selects nothing and is left out. s is not modified.
func (s RowSet) AppendRowAddrTreeMap(dst []byte) []byte {
	ids := make([]uint32, 0, len(s))
	for id, bm := range s {
		if bm != nil && bm.IsEmpty() {
			continue
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(ids)))
	for _, id := range ids {
		dst = binary.LittleEndian.AppendUint32(dst, id)
		bm := s[id]
		if bm == nil {
			dst = binary.LittleEndian.AppendUint32(dst, 0)
			continue
		}
		enc := canonicalBitmapBytes(bm)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(enc)))
		dst = append(dst, enc...)
	}
	return dst
}

// MarshalRowAddrTreeMap returns the RowAddrTreeMap form of s; see
// AppendRowAddrTreeMap.
func (s RowSet) MarshalRowAddrTreeMap() []byte {
	return s.AppendRowAddrTreeMap(nil)
}

// canonicalBitmapBytes returns the portable serialization of a
// run-optimized copy of bm.
func canonicalBitmapBytes(bm *roaring.Bitmap) []byte {
	c := bm.Clone()
	c.RunOptimize()
	enc, err := c.ToBytes()
	if err != nil {
		// Serializing to memory cannot fail.
		panic("table: serialize roaring bitmap: " + err.Error())
	}
	return enc
}

// DecodeBitmap decodes a portable 32-bit roaring bitmap (the format of
// https://github.com/RoaringBitmap/RoaringFormatSpec, as Lance writes for
// deletion files, overlay coverage, updated offsets and preconditions). The
// input must be exactly one bitmap: trailing bytes are an error. An empty
// bitmap is valid here; callers for which "empty" is meaningless reject it.
//
// The input is checked completely before the roaring library sees it, so
// hostile bytes yield an error wrapping ErrMalformed and never a panic or a
// bitmap that breaks the library's invariants. The result does not alias b.
//
// Decoding is linear in len(b), but the result is not bounded by it: run
// containers describe 65536 values in 4 bytes, so under a MiB of input can
// hold all 2^32 values. Callers bound their work by the cardinality or by
// the fragment's length, never by iterating blindly.
func DecodeBitmap(b []byte) (*roaring.Bitmap, error) {
	bm, err := decodeBitmap(b)
	if err != "" {
		return nil, errorf("decode bitmap", ErrMalformed, "%s", err)
	}
	return bm, nil
}

// decodeBitmap validates b and decodes it, returning a description of what
// is wrong instead of an error so callers can add context.
//
// roaring's own deserializer trusts its input: it reads container contents
// without checking order, overlap, cardinality or range, and its Validate
// compares every pair of runs in a run container (quadratic: some 5·10^8
// steps for one 128 KiB container). So checkBitmap checks the
// whole format in one linear pass first, at least as strictly as Validate,
// and roaring only ever decodes well-formed bytes. No recover is needed:
// roaring's reader indexes nothing beyond what checkBitmap has proven to be
// present.
func decodeBitmap(b []byte) (*roaring.Bitmap, string) {
	card, msg := checkBitmap(b)
	if msg != "" {
		return nil, msg
	}
	bm := roaring.New()
	// Reading from an io.Reader (rather than FromBuffer or FromUnsafeBytes)
	// makes roaring copy what it reads, so bm does not alias b.
	n, err := bm.ReadFrom(bytes.NewReader(b))
	if err != nil {
		return nil, "roaring: " + err.Error()
	}
	// Both cannot fail after checkBitmap; they guard against a roaring
	// release that reads the format differently.
	if n != int64(len(b)) {
		return nil, fmt.Sprintf("roaring read %d of %d bytes", n, len(b))
	}
	if bm.GetCardinality() != card {
		return nil, "roaring's cardinality disagrees with the serialized containers"
	}
	return bm, ""
}

// Constants of the portable roaring format.
const (
	cookieNoRuns     = 12346 // u32 cookie, then u32 container count
	cookieRuns       = 12347 // u16 cookie, u16 count-1, then the is-run bitmap
	noOffsetMinCount = 4     // with runs, an offset header only from 4 containers
	arrayMaxCard     = 4096  // larger non-run containers are 8 KiB bitsets
	bitsetBytes      = 8192
)

// checkBitmap checks that b is exactly one well-formed portable roaring
// bitmap and returns its cardinality, or a description of the problem.
// Beyond the layout itself it requires what a correct writer always
// produces: container keys strictly ascending; array values strictly
// ascending; bitset cardinality equal to its population count; runs
// non-empty, in range, ascending and neither overlapping nor touching;
// each header cardinality equal to the container's; offset headers, when
// present, pointing at the containers.
func checkBitmap(b []byte) (uint64, string) {
	r := reader{b: b}
	cookie, ok := r.u32()
	if !ok {
		return 0, fmt.Sprintf("truncated: %d bytes, want at least 4", len(b))
	}
	var (
		count  int
		isRun  []byte
		hasOff bool
	)
	switch {
	case cookie == cookieNoRuns:
		n, ok := r.u32()
		if !ok {
			return 0, "truncated container count"
		}
		if n > 1<<16 {
			return 0, fmt.Sprintf("%d containers, at most 65536 possible", n)
		}
		count, hasOff = int(n), true
	case cookie&0xFFFF == cookieRuns:
		count = int(cookie>>16) + 1
		if isRun, ok = r.next((count + 7) / 8); !ok {
			return 0, "truncated run flags"
		}
		hasOff = count >= noOffsetMinCount
	default:
		return 0, fmt.Sprintf("bad cookie 0x%08x", cookie)
	}
	header, ok := r.next(4 * count)
	if !ok {
		return 0, fmt.Sprintf("truncated header of %d containers", count)
	}
	var offsets []byte
	if hasOff {
		if offsets, ok = r.next(4 * count); !ok {
			return 0, "truncated offset header"
		}
	}
	var total uint64
	for i := range count {
		key := binary.LittleEndian.Uint16(header[4*i:])
		card := int(binary.LittleEndian.Uint16(header[4*i+2:])) + 1
		if i > 0 && key <= binary.LittleEndian.Uint16(header[4*(i-1):]) {
			return 0, fmt.Sprintf("container keys not ascending at container %d", i)
		}
		if hasOff && uint64(binary.LittleEndian.Uint32(offsets[4*i:])) != uint64(r.pos) {
			return 0, fmt.Sprintf("container %d: offset %d, found at %d", i, binary.LittleEndian.Uint32(offsets[4*i:]), r.pos)
		}
		var got int
		var msg string
		switch {
		case isRun != nil && isRun[i/8]&(1<<(i%8)) != 0:
			got, msg = r.runContainer()
		case card > arrayMaxCard:
			got, msg = r.bitsetContainer()
		default:
			got, msg = r.arrayContainer(card)
		}
		if msg != "" {
			return 0, fmt.Sprintf("container %d (key %d): %s", i, key, msg)
		}
		if got != card {
			return 0, fmt.Sprintf("container %d (key %d): header says %d values, holds %d", i, key, card, got)
		}
		total += uint64(got)
	}
	if r.pos != len(b) {
		return 0, fmt.Sprintf("%d trailing bytes", len(b)-r.pos)
	}
	return total, ""
}

// reader consumes a byte slice front to back.
type reader struct {
	b   []byte
	pos int
}

func (r *reader) next(n int) ([]byte, bool) {
	if n < 0 || n > len(r.b)-r.pos {
		return nil, false
	}
	s := r.b[r.pos : r.pos+n]
	r.pos += n
	return s, true
}

func (r *reader) u16() (uint16, bool) {
	s, ok := r.next(2)
	if !ok {
		return 0, false
	}
	return binary.LittleEndian.Uint16(s), true
}

func (r *reader) u32() (uint32, bool) {
	s, ok := r.next(4)
	if !ok {
		return 0, false
	}
	return binary.LittleEndian.Uint32(s), true
}

// arrayContainer checks card strictly ascending u16 values.
func (r *reader) arrayContainer(card int) (int, string) {
	s, ok := r.next(2 * card)
	if !ok {
		return 0, "truncated array container"
	}
	for j := 2; j < len(s); j += 2 {
		if binary.LittleEndian.Uint16(s[j:]) <= binary.LittleEndian.Uint16(s[j-2:]) {
			return 0, "array values not ascending"
		}
	}
	return card, ""
}

// bitsetContainer returns the population of an 8 KiB bitset. A bitset
// holding 4096 values or fewer would be an array, so it is rejected.
func (r *reader) bitsetContainer() (int, string) {
	s, ok := r.next(bitsetBytes)
	if !ok {
		return 0, "truncated bitset container"
	}
	n := 0
	for j := 0; j < len(s); j += 8 {
		n += bits.OnesCount64(binary.LittleEndian.Uint64(s[j:]))
	}
	if n <= arrayMaxCard {
		return 0, fmt.Sprintf("bitset container holds only %d values", n)
	}
	return n, ""
}

// runContainer checks a u16 run count followed by (start, length-1) pairs.
func (r *reader) runContainer() (int, string) {
	nr, ok := r.u16()
	if !ok {
		return 0, "truncated run count"
	}
	if nr == 0 {
		return 0, "run container without runs"
	}
	s, ok := r.next(4 * int(nr))
	if !ok {
		return 0, fmt.Sprintf("truncated run container of %d runs", nr)
	}
	n := 0
	next := 0 // smallest start the next run may have
	for j := 0; j < len(s); j += 4 {
		start := int(binary.LittleEndian.Uint16(s[j:]))
		last := start + int(binary.LittleEndian.Uint16(s[j+2:]))
		if last > 0xFFFF {
			return 0, fmt.Sprintf("run at %d runs past 65535", start)
		}
		if start < next {
			return 0, fmt.Sprintf("run at %d overlaps, touches or precedes the previous run", start)
		}
		n += last - start + 1
		next = last + 2
	}
	return n, ""
}
