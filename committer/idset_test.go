package committer

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestUUIDSetMatchesMap adds, looks up and removes random keys in a
// uuidSet and in a Go map, checking every answer, the count and the keys
// listed, through enough keys to grow segments and split them many
// times. Keys come from a few families: random, sharing all but their
// last byte, differing in one word only, and the all-zero key.
func TestUUIDSetMatchesMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	s := newUUIDSet()
	want := map[[16]byte]bool{}
	key := func() [16]byte {
		var k [16]byte
		switch r.IntN(8) {
		case 0:
			k[15] = byte(r.IntN(256)) // all zero (often) or one byte set
			if r.IntN(2) == 0 {
				k[15] = 0
			}
		case 1:
			k[3], k[15] = 0xab, byte(r.IntN(256))
		case 2:
			for i := 8; i < 16; i++ {
				k[i] = byte(r.IntN(4))
			}
		default:
			for i := range k {
				k[i] = byte(r.Uint32())
			}
		}
		return k
	}
	var added [][16]byte
	for step := range 60000 {
		switch op := r.IntN(10); {
		case op < 6:
			k := key()
			if s.has(k) != want[k] {
				t.Fatalf("step %d: has(%x) = %v before add", step, k, !want[k])
			}
			s.add(k)
			want[k] = true
			added = append(added, k)
		case op < 8 && len(added) > 0:
			k := added[r.IntN(len(added))]
			s.remove(k)
			delete(want, k)
		default:
			k := key()
			if s.has(k) != want[k] {
				t.Fatalf("step %d: has(%x) = %v", step, k, !want[k])
			}
		}
		if s.len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", step, s.len(), len(want))
		}
	}
	for _, k := range added {
		if s.has(k) != want[k] {
			t.Fatalf("has(%x) = %v at the end", k, !want[k])
		}
	}
	got := s.appendTo(nil)
	if len(got) != len(want) {
		t.Fatalf("appendTo lists %d keys, want %d", len(got), len(want))
	}
	slices.SortFunc(got, func(a, b [16]byte) int { return slices.Compare(a[:], b[:]) })
	for i, k := range got {
		if !want[k] || i > 0 && got[i-1] == k {
			t.Fatalf("appendTo lists %x (in the set: %v, twice: %v)", k, want[k], i > 0 && got[i-1] == k)
		}
	}
	if s.depth == 0 {
		t.Errorf("%d keys in one segment: the test did not split any", len(want))
	}
}

// TestUUIDSetRemoveKeepsRuns removes keys from the middle of long probe
// runs in one small segment, where the backward shift matters, and checks
// every remaining key is still found.
func TestUUIDSetRemoveKeepsRuns(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 60 {
		s := newUUIDSet()
		var ks [][16]byte
		for range 5 + r.IntN(maxSegSlots/2) {
			var k [16]byte
			for i := range k {
				k[i] = byte(r.Uint32())
			}
			s.add(k)
			ks = append(ks, k)
		}
		r.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
		for len(ks) > 0 {
			s.remove(ks[0])
			if s.has(ks[0]) {
				t.Fatalf("has %x after remove", ks[0])
			}
			ks = ks[1:]
			for _, k := range ks {
				if !s.has(k) {
					t.Fatalf("lost %x after a remove", k)
				}
			}
		}
		if s.len() != 0 {
			t.Fatalf("len %d after removing everything", s.len())
		}
	}
}
