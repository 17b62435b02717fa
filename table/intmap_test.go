package table

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestIntMapMatchesGoMap runs random operations against an intMap and a Go
// map side by side, and checks after each step that they agree on every
// query; it also keeps every version made along the way and checks at the
// end that later edits left each of them unchanged.
func TestIntMapMatchesGoMap(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, seed*7+1))
		// Key spaces from dense to sparse to full-width.
		limit := []uint64{64, 1 << 12, 1 << 40, math.MaxUint64}[seed%4]
		key := func() uint64 {
			if limit == math.MaxUint64 {
				return r.Uint64()
			}
			return r.Uint64N(limit)
		}
		var m intMap[int]
		ref := map[uint64]int{}
		type snapshot struct {
			m   intMap[int]
			ref map[uint64]int
		}
		var snaps []snapshot
		var keys []uint64
		for step := range 600 {
			switch op := r.IntN(10); {
			case op < 6:
				k := key()
				if len(keys) > 0 && r.IntN(3) == 0 {
					k = keys[r.IntN(len(keys))] // overwrite
				}
				m = m.Set(k, step)
				ref[k] = step
				keys = append(keys, k)
			case op < 9 && len(keys) > 0:
				k := keys[r.IntN(len(keys))]
				m = m.Delete(k)
				delete(ref, k)
			default:
				k := key()
				m = m.Delete(k) // usually absent
				delete(ref, k)
			}
			checkIntMap(t, m, ref, key)
			if step%50 == 0 {
				snaps = append(snaps, snapshot{m, clone(ref)})
			}
		}
		for i, s := range snaps {
			if !sameContents(s.m, s.ref) {
				t.Fatalf("seed %d: snapshot %d changed by later edits", seed, i)
			}
		}
	}
}

func clone(m map[uint64]int) map[uint64]int {
	out := make(map[uint64]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sameContents(m intMap[int], ref map[uint64]int) bool {
	if m.Len() != len(ref) {
		return false
	}
	n := 0
	ok := true
	m.All(func(k uint64, v int) bool {
		n++
		if w, found := ref[k]; !found || w != v {
			ok = false
			return false
		}
		return true
	})
	return ok && n == len(ref)
}

func checkIntMap(t *testing.T, m intMap[int], ref map[uint64]int, key func() uint64) {
	t.Helper()
	if m.Len() != len(ref) {
		t.Fatalf("Len %d; want %d", m.Len(), len(ref))
	}
	sorted := make([]uint64, 0, len(ref))
	for k := range ref {
		sorted = append(sorted, k)
	}
	slices.Sort(sorted)
	var walked []uint64
	m.All(func(k uint64, v int) bool {
		walked = append(walked, k)
		if ref[k] != v {
			t.Fatalf("All: %d → %d; want %d", k, v, ref[k])
		}
		return true
	})
	if !slices.Equal(walked, sorted) {
		t.Fatalf("All yields %v; want ascending %v", walked, sorted)
	}
	if mx, ok := m.Max(); ok != (len(sorted) > 0) || ok && mx != sorted[len(sorted)-1] {
		t.Fatalf("Max = %d, %v", mx, ok)
	}
	if mn, ok := m.Min(); ok != (len(sorted) > 0) || ok && mn != sorted[0] {
		t.Fatalf("Min = %d, %v", mn, ok)
	}
	// Probes: present keys, their neighbours, random keys, the extremes.
	probes := []uint64{0, 1, math.MaxUint64, math.MaxUint64 - 1, key(), key()}
	for _, k := range sorted[:min(len(sorted), 8)] {
		probes = append(probes, k, k-1, k+1)
	}
	for _, k := range probes {
		v, ok := m.Get(k)
		w, found := ref[k]
		if ok != found || v != w {
			t.Fatalf("Get(%d) = %d, %v; want %d, %v", k, v, ok, w, found)
		}
		// Floor: largest ≤ k; Ceil: smallest ≥ k.
		i, exact := slices.BinarySearch(sorted, k)
		wantFloor, hasFloor := uint64(0), exact || i > 0
		if exact {
			wantFloor = k
		} else if i > 0 {
			wantFloor = sorted[i-1]
		}
		wantCeil, hasCeil := uint64(0), i < len(sorted)
		if hasCeil {
			wantCeil = sorted[i]
		}
		if f, ok := m.Floor(k); ok != hasFloor || ok && f != wantFloor {
			t.Fatalf("Floor(%d) = %d, %v; want %d, %v", k, f, ok, wantFloor, hasFloor)
		}
		if c, ok := m.Ceil(k); ok != hasCeil || ok && c != wantCeil {
			t.Fatalf("Ceil(%d) = %d, %v; want %d, %v", k, c, ok, wantCeil, hasCeil)
		}
		below, hasBelow, above, hasAbove := m.Neighbors(k)
		j := i
		if exact {
			j = i + 1
		}
		if hasBelow != (i > 0) || hasBelow && below != sorted[i-1] {
			t.Fatalf("Neighbors(%d) below = %d, %v", k, below, hasBelow)
		}
		if hasAbove != (j < len(sorted)) || hasAbove && above != sorted[j] {
			t.Fatalf("Neighbors(%d) above = %d, %v", k, above, hasAbove)
		}
	}
}

func TestIntMapEmptyAndEdges(t *testing.T) {
	var m intMap[string]
	if _, ok := m.Get(0); ok {
		t.Error("Get on empty")
	}
	if _, ok := m.Max(); ok {
		t.Error("Max on empty")
	}
	if _, ok := m.Floor(5); ok {
		t.Error("Floor on empty")
	}
	if _, ok := m.Ceil(5); ok {
		t.Error("Ceil on empty")
	}
	if d := m.Delete(3); d.Len() != 0 {
		t.Error("Delete on empty")
	}
	m = m.Set(math.MaxUint64, "max").Set(0, "zero")
	if v, _ := m.Get(math.MaxUint64); v != "max" {
		t.Errorf("Get(max) = %q", v)
	}
	if f, ok := m.Floor(math.MaxUint64 - 1); !ok || f != 0 {
		t.Errorf("Floor(max-1) = %d, %v", f, ok)
	}
	if c, ok := m.Ceil(1); !ok || c != math.MaxUint64 {
		t.Errorf("Ceil(1) = %d, %v", c, ok)
	}
	// A small trie asked about a key beyond its height.
	small := intMap[int]{}.Set(3, 1)
	if f, ok := small.Floor(1 << 50); !ok || f != 3 {
		t.Errorf("Floor beyond height = %d, %v", f, ok)
	}
	if _, ok := small.Ceil(1 << 50); ok {
		t.Errorf("Ceil beyond height found a key")
	}
	if small.Delete(3).root != nil {
		t.Errorf("deleting the last key leaves nodes behind")
	}
}

// TestIntMapSharesStructure checks that an update copies only the nodes on
// one path: a set in a map of 100k keys allocates O(height) nodes, each a
// node and its slot slice (the trie has 4 levels here).
func TestIntMapSharesStructure(t *testing.T) {
	var m intMap[int]
	for k := range uint64(100_000) {
		m = m.Set(k*3, int(k))
	}
	allocs := testing.AllocsPerRun(50, func() {
		_ = m.Set(150_001, 1)
	})
	if allocs > 2*4 {
		t.Errorf("Set allocates %.0f times in a 100k-key map; want about the trie height", allocs)
	}
	next := m.Set(7, 7).Delete(3)
	if _, ok := m.Get(7); ok {
		t.Error("old version sees a new key")
	}
	if v, ok := m.Get(3); !ok || v != 1 {
		t.Error("old version lost a deleted key")
	}
	if _, ok := next.Get(3); ok {
		t.Error("new version still has the deleted key")
	}
}

// TestIntMapBranches appends keys in ascending order, as appended
// fragments are, and then, from versions along the way, sets keys in
// several branches: each branch sees its own edits only, and the versions
// it branched from are unchanged.
func TestIntMapBranches(t *testing.T) {
	type version struct {
		m   intMap[int]
		ref map[uint64]int
	}
	var m intMap[int]
	ref := map[uint64]int{}
	var versions []version
	for k := range uint64(700) {
		m = m.Set(k, int(k))
		ref[k] = int(k)
		if k%7 == 3 {
			versions = append(versions, version{m, clone(ref)})
		}
	}
	check := func(m intMap[int], want map[uint64]int) {
		t.Helper()
		if m.Len() != len(want) {
			t.Fatalf("Len %d, want %d", m.Len(), len(want))
		}
		for k, v := range want {
			if got, ok := m.Get(k); !ok || got != v {
				t.Fatalf("Get(%d) = %d, %v; want %d", k, got, ok, v)
			}
		}
		n := 0
		m.All(func(k uint64, v int) bool {
			if want[k] != v {
				t.Fatalf("All: %d → %d, want %d", k, v, want[k])
			}
			n++
			return true
		})
		if n != len(want) {
			t.Fatalf("All yielded %d keys, want %d", n, len(want))
		}
	}
	for i, v := range versions {
		next := uint64(len(v.ref))
		for b := range 3 {
			bm, bref := v.m, clone(v.ref)
			for j := range uint64(b + 1) { // branches of different lengths
				bm = bm.Set(next+j, -1-b)
				bref[next+j] = -1 - b
			}
			check(bm, bref)
		}
		check(v.m, v.ref)
		if i > 0 {
			check(versions[i-1].m, versions[i-1].ref)
		}
	}
	check(m, ref)
}
