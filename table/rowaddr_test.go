package table_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/table"
)

// cat concatenates byte slices.
func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func le16(vs ...uint16) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	return b
}

func le32(vs ...uint32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

func bitmapOf(vs ...uint32) *roaring.Bitmap { return roaring.BitmapOf(vs...) }

func rangeBitmap(lo, hi uint64) *roaring.Bitmap {
	b := roaring.New()
	b.AddRange(lo, hi)
	return b
}

func toBytes(t testing.TB, b *roaring.Bitmap) []byte {
	t.Helper()
	out, err := b.ToBytes()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Hand-written portable bitmaps, independent of the roaring library.
var (
	// {1, 5}: no-run cookie, one array container, offset header.
	arrayBitmapBytes = cat(le32(12346, 1), le16(0, 1), le32(16), le16(1, 5))
	// 10..19: run cookie, one run container, no offset header.
	runBitmapBytes = cat(le16(12347, 0), []byte{1}, le16(0, 9), le16(1), le16(10, 9))
	// Empty: no-run cookie, zero containers.
	emptyBitmapBytes = le32(12346, 0)
)

// entry is one RowAddrTreeMap entry: fragment id and bitmap bytes.
func entry(frag uint32, bitmap []byte) []byte {
	return cat(le32(frag, uint32(len(bitmap))), bitmap)
}

func equalRowSets(a, b table.RowSet) bool {
	if len(a) != len(b) {
		return false
	}
	for id, x := range a {
		y, ok := b[id]
		if !ok || (x == nil) != (y == nil) || (x != nil && !x.Equals(y)) {
			return false
		}
	}
	return true
}

func TestDecodeRowAddrTreeMap(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want table.RowSet
	}{
		{"empty map", le32(0), table.RowSet{}},
		{"whole fragment", cat(le32(1), entry(7, nil)), table.RowSet{7: nil}},
		{"whole fragments", cat(le32(3), entry(0, nil), entry(2, nil), entry(0xFFFFFFFF, nil)),
			table.RowSet{0: nil, 2: nil, 0xFFFFFFFF: nil}},
		{"array bitmap", cat(le32(1), entry(4, arrayBitmapBytes)), table.RowSet{4: bitmapOf(1, 5)}},
		{"run bitmap", cat(le32(1), entry(4, runBitmapBytes)), table.RowSet{4: rangeBitmap(10, 20)}},
		{"mixed", cat(le32(3), entry(1, runBitmapBytes), entry(2, nil), entry(3, arrayBitmapBytes)),
			table.RowSet{1: rangeBitmap(10, 20), 2: nil, 3: bitmapOf(1, 5)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := table.DecodeRowAddrTreeMap(tt.in)
			if err != nil {
				t.Fatalf("DecodeRowAddrTreeMap: %v", err)
			}
			if !equalRowSets(got, tt.want) {
				t.Errorf("DecodeRowAddrTreeMap = %v; want %v", got, tt.want)
			}
			back, err := table.DecodeRowAddrTreeMap(got.MarshalRowAddrTreeMap())
			if err != nil || !equalRowSets(back, tt.want) {
				t.Errorf("after re-encoding: %v, %v; want %v", back, err, tt.want)
			}
		})
	}
}

func TestDecodeRowAddrTreeMapErrors(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"nil", nil, "truncated: 0 bytes"},
		{"short count", []byte{1, 0, 0}, "truncated: 3 bytes"},
		{"count without entries", le32(1), "1 entries cannot fit in 0 bytes"},
		{"huge count", cat(le32(0xFFFFFFFF), entry(1, nil)), "4294967295 entries cannot fit in 8 bytes"},
		{"entry truncated", cat(le32(2), entry(1, arrayBitmapBytes), le32(2)), "entry 1 truncated"},
		{"duplicate fragment", cat(le32(2), entry(3, nil), entry(3, nil)), "fragment 3 appears twice"},
		{"duplicate fragment with bitmaps", cat(le32(2), entry(3, arrayBitmapBytes), entry(3, runBitmapBytes)), "fragment 3 appears twice"},
		{"descending fragments", cat(le32(2), entry(5, nil), entry(2, nil)), "fragment 2 follows fragment 5"},
		{"bitmap overruns", cat(le32(1), le32(4, 100), arrayBitmapBytes), "fragment 4: bitmap length 100 overruns input (20 bytes left)"},
		{"bad bitmap", cat(le32(1), entry(4, []byte("not a bitmap"))), "fragment 4: bad cookie"},
		{"bitmap truncated inside", cat(le32(1), entry(4, arrayBitmapBytes[:18])), "fragment 4: container 0 (key 0): truncated array container"},
		{"bitmap trailing bytes", cat(le32(1), entry(4, cat(arrayBitmapBytes, []byte{0, 0}))), "fragment 4: 2 trailing bytes"},
		{"explicitly empty bitmap", cat(le32(1), entry(4, emptyBitmapBytes)), "fragment 4: explicitly empty bitmap"},
		{"trailing bytes", cat(le32(1), entry(4, nil), []byte{1, 2, 3}), "3 trailing bytes after 1 entries"},
		{"fewer entries than counted", cat(le32(1), entry(4, nil), entry(5, nil)), "8 trailing bytes after 1 entries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := table.DecodeRowAddrTreeMap(tt.in)
			if err == nil {
				t.Fatalf("DecodeRowAddrTreeMap = %v, nil; want error containing %q", got, tt.want)
			}
			if !errorsIsMalformed(err) {
				t.Errorf("error %v (%T) is not a *table.Error wrapping ErrMalformed", err, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %q; want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestMarshalRowAddrTreeMap(t *testing.T) {
	if got, want := table.RowSet(nil).MarshalRowAddrTreeMap(), le32(0); !bytes.Equal(got, want) {
		t.Errorf("nil RowSet encodes as %x; want %x", got, want)
	}
	// Layout, byte for byte: ascending ids, whole fragments with length 0.
	s := table.RowSet{9: nil, 2: bitmapOf(1, 5)}
	want := cat(le32(2), entry(2, arrayBitmapBytes), entry(9, nil))
	if got := s.MarshalRowAddrTreeMap(); !bytes.Equal(got, want) {
		t.Errorf("MarshalRowAddrTreeMap = %x; want %x", got, want)
	}
	// Appends to dst.
	if got := s.AppendRowAddrTreeMap([]byte("xy")); !bytes.Equal(got, cat([]byte("xy"), want)) {
		t.Errorf("AppendRowAddrTreeMap(xy) = %x", got)
	}
	// Runs are written as runs, whatever the caller's containers are.
	many := roaring.New()
	for v := uint32(10); v < 20; v++ {
		many.Add(v)
	}
	if got, want := (table.RowSet{4: many}).MarshalRowAddrTreeMap(), cat(le32(1), entry(4, runBitmapBytes)); !bytes.Equal(got, want) {
		t.Errorf("run-optimized encoding = %x; want %x", got, want)
	}
	if many.HasRunCompression() {
		t.Errorf("MarshalRowAddrTreeMap modified the caller's bitmap")
	}
	// Equal sets encode equally, however they were built.
	a := rangeBitmap(0, 70000)
	b := roaring.New()
	for v := uint32(0); v < 70000; v++ {
		b.Add(v)
	}
	if !bytes.Equal((table.RowSet{1: a}).MarshalRowAddrTreeMap(), (table.RowSet{1: b}).MarshalRowAddrTreeMap()) {
		t.Errorf("equal sets encode differently")
	}
	// An empty bitmap selects nothing, so its entry is left out.
	if got, want := (table.RowSet{1: roaring.New(), 2: nil}).MarshalRowAddrTreeMap(), cat(le32(1), entry(2, nil)); !bytes.Equal(got, want) {
		t.Errorf("empty bitmap entry encodes as %x; want %x", got, want)
	}
}

func TestRowSetRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		s := table.RowSet{}
		for range r.IntN(6) {
			id := r.Uint32N(50)
			if r.IntN(4) == 0 {
				s[id] = nil
			} else {
				s[id] = randomBitmap(r)
			}
		}
		enc := s.MarshalRowAddrTreeMap()
		got, err := table.DecodeRowAddrTreeMap(enc)
		if err != nil {
			t.Fatalf("DecodeRowAddrTreeMap(Marshal(%v)): %v", s, err)
		}
		if !equalRowSets(got, s) {
			t.Fatalf("round trip: %v; want %v", got, s)
		}
		if again := got.MarshalRowAddrTreeMap(); !bytes.Equal(again, enc) {
			t.Fatalf("re-encoding differs")
		}
	}
}

// randomBitmap returns a non-empty bitmap mixing sparse values, dense
// blocks and runs across several containers.
func randomBitmap(r *rand.Rand) *roaring.Bitmap {
	b := roaring.New()
	for b.IsEmpty() {
		for range r.IntN(4) + 1 {
			base := uint64(r.IntN(6)) << 16
			switch r.IntN(3) {
			case 0: // sparse
				for range r.IntN(50) + 1 {
					b.Add(uint32(base + uint64(r.IntN(1<<16))))
				}
			case 1: // dense: more than 4096 values, no long runs
				for range 6000 {
					b.Add(uint32(base + uint64(r.IntN(1<<16))))
				}
			case 2: // runs
				for range r.IntN(5) + 1 {
					lo := base + uint64(r.IntN(1<<16))
					b.AddRange(lo, min(lo+uint64(r.IntN(3000))+1, base+1<<16))
				}
			}
		}
		if r.IntN(2) == 0 {
			b.RunOptimize()
		}
	}
	return b
}

func TestDecodeBitmap(t *testing.T) {
	everyOther := roaring.New()
	for v := uint32(0); v < 1<<16; v += 2 {
		everyOther.Add(v)
	}
	tests := []struct {
		name string
		in   []byte
		want *roaring.Bitmap
	}{
		{"empty", emptyBitmapBytes, roaring.New()},
		{"array", arrayBitmapBytes, bitmapOf(1, 5)},
		{"run", runBitmapBytes, rangeBitmap(10, 20)},
		{"full container as a run", cat(le16(12347, 0), []byte{1}, le16(3, 0xFFFF), le16(1), le16(0, 0xFFFF)),
			rangeBitmap(3<<16, 4<<16)},
		{"max value", toBytes(t, bitmapOf(0xFFFFFFFF)), bitmapOf(0xFFFFFFFF)},
		{"bitset", toBytes(t, everyOther), everyOther},
		// 32768 runs of one value each: valid, though a bitset is smaller.
		// roaring's Validate would compare all 5·10⁸ pairs of runs.
		{"many runs", func() []byte {
			b := cat(le16(12347, 0), []byte{1}, le16(0, 32767), le16(32768))
			for v := uint16(0); v < 32768; v++ {
				b = append(b, le16(2*v, 0)...)
			}
			return b
		}(), everyOther},
		// Under a MiB of input for every 32-bit value: 65536 full run
		// containers, with run flags and an offset header.
		{"all 2^32 values", func() []byte {
			b := cat(le16(12347, 0xFFFF), bytes.Repeat([]byte{0xFF}, 8192))
			for k := range 1 << 16 {
				b = append(b, le16(uint16(k), 0xFFFF)...)
			}
			start := uint32(len(b) + 4<<16)
			for k := range uint32(1 << 16) {
				b = append(b, le32(start+6*k)...)
			}
			for range 1 << 16 {
				b = append(b, le16(1, 0, 0xFFFF)...)
			}
			return b
		}(), rangeBitmap(0, 1<<32)},
		{"five containers with runs", toBytes(t, func() *roaring.Bitmap {
			b := bitmapOf(1, 1<<16+7, 2<<16)
			b.AddRange(3<<16, 3<<16+100)
			b.AddRange(9<<16, 10<<16)
			b.RunOptimize()
			return b
		}()), func() *roaring.Bitmap {
			b := bitmapOf(1, 1<<16+7, 2<<16)
			b.AddRange(3<<16, 3<<16+100)
			b.AddRange(9<<16, 10<<16)
			return b
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := table.DecodeBitmap(tt.in)
			if err != nil {
				t.Fatalf("DecodeBitmap: %v", err)
			}
			if !got.Equals(tt.want) {
				t.Errorf("DecodeBitmap = %v; want %v", got, tt.want)
			}
			if tt.name == "many runs" {
				return // Validate takes seconds here; that is the point.
			}
			if err := got.Validate(); err != nil {
				t.Errorf("decoded bitmap fails Validate: %v", err)
			}
		})
	}
	// The result does not alias the input.
	in := append([]byte(nil), arrayBitmapBytes...)
	got, err := table.DecodeBitmap(in)
	if err != nil {
		t.Fatal(err)
	}
	clear(in)
	if !got.Equals(bitmapOf(1, 5)) {
		t.Errorf("DecodeBitmap result changed with its input: %v", got)
	}
}

func TestDecodeBitmapRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 300 {
		want := randomBitmap(r)
		got, err := table.DecodeBitmap(toBytes(t, want))
		if err != nil {
			t.Fatalf("DecodeBitmap(%v): %v", want, err)
		}
		if !got.Equals(want) {
			t.Fatalf("DecodeBitmap = %v; want %v", got, want)
		}
	}
}

func TestDecodeBitmapErrors(t *testing.T) {
	bitset := func(n int) []byte { // n lowest bits set
		b := make([]byte, 8192)
		for i := range n {
			b[i/8] |= 1 << (i % 8)
		}
		return b
	}
	noRuns := func(key, card uint16, body []byte) []byte { // one container, with offset
		return cat(le32(12346, 1), le16(key, card), le32(16), body)
	}
	runs := func(card uint16, runs ...uint16) []byte { // one run container
		return cat(le16(12347, 0), []byte{1}, le16(0, card), le16(uint16(len(runs)/2)), le16(runs...))
	}
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"nil", nil, "truncated: 0 bytes"},
		{"three bytes", []byte{0x3a, 0x30, 0}, "truncated: 3 bytes"},
		{"bad cookie", le32(12345, 0), "bad cookie 0x00003039"},
		{"missing count", le32(12346), "truncated container count"},
		{"too many containers", le32(12346, 65537), "65537 containers, at most 65536"},
		{"truncated header", le32(12346, 2, 0), "truncated header of 2 containers"},
		{"truncated offsets", cat(le32(12346, 1), le16(0, 0)), "truncated offset header"},
		{"truncated run flags", le16(12347, 15), "truncated run flags"},
		{"truncated array", arrayBitmapBytes[:19], "container 0 (key 0): truncated array container"},
		{"array duplicate", noRuns(0, 1, le16(5, 5)), "array values not ascending"},
		{"array descending", noRuns(0, 1, le16(5, 1)), "array values not ascending"},
		{"wrong offset", cat(le32(12346, 1), le16(0, 0), le32(17), le16(1)), "container 0: offset 17, found at 16"},
		{"keys repeat", cat(le32(12346, 2), le16(1, 0, 1, 0), le32(24, 26), le16(1), le16(2)), "container keys not ascending at container 1"},
		{"keys descend", cat(le32(12346, 2), le16(2, 0, 1, 0), le32(24, 26), le16(1), le16(2)), "container keys not ascending at container 1"},
		{"truncated bitset", noRuns(0, 4999, bitset(5000)[:100]), "truncated bitset container"},
		{"bitset too sparse", noRuns(0, 4999, bitset(4000)), "bitset container holds only 4000 values"},
		{"bitset count mismatch", noRuns(0, 4999, bitset(5001)), "header says 5000 values, holds 5001"},
		{"no runs", runs(0), "run container without runs"},
		{"truncated runs", cat(le16(12347, 0), []byte{1}, le16(0, 0), le16(3), le16(0, 0)), "truncated run container of 3 runs"},
		{"truncated run count", cat(le16(12347, 0), []byte{1}, le16(0, 0)), "truncated run count"},
		{"run past 65535", runs(9, 65530, 9), "run at 65530 runs past 65535"},
		{"runs overlap", runs(19, 0, 9, 5, 9), "run at 5 overlaps"},
		{"runs touch", runs(19, 0, 9, 10, 9), "run at 10 overlaps, touches"},
		{"runs descend", runs(19, 20, 9, 0, 9), "run at 0 overlaps, touches or precedes"},
		{"runs repeat", runs(19, 0, 9, 0, 9), "run at 0 overlaps"},
		{"run header count mismatch", runs(5, 10, 9), "header says 6 values, holds 10"},
		{"array header count too high", cat(le32(12346, 1), le16(0, 2), le32(16), le16(1, 5)), "truncated array container"},
		{"trailing bytes", cat(arrayBitmapBytes, []byte{0}), "1 trailing bytes"},
		{"two bitmaps", cat(arrayBitmapBytes, arrayBitmapBytes), "20 trailing bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := table.DecodeBitmap(tt.in)
			if err == nil {
				t.Fatalf("DecodeBitmap = %v, nil; want error containing %q", got, tt.want)
			}
			if !errorsIsMalformed(err) {
				t.Errorf("error %v (%T) is not a *table.Error wrapping ErrMalformed", err, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %q; want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestDecodeBitmapTruncated cuts valid encodings at every length: each
// prefix is rejected.
func TestDecodeBitmapTruncated(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	inputs := [][]byte{arrayBitmapBytes, runBitmapBytes, emptyBitmapBytes}
	for range 10 {
		inputs = append(inputs, toBytes(t, randomBitmap(r)))
	}
	for _, in := range inputs {
		for n := range len(in) {
			if _, err := table.DecodeBitmap(in[:n]); !errorsIsMalformed(err) {
				t.Fatalf("DecodeBitmap(%d of %d bytes) error = %v; want ErrMalformed", n, len(in), err)
			}
		}
	}
}
