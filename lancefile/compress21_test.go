package lancefile

import (
	"errors"
	"math/rand/v2"
	"testing"

	pb21 "cellguard/proto/lanceenc21pb"
)

// packFastLanes is the inverse of unpackFastLanes, written from the
// layout's description: row r of lane l is value flOrder[r/8]·16 +
// (r%8)·128 + l, its w bits at bit r·w of the lane's stream, stream word
// k at packed word k·lanes + l.
func packFastLanes(vals []uint64, t, w int) []byte {
	tb, lanes := t/8, flBlock/t
	out := make([]byte, flBlock*w/8)
	for lane := range lanes {
		for row := range t {
			v := vals[flOrder[row/8]*16+(row%8)*128+lane]
			for b := range w {
				if v>>b&1 == 0 {
					continue
				}
				bit := row*w + b
				word := (bit/t)*lanes + lane
				out[word*tb+(bit%t)/8] |= 1 << (bit % 8)
			}
		}
	}
	return out
}

// TestFastLanesRoundTrip packs random values of every width into every
// word size and unpacks them. The LanceDB fixtures check the layout
// against Lance itself for the widths LanceDB chose; this covers the
// others (values straddling words, w = 0, w = t).
func TestFastLanesRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tw := range []int{8, 16, 32, 64} {
		for w := 0; w <= tw; w++ {
			vals := make([]uint64, flBlock)
			for i := range vals {
				if w > 0 {
					vals[i] = rng.Uint64() >> (64 - w)
				}
			}
			dst := make([]byte, flBlock*tw/8)
			unpackFastLanes(packFastLanes(vals, tw, w), tw, w, dst)
			for i, want := range vals {
				if got := loadWord(dst[i*tw/8:], tw/8); got != want {
					t.Fatalf("t=%d w=%d: value %d = %d, want %d", tw, w, i, got, want)
				}
			}
		}
	}
}

// TestCompressedChunkLimits feeds chunks whose declared sizes exceed what
// they hold or what a chunk may expand to; each must be ErrMalformed.
func TestCompressedChunkLimits(t *testing.T) {
	pd := &pageDecoder{op: "test"}
	zstd := &pb21.BufferCompression{Scheme: pb21.CompressionScheme_COMPRESSION_ALGORITHM_ZSTD}
	lz4 := &pb21.BufferCompression{Scheme: pb21.CompressionScheme_COMPRESSION_ALGORITHM_LZ4}
	huge := []byte{0, 0, 0, 0x40, 0, 0, 0, 0, 0x28, 0xb5, 0x2f, 0xfd} // u64 size 1 GiB
	cases := map[string]func() error{
		"bit width over the word": func() error {
			_, err := pd.inlineBitpacked(append([]byte{9}, make([]byte, 2048)...), 8, 10)
			return err
		},
		"bit-packed chunk too short": func() error {
			_, err := pd.inlineBitpacked([]byte{3, 0, 0}, 8, 10)
			return err
		},
		"out-of-line of the wrong length": func() error {
			_, err := pd.outOfLineBitpacked(make([]byte, 100), 16, 1, 3000)
			return err
		},
		"runs longer than the chunk": func() error {
			_, err := pd.runLengths([]byte{1, 2}, []byte{200, 200}, 1, 1, 300)
			return err
		},
		"zstd bomb": func() error {
			_, err := pd.decompress(zstd, huge, maxChunkBuffer)
			return err
		},
		"lz4 bomb": func() error {
			_, err := pd.decompress(lz4, huge[:8], maxChunkBuffer) // u32 size 1 GiB
			return err
		},
		"zstd garbage": func() error {
			_, err := pd.decompress(zstd, []byte{4, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3}, maxChunkBuffer)
			return err
		},
		"fsst unknown code": func() error {
			st := &fsstTable{num: 1, on: true}
			if _, ok := st.decode(nil, []byte{7}); !ok {
				return ErrMalformed
			}
			return nil
		},
	}
	for name, f := range cases {
		if err := f(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}
