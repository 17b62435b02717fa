package lancefile

import (
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"

	pb21 "cellguard/proto/lanceenc21pb"
)

// The compressed forms LanceDB writes by default in 2.1 pages, decoded
// into plain bytes. Each decoder checks every length it reads against the
// bytes it has before allocating, and never produces more values than its
// caller asked for.

// flBlock is the number of values in one FastLanes block.
const flBlock = 1024

// flOrder is FastLanes' order of the eight 8-row groups of a block, which
// puts values that are adjacent in the block into different SIMD lanes.
var flOrder = [8]int{0, 4, 2, 6, 1, 5, 3, 7}

// unpackFastLanes unpacks one block of 1024 values of w bits, packed in
// FastLanes' layout over little-endian words of t bits (8, 16, 32 or 64),
// into dst as 1024 little-endian words of t bits. src holds exactly
// 1024·w/t words.
//
// The layout: the block is 1024/t lanes of t rows. Row r of lane l is the
// value at index flOrder[r/8]·16 + (r%8)·128 + l, and its w bits start at
// bit r·w of the lane's bit stream; word k of lane l's stream is word
// k·lanes + l of the packed block, and a value's bits may straddle two
// words, low bits first.
func unpackFastLanes(src []byte, t, w int, dst []byte) {
	tb := t / 8
	lanes := flBlock / t
	word := func(i int) uint64 { return loadWord(src[i*tb:], tb) }
	mask := uint64(1)<<w - 1
	for lane := range lanes {
		for row := range t {
			idx := flOrder[row/8]*16 + (row%8)*128 + lane
			var v uint64
			if w > 0 {
				bit := row * w
				wi, sh := bit/t, bit%t
				v = word(lanes*wi+lane) >> sh
				if sh+w > t {
					v |= word(lanes*(wi+1)+lane) << (t - sh)
				}
				v &= mask
			}
			storeWord(dst[idx*tb:], tb, v)
		}
	}
}

func loadWord(b []byte, n int) uint64 {
	switch n {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	}
	return binary.LittleEndian.Uint64(b)
}

func storeWord(b []byte, n int, v uint64) {
	switch n {
	case 1:
		b[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(v))
	default:
		binary.LittleEndian.PutUint64(b, v)
	}
}

func wordBits(t uint64) bool { return t == 8 || t == 16 || t == 32 || t == 64 }

// inlineBitpacked decodes one mini-block chunk of cnt (at most 1024)
// values bit-packed with the width inline: a word of t bits holding the
// bit width, then one FastLanes block. It returns cnt words of t bits.
func (pd *pageDecoder) inlineBitpacked(b []byte, t, cnt int) ([]byte, error) {
	tb := t / 8
	if cnt > flBlock || len(b) < tb {
		return nil, malformed(pd.op, "inline bit-packed chunk of %d bytes for %d values", len(b), cnt)
	}
	w := loadWord(b, tb)
	if w > uint64(t) || uint64(len(b)-tb) < flBlock*w/8 {
		return nil, malformed(pd.op, "inline bit-packed chunk of %d bytes with %d-bit values of %d bits", len(b), w, t)
	}
	out := make([]byte, flBlock*tb)
	unpackFastLanes(b[tb:], t, int(w), out)
	return out[:cnt*tb], nil
}

// outOfLineBitpacked decodes cnt values of w bits packed in FastLanes
// blocks of t-bit words; a last partial block is either packed (padded to
// 1024 values) or stored raw, which the buffer length tells apart.
func (pd *pageDecoder) outOfLineBitpacked(b []byte, t, w, cnt int) ([]byte, error) {
	tb := t / 8
	blockBytes := (flBlock*w + t - 1) / t * tb
	whole, tail := cnt/flBlock, cnt%flBlock
	rawLen := whole*blockBytes + tail*tb
	packedLen := whole*blockBytes + min(tail, 1)*blockBytes
	if len(b) != rawLen && len(b) != packedLen {
		return nil, malformed(pd.op, "out-of-line bit-packed buffer of %d bytes for %d values of %d bits", len(b), cnt, w)
	}
	out := make([]byte, (whole+min(tail, 1))*flBlock*tb)
	for k := range whole {
		unpackFastLanes(b[k*blockBytes:], t, w, out[k*flBlock*tb:])
	}
	if tail > 0 {
		rest := b[whole*blockBytes:]
		if len(b) == rawLen {
			copy(out[whole*flBlock*tb:], rest[:tail*tb])
		} else {
			unpackFastLanes(rest, t, w, out[whole*flBlock*tb:])
		}
	}
	return out[:cnt*tb], nil
}

// runLengths expands run-length encoded values (each value width bytes)
// with run lengths of lw bytes into exactly cnt values.
func (pd *pageDecoder) runLengths(vals, lens []byte, width, lw, cnt int) ([]byte, error) {
	runs := len(lens) / lw
	if len(lens)%lw != 0 || len(vals) != runs*width {
		return nil, malformed(pd.op, "run-length buffers of %d values and %d lengths", len(vals)/max(width, 1), len(lens)/lw)
	}
	out := make([]byte, 0, cnt*width)
	for i := range runs {
		n := int(loadWord(lens[i*lw:], lw))
		if n > cnt-len(out)/width {
			return nil, malformed(pd.op, "runs hold more than the chunk's %d values", cnt)
		}
		v := vals[i*width : (i+1)*width]
		for range n {
			out = append(out, v...)
		}
	}
	if len(out) != cnt*width {
		return nil, malformed(pd.op, "runs hold %d values, the chunk %d", len(out)/width, cnt)
	}
	return out, nil
}

// fsstTable is a parsed FSST symbol table: up to 255 symbols of 1 to 8
// bytes; code 255 escapes one literal byte.
type fsstTable struct {
	sym [255][8]byte
	n   [255]uint8
	num int
	on  bool // false: the strings were stored uncompressed
}

const (
	fsstMagic = 0x46535354 // "FSST", the high half of the header word
	fsstEsc   = 255
)

// parseFSST reads Lance's serialized symbol table: a u64 header (bits 0–7
// the symbol count, bit 24 set when compression is on, bits 32–63 the
// magic "FSST"), the symbols as u64s, then their lengths as bytes.
func (pd *pageDecoder) parseFSST(b []byte) (*fsstTable, error) {
	if len(b) < 8 {
		return nil, malformed(pd.op, "FSST symbol table of %d bytes", len(b))
	}
	h := binary.LittleEndian.Uint64(b)
	if h>>32 != fsstMagic {
		return nil, malformed(pd.op, "FSST symbol table without its magic")
	}
	st := &fsstTable{num: int(h & 0xff), on: h&(1<<24) != 0}
	if st.num > fsstEsc || len(b) < 8+9*st.num {
		return nil, malformed(pd.op, "FSST symbol table of %d bytes for %d symbols", len(b), st.num)
	}
	for i := range st.num {
		copy(st.sym[i][:], b[8+8*i:])
		n := b[8+8*st.num+i]
		if n < 1 || n > 8 {
			return nil, malformed(pd.op, "FSST symbol %d of length %d", i, n)
		}
		st.n[i] = n
	}
	return st, nil
}

// decode appends the decompressed form of src to dst.
func (st *fsstTable) decode(dst, src []byte) ([]byte, bool) {
	if !st.on {
		return append(dst, src...), true
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c == fsstEsc {
			i++
			if i == len(src) {
				return dst, false
			}
			dst = append(dst, src[i])
			continue
		}
		if int(c) >= st.num {
			return dst, false
		}
		dst = append(dst, st.sym[c][:st.n[c]]...)
	}
	return dst, true
}

// maxChunkBuffer bounds one decompressed mini-block buffer: a chunk holds
// at most 4,096 values under 256 bytes each, so Lance never needs more
// than 1 MiB; a larger declared size is a decompression bomb.
const maxChunkBuffer = 4 << 20

var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxChunkBuffer))
})

// decompress undoes Lance's general buffer compression: zstd is a u64
// uncompressed length then a zstd frame, lz4 a u32 uncompressed length
// then an LZ4 block. A declared length over limit is refused.
func (pd *pageDecoder) decompress(c *pb21.BufferCompression, b []byte, limit uint64) ([]byte, error) {
	switch c.GetScheme() {
	case pb21.CompressionScheme_COMPRESSION_ALGORITHM_ZSTD:
		if limit > maxChunkBuffer {
			// The zstd decoder's window is bounded by maxChunkBuffer.
			limit = maxChunkBuffer
		}
		if len(b) < 8 || binary.LittleEndian.Uint64(b) > limit {
			return nil, malformed(pd.op, "zstd buffer of %d bytes without a valid length", len(b))
		}
		n := binary.LittleEndian.Uint64(b)
		d, err := zstdDecoder()
		if err != nil {
			return nil, fmt.Errorf("lancefile: zstd decoder: %w", err)
		}
		out, err := d.DecodeAll(b[8:], make([]byte, 0, n))
		if err != nil || uint64(len(out)) != n {
			return nil, malformed(pd.op, "zstd buffer does not decompress to its %d bytes (%v)", n, err)
		}
		return out, nil
	case pb21.CompressionScheme_COMPRESSION_ALGORITHM_LZ4:
		// An LZ4 block expands at most about 255 times.
		if len(b) < 4 || uint64(binary.LittleEndian.Uint32(b)) > min(limit, 256*uint64(len(b))) {
			return nil, malformed(pd.op, "lz4 buffer of %d bytes without a valid length", len(b))
		}
		out := make([]byte, binary.LittleEndian.Uint32(b))
		n, err := lz4.UncompressBlock(b[4:], out)
		if err != nil || n != len(out) {
			return nil, malformed(pd.op, "lz4 buffer does not decompress to its %d bytes (%v)", len(out), err)
		}
		return out, nil
	}
	return nil, pd.unsupported("general(" + schemeName(c.GetScheme()) + ")")
}

// general decompresses the first value buffer of a chunk, as Lance's
// general mini-block compression compresses only that one.
func (pd *pageDecoder) general(g *pb21.General, bufs [][]byte) ([][]byte, error) {
	if len(bufs) == 0 {
		return nil, malformed(pd.op, "no value buffer")
	}
	first, err := pd.decompress(g.GetCompression(), bufs[0], maxChunkBuffer)
	if err != nil {
		return nil, err
	}
	return append([][]byte{first}, bufs[1:]...), nil
}

// byteStreamSplit interleaves w byte streams of cnt bytes (stream k holds
// byte k of every value) back into cnt values of w bytes.
func (pd *pageDecoder) byteStreamSplit(b []byte, w, cnt int) ([]byte, error) {
	if len(b) < w*cnt {
		return nil, malformed(pd.op, "byte-stream-split buffer of %d bytes for %d values of %d bytes", len(b), cnt, w)
	}
	out := make([]byte, w*cnt)
	for k := range w {
		s := b[k*cnt : (k+1)*cnt]
		for i, v := range s {
			out[i*w+k] = v
		}
	}
	return out, nil
}
