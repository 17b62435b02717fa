package table

import (
	"encoding/binary"
	"math"
	"math/bits"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
)

// Stable row ids (feature flag 2) live in each fragment as serialized
// messages of Lance's `protos/rowids.proto`, which this project does not
// vendor: a RowIdSequence (one stable row id per physical row, in offset
// order) and two RowDatasetVersionSequences (the version that created, and
// the version that last updated, each physical row). This file (and
// apply_rowversions.go, for the version sequences) reads and
// writes them with protowire, byte for byte as Lance's prost encoder does:
// fields in number order, zero scalars and empty bytes left out, message
// fields and oneof arms always written.
//
//	RowIdSequence             { repeated U64Segment segments = 1; }
//	U64Segment                oneof { Range range = 1; RangeWithHoles range_with_holes = 2;
//	                                  RangeWithBitmap range_with_bitmap = 3;
//	                                  EncodedU64Array sorted_array = 4; EncodedU64Array array = 5; }
//	Range                     { uint64 start = 1; uint64 end = 2; }
//	RangeWithHoles            { uint64 start = 1; uint64 end = 2; EncodedU64Array holes = 3; }
//	RangeWithBitmap           { uint64 start = 1; uint64 end = 2; bytes bitmap = 3; } // bit i (LSB first) set: start+i present
//	EncodedU64Array           oneof { U16Array u16_array = 1; U32Array u32_array = 2; U64Array u64_array = 3; }
//	U16Array / U32Array       { uint64 base = 1; bytes offsets = 2; } // little-endian offsets from base
//	U64Array                  { bytes values = 2; }                   // little-endian values
//	RowDatasetVersionSequence { repeated RowDatasetVersionRun runs = 1; }
//	RowDatasetVersionRun      { U64Segment span = 1; uint64 version = 2; }

// maxSequenceLen bounds the length of a decoded sequence: a sequence
// describes one fragment's rows, whose offsets are u32.
const maxSequenceLen = math.MaxUint32

// maxMaterializedRows bounds the rows whose stable ids Apply lists one by
// one: the rows of a new fragment that arrives with only some of its row ids
// (the rows a merge-insert moved), which Lance re-encodes whole with the
// rest. Everything else works on ranges and runs, at a cost that does not
// depend on the row count. A larger fragment is refused (ErrInvalidTransaction);
// Lance's default is 1Mi rows per data file.
const maxMaterializedRows = 1 << 24

// u64Segment is one decoded segment. Only the form needed to count and list
// its values is kept.
type u64Segment struct {
	start, end uint64   // range forms: [start, end)
	holes      []uint64 // RangeWithHoles: values of [start, end) that are absent, sorted
	bitmap     []byte   // RangeWithBitmap: presence bits for [start, end)
	values     []uint64 // SortedArray and Array
	kind       protowire.Number
}

const (
	segRange       protowire.Number = 1
	segRangeHoles  protowire.Number = 2
	segRangeBitmap protowire.Number = 3
	segSorted      protowire.Number = 4
	segArray       protowire.Number = 5
)

// len returns the number of values in the segment.
func (s *u64Segment) len() uint64 {
	switch s.kind {
	case segRange:
		return s.end - s.start
	case segRangeHoles:
		return s.end - s.start - uint64(len(s.holes))
	case segRangeBitmap:
		n := uint64(0)
		for _, b := range s.bitmap {
			n += uint64(bits.OnesCount8(b))
		}
		return n
	}
	return uint64(len(s.values))
}

// appendValues appends the segment's values to dst.
func (s *u64Segment) appendValues(dst []uint64) []uint64 {
	switch s.kind {
	case segRange:
		for v := s.start; v < s.end; v++ {
			dst = append(dst, v)
		}
	case segRangeHoles:
		h := 0
		for v := s.start; v < s.end; v++ {
			if h < len(s.holes) && s.holes[h] == v {
				h++
				continue
			}
			dst = append(dst, v)
		}
	case segRangeBitmap:
		for i := uint64(0); i < s.end-s.start; i++ {
			if s.bitmap[i/8]&(1<<(i%8)) != 0 {
				dst = append(dst, s.start+i)
			}
		}
	default:
		dst = append(dst, s.values...)
	}
	return dst
}

// decodeRowIDs decodes a serialized RowIdSequence into its segments. The
// values are not expanded; see expandSegments.
func decodeRowIDs(b []byte) ([]u64Segment, string) {
	var segs []u64Segment
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) string {
		if num != 1 {
			return ""
		}
		if typ != protowire.BytesType {
			return "row id segment has the wrong wire type"
		}
		seg, msg := decodeSegment(v)
		if msg != "" {
			return msg
		}
		segs = append(segs, seg)
		return ""
	})
	return segs, err
}

// sequenceLen returns the number of values in segs, or false if it exceeds
// maxSequenceLen.
func sequenceLen(segs []u64Segment) (uint64, bool) {
	total := uint64(0)
	for i := range segs {
		n := segs[i].len()
		if n > maxSequenceLen || total+n > maxSequenceLen {
			return 0, false
		}
		total += n
	}
	return total, true
}

// expandSegments lists the values of segs; callers check sequenceLen first.
func expandSegments(segs []u64Segment, n uint64) []uint64 {
	out := make([]uint64, 0, n)
	for i := range segs {
		out = segs[i].appendValues(out)
	}
	return out
}

func decodeSegment(b []byte) (u64Segment, string) {
	var seg u64Segment
	found := false
	msg := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) string {
		if num < segRange || num > segArray {
			return ""
		}
		if typ != protowire.BytesType {
			return "row id segment has the wrong wire type"
		}
		found = true
		seg = u64Segment{kind: num}
		switch num {
		case segSorted, segArray:
			vals, msg := decodeEncodedArray(v)
			seg.values = vals
			return msg
		}
		var holes []byte
		hasHoles := false
		if msg := eachField(v, func(n protowire.Number, t protowire.Type, fv []byte, x uint64) string {
			switch {
			case n == 1 && t == protowire.VarintType:
				seg.start = x
			case n == 2 && t == protowire.VarintType:
				seg.end = x
			case n == 3 && t == protowire.BytesType:
				if num == segRangeBitmap {
					seg.bitmap = fv
				} else {
					holes, hasHoles = fv, true
				}
			case n <= 3:
				return "row id range has the wrong wire type"
			}
			return ""
		}); msg != "" {
			return msg
		}
		if seg.end < seg.start {
			return "row id range ends before it starts"
		}
		width := seg.end - seg.start
		switch num {
		case segRangeHoles:
			if !hasHoles {
				return "row id range with holes has no holes array"
			}
			hs, msg := decodeEncodedArray(holes)
			if msg != "" {
				return msg
			}
			for i, h := range hs {
				if h < seg.start || h >= seg.end || (i > 0 && h <= hs[i-1]) {
					return "row id holes are not sorted values inside their range"
				}
			}
			seg.holes = hs
		case segRangeBitmap:
			if width > maxSequenceLen || uint64(len(seg.bitmap)) != (width+7)/8 {
				return "row id bitmap does not match its range"
			}
			if r := width % 8; r != 0 && seg.bitmap[len(seg.bitmap)-1]>>r != 0 {
				return "row id bitmap has bits past its range"
			}
		}
		return ""
	})
	if msg == "" && !found {
		msg = "row id segment is empty"
	}
	return seg, msg
}

func decodeEncodedArray(b []byte) ([]uint64, string) {
	var out []uint64
	found := false
	msg := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) string {
		if num < 1 || num > 3 {
			return ""
		}
		if typ != protowire.BytesType {
			return "encoded array has the wrong wire type"
		}
		found = true
		var base uint64
		var data []byte
		if msg := eachField(v, func(n protowire.Number, t protowire.Type, fv []byte, x uint64) string {
			switch {
			case n == 1 && t == protowire.VarintType && num != 3:
				base = x
			case n == 2 && t == protowire.BytesType:
				data = fv
			}
			return ""
		}); msg != "" {
			return msg
		}
		width := 2 << (num - 1) // 2, 4 or 8 bytes
		if len(data)%width != 0 {
			return "encoded array length is not a multiple of its width"
		}
		out = make([]uint64, 0, len(data)/width)
		for i := 0; i < len(data); i += width {
			var x uint64
			switch width {
			case 2:
				x = uint64(binary.LittleEndian.Uint16(data[i:]))
			case 4:
				x = uint64(binary.LittleEndian.Uint32(data[i:]))
			default:
				x = binary.LittleEndian.Uint64(data[i:])
			}
			if x > math.MaxUint64-base {
				return "encoded array value overflows"
			}
			out = append(out, base+x)
		}
		return ""
	})
	if msg == "" && !found {
		msg = "encoded array is empty"
	}
	return out, msg
}

// eachField calls fn for every field of the message b with its raw value
// (bytes for length-delimited fields, the number for varints). It stops at
// the first message fn returns, or at malformed bytes.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) string) string {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "malformed protobuf: " + protowire.ParseError(n).Error()
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return "malformed protobuf: " + protowire.ParseError(n).Error()
		}
		b = b[n:]
		if msg := fn(num, typ, v, x); msg != "" {
			return msg
		}
	}
	return ""
}

// encodeRowIDs serializes row ids as a RowIdSequence of one segment, in the
// representation Lance's `U64Segment::from_slice` picks: a plain range when
// the ids are contiguous and ascending; for other ascending ids the smallest
// of range-with-holes, range-with-bitmap and sorted array (estimated as Lance
// does, ties in that order); an array otherwise. ids must be distinct.
func encodeRowIDs(ids []uint64) []byte {
	return appendMessage(nil, 1, appendSegment(nil, ids))
}

// encodeRowIDRange serializes the contiguous ids [start, end).
func encodeRowIDRange(start, end uint64) []byte {
	return appendMessage(nil, 1, appendRangeSegment(nil, start, end))
}

func appendRangeSegment(b []byte, start, end uint64) []byte {
	var r []byte
	r = appendVarintField(r, 1, start)
	r = appendVarintField(r, 2, end)
	return appendMessage(b, segRange, r)
}

func appendSegment(b []byte, ids []uint64) []byte {
	if len(ids) == 0 {
		return appendRangeSegment(b, 0, 0)
	}
	lo, hi, sorted := ids[0], ids[0], true
	for i, v := range ids {
		lo, hi = min(lo, v), max(hi, v)
		if i > 0 && v < ids[i-1] {
			sorted = false
		}
	}
	if !sorted {
		return appendMessage(b, segArray, appendEncodedArray(nil, ids))
	}
	slots := hi - lo + 1
	count := uint64(len(ids))
	holes := slots - count
	if holes == 0 {
		return appendRangeSegment(b, lo, hi+1)
	}
	sizeHoles := 24 + 4*holes
	sizeBitmap := 24 + (slots+7)/8
	sizeSorted := 24 + 2*count
	smallest := min(sizeHoles, sizeBitmap, sizeSorted)
	var body []byte
	body = appendVarintField(body, 1, lo)
	body = appendVarintField(body, 2, hi+1)
	switch smallest {
	case sizeHoles:
		missing := make([]uint64, 0, holes)
		next := lo
		for _, v := range ids {
			for ; next < v; next++ {
				missing = append(missing, next)
			}
			next = v + 1
		}
		body = appendMessage(body, 3, appendEncodedArray(nil, missing))
		return appendMessage(b, segRangeHoles, body)
	case sizeBitmap:
		bitmap := make([]byte, (slots+7)/8)
		for _, v := range ids {
			i := v - lo
			bitmap[i/8] |= 1 << (i % 8)
		}
		body = appendBytesField(body, 3, bitmap)
		return appendMessage(b, segRangeBitmap, body)
	}
	return appendMessage(b, segSorted, appendEncodedArray(nil, ids))
}

// appendEncodedArray writes values as an EncodedU64Array: u16 or u32
// offsets from the smallest value when they fit, else plain u64s.
func appendEncodedArray(b []byte, values []uint64) []byte {
	if len(values) == 0 {
		return appendMessage(b, 3, nil)
	}
	lo, hi := slices.Min(values), slices.Max(values)
	var body []byte
	switch span := hi - lo; {
	case span <= math.MaxUint16:
		data := make([]byte, 0, 2*len(values))
		for _, v := range values {
			data = binary.LittleEndian.AppendUint16(data, uint16(v-lo))
		}
		body = appendVarintField(body, 1, lo)
		body = appendBytesField(body, 2, data)
		return appendMessage(b, 1, body)
	case span <= math.MaxUint32:
		data := make([]byte, 0, 4*len(values))
		for _, v := range values {
			data = binary.LittleEndian.AppendUint32(data, uint32(v-lo))
		}
		body = appendVarintField(body, 1, lo)
		body = appendBytesField(body, 2, data)
		return appendMessage(b, 2, body)
	}
	data := make([]byte, 0, 8*len(values))
	for _, v := range values {
		data = binary.LittleEndian.AppendUint64(data, v)
	}
	body = appendBytesField(body, 2, data)
	return appendMessage(b, 3, body)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	return appendMessage(b, num, v)
}

func appendMessage(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// position returns the index of id among the values of s, and false if id
// is not one of them. bitmapRank is s's bitmap rank table (rankTable), used
// for RangeWithBitmap.
func (s *u64Segment) position(id uint64, bitmapRank []uint64) (uint64, bool) {
	switch s.kind {
	case segRange:
		if id >= s.start && id < s.end {
			return id - s.start, true
		}
	case segRangeHoles:
		if id >= s.start && id < s.end {
			i, hole := slices.BinarySearch(s.holes, id)
			if !hole {
				return id - s.start - uint64(i), true
			}
		}
	case segRangeBitmap:
		if id >= s.start && id < s.end {
			i := id - s.start
			if s.bitmap[i/8]&(1<<(i%8)) != 0 {
				return bitmapRank[i/8] + uint64(bits.OnesCount8(s.bitmap[i/8]&(1<<(i%8)-1))), true
			}
		}
	default:
		if i := slices.Index(s.values, id); i >= 0 {
			return uint64(i), true
		}
	}
	return 0, false
}

// rankTable returns, for a RangeWithBitmap segment, the number of set bits
// before each byte of its bitmap.
func (s *u64Segment) rankTable() []uint64 {
	if s.kind != segRangeBitmap {
		return nil
	}
	rank := make([]uint64, len(s.bitmap))
	total := uint64(0)
	for i, b := range s.bitmap {
		rank[i] = total
		total += uint64(bits.OnesCount8(b))
	}
	return rank
}

// lookupPositions calls found(id, position) for every id of want (sorted,
// distinct) that the sequence segs holds, with its position in the
// sequence, in sequence order for each segment. It costs O(segments ·
// log |want| + matches) for the range forms, plus the size of the arrays
// and bitmaps, never the length of the sequence.
func lookupPositions(segs []u64Segment, want []uint64, found func(id, pos uint64)) {
	base := uint64(0)
	for i := range segs {
		s := &segs[i]
		switch s.kind {
		case segRange, segRangeHoles, segRangeBitmap:
			rank := s.rankTable()
			j, _ := slices.BinarySearch(want, s.start)
			for ; j < len(want) && want[j] < s.end; j++ {
				if p, ok := s.position(want[j], rank); ok {
					found(want[j], base+p)
				}
			}
		default:
			for p, id := range s.values {
				if _, ok := slices.BinarySearch(want, id); ok {
					found(id, base+uint64(p))
				}
			}
		}
		base += s.len()
	}
}
