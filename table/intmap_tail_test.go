package table

import (
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// TestIntMapTailMatchesGoMap drives intMaps the way manifests drive them,
// mostly appending keys above every other (dense or with gaps), with
// overwrites, deletions and keys below, and branches: each step starts
// from a random earlier version, as a rolled-back decision does, so that
// versions sharing one tail buffer append to it in turn. After every step
// the new version must agree with a Go map on every query, diffMaps
// between the version it came from and it must report exactly the keys
// that differ, and at the end every version must still hold what it held.
func TestIntMapTailMatchesGoMap(t *testing.T) {
	for seed := range uint64(30) {
		r := rand.New(rand.NewPCG(seed, seed*13+5))
		type version struct {
			m   intMap[int]
			ref map[uint64]int
			top uint64
		}
		versions := []version{{ref: map[uint64]int{}}}
		for step := range 800 {
			from := versions[len(versions)-1]
			if r.IntN(5) == 0 { // branch from an older version
				from = versions[r.IntN(len(versions))]
			}
			m, ref, top := from.m, maps.Clone(from.ref), from.top
			key := func() uint64 { return r.Uint64N(top + 1) }
			switch op := r.IntN(20); {
			case op < 12: // append above every key: next, or after a gap
				k := top + 1 + uint64(r.IntN(3)/2)*uint64(r.IntN(70))
				m, ref[k], top = m.Set(k, step), step, k
			case op < 15:
				k := key()
				m, ref[k] = m.Set(k, step), step
			case op < 19 && len(ref) > 0:
				keys := slices.Sorted(maps.Keys(ref))
				k := keys[len(keys)-1]
				if r.IntN(2) == 0 {
					k = keys[r.IntN(len(keys))]
				}
				m = m.Delete(k)
				delete(ref, k)
			default:
				k := key()
				m = m.Delete(k)
				delete(ref, k)
			}
			checkIntMap(t, m, ref, key)
			checkDiff(t, from.m, from.ref, m, ref)
			versions = append(versions, version{m, ref, top})
		}
		for i, v := range versions {
			if !sameContents(v.m, v.ref) {
				t.Fatalf("seed %d: version %d changed by later edits", seed, i)
			}
		}
		a, b := versions[r.IntN(len(versions))], versions[r.IntN(len(versions))]
		checkDiff(t, a.m, a.ref, b.m, b.ref)
	}
}

// checkDiff checks diffMaps(a, b) against the reference maps: every key
// whose binding differs, once, ascending, with both sides' values.
func checkDiff(t *testing.T, a intMap[int], aref map[uint64]int, b intMap[int], bref map[uint64]int) {
	t.Helper()
	var want []uint64
	for k, v := range aref {
		if w, ok := bref[k]; !ok || w != v {
			want = append(want, k)
		}
	}
	for k := range bref {
		if _, ok := aref[k]; !ok {
			want = append(want, k)
		}
	}
	slices.Sort(want)
	var got []uint64
	diffMaps(a, b, func(x, y int) bool { return false }, func(k uint64, x int, inA bool, y int, inB bool) {
		xa, okA := aref[k]
		yb, okB := bref[k]
		if inA != okA || inB != okB || inA && x != xa || inB && y != yb {
			t.Fatalf("diff at %d: %d,%v / %d,%v; want %d,%v / %d,%v", k, x, inA, y, inB, xa, okA, yb, okB)
		}
		got = append(got, k)
	})
	if !slices.Equal(got, want) {
		t.Fatalf("diff keys %v; want %v", got, want)
	}
	var plain []uint64 // diffMaps' shortcut must visit what the plain walk does
	diffTries(a, b, func(x, y int) bool { return false }, func(k uint64, _ int, _ bool, _ int, _ bool) {
		plain = append(plain, k)
	})
	if !slices.Equal(got, plain) {
		t.Fatalf("diffMaps visits %v; diffTries %v", got, plain)
	}
}

// TestIntMapTailAppendsInPlace checks what the tail is for: appending
// keys in ascending order allocates a tail buffer and a trie path once per
// leaf's width, not on every append.
func TestIntMapTailAppendsInPlace(t *testing.T) {
	var m intMap[int]
	for k := range uint64(100_000) {
		m = m.Set(k, int(k))
	}
	k := uint64(100_000)
	allocs := testing.AllocsPerRun(imWidth*20, func() {
		m = m.Set(k, int(k))
		k++
	})
	if allocs > 0.5 {
		t.Errorf("appending allocates %.2f times per key; want a fraction", allocs)
	}
}

// TestIntMapTailConcurrentBranches appends to versions sharing one tail
// buffer from several goroutines at once: only one may write in place,
// the others copy, and every branch must see its own keys only. Run with
// -race.
func TestIntMapTailConcurrentBranches(t *testing.T) {
	var base intMap[int]
	for k := range uint64(40) {
		base = base.Set(k, int(k))
	}
	var wg sync.WaitGroup
	results := make([]intMap[int], 8)
	for g := range results {
		wg.Go(func() {
			m := base
			for j := range uint64(5) {
				m = m.Set(40+j, g)
			}
			results[g] = m
		})
	}
	wg.Wait()
	for g, m := range results {
		for j := range uint64(5) {
			if v, ok := m.Get(40 + j); !ok || v != g {
				t.Fatalf("branch %d: key %d = %d, %v", g, 40+j, v, ok)
			}
		}
		if m.Len() != 45 {
			t.Fatalf("branch %d has %d keys", g, m.Len())
		}
	}
	if base.Len() != 40 {
		t.Fatalf("base has %d keys", base.Len())
	}
	if _, ok := base.Get(40); ok {
		t.Fatal("base sees a branch's key")
	}
}
