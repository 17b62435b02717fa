package table

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// segmentKind returns the oneof arm of the single segment in an encoded
// RowIdSequence.
func segmentKind(t *testing.T, b []byte) protowire.Number {
	t.Helper()
	segs, msg := decodeRowIDs(b)
	if msg != "" || len(segs) != 1 {
		t.Fatalf("decode: %q, %d segments", msg, len(segs))
	}
	return segs[0].kind
}

func TestEncodeRowIDsMatchesLance(t *testing.T) {
	// Written by Lance 8.0.0 (stable-row-ids fixture, version 7): ids 30-39
	// kept by a merge-insert, 60-69 assigned at commit.
	ids := slices.Concat(seq(30, 40), seq(60, 70))
	if got, want := encodeRowIDs(ids), []byte("\n\r\x1a\x0b\x08\x1e\x10F\x1a\x05\xff\x03\x00\xc0\xff"); !slices.Equal(got, want) {
		t.Errorf("encodeRowIDs = %q; Lance wrote %q", got, want)
	}
	// Lance's fresh range, fixture version 1 and 2.
	if got := encodeRowIDRange(0, 20); !slices.Equal(got, []byte("\n\x04\n\x02\x10\x14")) {
		t.Errorf("range 0-20 = %q", got)
	}
	if got := encodeRowIDRange(20, 40); !slices.Equal(got, []byte("\n\x06\n\x04\x08\x14\x10(")) {
		t.Errorf("range 20-40 = %q", got)
	}
	if got := uniformVersions(20, 1); !slices.Equal(got, []byte("\n\x08\n\x04\n\x02\x10\x14\x10\x01")) {
		t.Errorf("versions = %q", got)
	}
	// Fixture version 4: created-at of rows moved from two fragments.
	if got := encodeVersionRuns([]versionRun{{5, 1}, {5, 2}}); !slices.Equal(got, []byte("\n\x08\n\x04\n\x02\x10\x05\x10\x01\n\n\n\x06\n\x04\x08\x05\x10\n\x10\x02")) {
		t.Errorf("runs = %q", got)
	}
}

func seq(lo, hi uint64) []uint64 {
	var out []uint64
	for v := lo; v < hi; v++ {
		out = append(out, v)
	}
	return out
}

func TestEncodeRowIDsRepresentation(t *testing.T) {
	for _, c := range []struct {
		name string
		ids  []uint64
		want protowire.Number
	}{
		{"contiguous", seq(5, 100), segRange},
		{"empty", nil, segRange},
		{"few holes in a long range", slices.DeleteFunc(seq(0, 1000), func(v uint64) bool { return v == 10 || v == 500 }), segRangeHoles},
		{"half present", slices.DeleteFunc(seq(0, 200), func(v uint64) bool { return v%2 == 0 }), segRangeBitmap},
		{"sparse", []uint64{1, 1000, 5000, 90000}, segSorted},
		{"unsorted", []uint64{5, 3, 9}, segArray},
		{"unsorted, wide", []uint64{1 << 40, 3, 1 << 20}, segArray},
		{"sorted, u32 offsets", []uint64{1, 1 << 20, 1 << 30}, segSorted},
	} {
		b := encodeRowIDs(c.ids)
		if got := segmentKind(t, b); got != c.want {
			t.Errorf("%s: segment kind %d; want %d", c.name, got, c.want)
		}
		segs, _ := decodeRowIDs(b)
		n, ok := sequenceLen(segs)
		if !ok || n != uint64(len(c.ids)) {
			t.Fatalf("%s: length %d, %v", c.name, n, ok)
		}
		if got := expandSegments(segs, n); !slices.Equal(got, c.ids) && len(c.ids) > 0 {
			t.Errorf("%s: round trip %v", c.name, got)
		}
	}
}

func TestEncodeRowIDsRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		n := r.IntN(300)
		set := map[uint64]bool{}
		base := r.Uint64N(math.MaxUint64 / 2)
		spread := []uint64{uint64(n + 1), 4 * uint64(n+1), 1 << 20, 1 << 40}[r.IntN(4)]
		var ids []uint64
		for len(ids) < n {
			v := base + r.Uint64N(spread)
			if !set[v] {
				set[v] = true
				ids = append(ids, v)
			}
		}
		if r.IntN(2) == 0 {
			slices.Sort(ids)
		}
		segs, msg := decodeRowIDs(encodeRowIDs(ids))
		if msg != "" {
			t.Fatalf("decode: %s", msg)
		}
		got := expandSegments(segs, uint64(n))
		if !slices.Equal(got, ids) && n > 0 {
			t.Fatalf("round trip of %d ids differs", n)
		}
	}
}

func TestDecodeRowIDsRejects(t *testing.T) {
	rng := func(start, end uint64) []byte {
		var r []byte
		r = appendVarintField(r, 1, start)
		r = appendVarintField(r, 2, end)
		return r
	}
	seqOf := func(kind protowire.Number, body []byte) []byte {
		return appendMessage(nil, 1, appendMessage(nil, kind, body))
	}
	for name, b := range map[string][]byte{
		"truncated":              {0x0a, 0x05, 0x0a},
		"range backwards":        seqOf(segRange, rng(9, 3)),
		"bitmap too short":       seqOf(segRangeBitmap, appendBytesField(rng(0, 20), 3, []byte{0xff})),
		"bitmap bits past range": seqOf(segRangeBitmap, appendBytesField(rng(0, 4), 3, []byte{0xff})),
		"holes missing":          seqOf(segRangeHoles, rng(0, 10)),
		"hole outside range":     seqOf(segRangeHoles, appendMessage(rng(0, 10), 3, appendEncodedArray(nil, []uint64{12}))),
		"array of odd length":    seqOf(segArray, appendMessage(nil, 1, appendBytesField(nil, 2, []byte{1, 2, 3}))),
		"empty segment":          appendMessage(nil, 1, nil),
		"wrong wire type":        protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 3),
	} {
		if _, msg := decodeRowIDs(b); msg == "" {
			t.Errorf("%s: decoded", name)
		}
	}
	// A range too long for a fragment decodes but has no length.
	segs, msg := decodeRowIDs(encodeRowIDRange(0, math.MaxUint64))
	if _, ok := sequenceLen(segs); msg != "" || ok {
		t.Errorf("huge range: %q, length ok %v", msg, ok)
	}
}

func TestVersionRuns(t *testing.T) {
	versions := []uint64{1, 1, 2, 2, 2, 7, 1}
	runs := runsOf(versions)
	got, msg := decodeVersionRuns(encodeVersionRuns(runs))
	if msg != "" || !slices.Equal(got, runs) {
		t.Fatalf("round trip %v, %q", got, msg)
	}
	x := indexRuns(got)
	for p, want := range versions {
		if v, ok := x.at(uint64(p)); !ok || v != want {
			t.Errorf("at(%d) = %d, %v; want %d", p, v, ok, want)
		}
	}
	if _, ok := x.at(uint64(len(versions))); ok {
		t.Errorf("at(past the end) found a version")
	}
}

// TestStampRuns compares stampRuns with stamping a per-row version list.
func TestStampRuns(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 300 {
		var perRow []uint64
		for range r.IntN(40) {
			perRow = append(perRow, 1+r.Uint64N(3))
		}
		n := uint64(r.IntN(50))
		want := make([]uint64, n)
		for i := range want {
			want[i] = 9 // fallback
			if i < len(perRow) {
				want[i] = perRow[i]
			}
		}
		var offsets []uint64
		for o := range n {
			if r.IntN(4) == 0 {
				offsets = append(offsets, o)
				want[o] = 5
			}
		}
		k := 0
		next := func() (uint64, bool) {
			if k == len(offsets) {
				return 0, false
			}
			k++
			return offsets[k-1], true
		}
		if got := stampRuns(runsOf(perRow), n, next, 5, 9); !slices.Equal(got, runsOf(want)) {
			t.Fatalf("stampRuns(%v, %d, %v) = %v; want %v", perRow, n, offsets, got, runsOf(want))
		}
	}
}

// TestLookupPositions compares lookupPositions with a scan of the expanded
// sequence, over every segment form.
func TestLookupPositions(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 300 {
		var raw []byte
		var all []uint64
		next := r.Uint64N(1000)
		for range 1 + r.IntN(4) {
			var ids []uint64
			for range r.IntN(60) {
				next += 1 + r.Uint64N([]uint64{1, 3, 40}[r.IntN(3)])
				ids = append(ids, next)
			}
			if r.IntN(4) == 0 {
				slices.Reverse(ids)
			}
			raw = appendMessage(raw, 1, appendSegment(nil, ids))
			all = append(all, ids...)
		}
		segs, msg := decodeRowIDs(raw)
		if msg != "" {
			t.Fatal(msg)
		}
		var want []uint64
		for _, id := range all {
			if r.IntN(3) == 0 {
				want = append(want, id)
			}
		}
		want = append(want, next+5, 0) // absent
		slices.Sort(want)
		want = slices.Compact(want)
		got := map[uint64]uint64{}
		lookupPositions(segs, want, func(id, pos uint64) { got[id] = pos })
		for pos, id := range all {
			_, wanted := slices.BinarySearch(want, id)
			if p, ok := got[id]; wanted && (!ok || p != uint64(pos)) {
				t.Fatalf("position of %d: %d, %v; want %d", id, p, ok, pos)
			}
		}
		if len(got) != len(want)-2 {
			t.Fatalf("found %d ids; want %d", len(got), len(want)-2)
		}
	}
}

func FuzzDecodeRowIDs(f *testing.F) {
	f.Add(encodeRowIDs(slices.Concat(seq(30, 40), seq(60, 70))))
	f.Add(encodeRowIDs([]uint64{5, 3, 1 << 40}))
	f.Add(encodeRowIDs(slices.DeleteFunc(seq(0, 1000), func(v uint64) bool { return v == 10 })))
	f.Add(encodeVersionRuns([]versionRun{{3, 1}, {4, 2}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if segs, msg := decodeRowIDs(b); msg == "" {
			if n, ok := sequenceLen(segs); ok && n <= 1<<16 {
				ids := expandSegments(segs, n)
				if uint64(len(ids)) != n {
					t.Fatalf("expanded %d values; length says %d", len(ids), n)
				}
			}
		}
		if runs, msg := decodeVersionRuns(b); msg == "" {
			_ = stampRuns(runs, 100, func() (uint64, bool) { return 0, false }, 1, 1)
			_, _ = indexRuns(runs).at(3)
		}
	})
}
