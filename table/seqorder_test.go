package table

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSeqOrderMatchesSortedMap checks seqOrder against a plain map and a
// sorted key list under random sets and deletes, with keys clustered
// within and across buckets, and checks that old versions stay intact.
func TestSeqOrderMatchesSortedMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	var o seqOrder
	want := map[uint64]uint64{}
	type snapshot struct {
		o    seqOrder
		want map[uint64]uint64
	}
	var snaps []snapshot
	key := func() uint64 {
		switch rng.IntN(3) {
		case 0:
			return uint64(rng.IntN(8)) * seqGap // appended keys
		case 1:
			return uint64(rng.IntN(8))*seqGap + uint64(rng.IntN(4))*1024 // spliced between
		default:
			return uint64(rng.IntN(8*seqGap + 5))
		}
	}
	for step := range 4000 {
		k := key()
		if rng.IntN(3) == 0 {
			o = o.Delete(k)
			delete(want, k)
		} else {
			o = o.Set(k, uint64(step))
			want[k] = uint64(step)
		}
		if step%200 == 0 {
			snaps = append(snaps, snapshot{o, maps.Clone(want)})
		}
		checkSeqOrder(t, o, want, key())
	}
	for _, s := range snaps {
		checkSeqOrder(t, s.o, s.want, 3*seqGap)
	}
}

func checkSeqOrder(t *testing.T, o seqOrder, want map[uint64]uint64, probe uint64) {
	t.Helper()
	keys := make([]uint64, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var got []uint64
	o.All(func(seq, id uint64) bool {
		if want[seq] != id {
			t.Fatalf("All: %d → %d, want %d", seq, id, want[seq])
		}
		got = append(got, seq)
		return true
	})
	if !slices.Equal(got, keys) {
		t.Fatalf("All keys %v, want %v", got, keys)
	}
	if id, ok := o.Get(probe); ok != (want[probe] == id && hasKey(want, probe)) {
		t.Fatalf("Get(%d) = %d, %v", probe, id, ok)
	}
	i, found := slices.BinarySearch(keys, probe)
	wantCeil, hasCeil := uint64(0), i < len(keys)
	if hasCeil {
		wantCeil = keys[i]
	}
	if c, ok := o.Ceil(probe); ok != hasCeil || c != wantCeil {
		t.Fatalf("Ceil(%d) = %d, %v, want %d, %v", probe, c, ok, wantCeil, hasCeil)
	}
	j := i - 1
	if found {
		j = i
	}
	wantFloor, hasFloor := uint64(0), j >= 0
	if hasFloor {
		wantFloor = keys[j]
	}
	if f, ok := o.Floor(probe); ok != hasFloor || f != wantFloor {
		t.Fatalf("Floor(%d) = %d, %v, want %d, %v", probe, f, ok, wantFloor, hasFloor)
	}
	mn, okMin := o.Min()
	mx, okMax := o.Max()
	if okMin != (len(keys) > 0) || okMax != okMin || okMin && (mn != keys[0] || mx != keys[len(keys)-1]) {
		t.Fatalf("Min %d %v Max %d %v, keys %v", mn, okMin, mx, okMax, keys)
	}
}

func hasKey(m map[uint64]uint64, k uint64) bool {
	_, ok := m[k]
	return ok
}
