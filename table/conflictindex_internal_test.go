package table

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestPushSlidMatchesAppend drives a queue through pushSlid and a plain
// slice through append with the same random pushes and drops at either
// end: they must hold the same entries throughout; and a window of steady
// length that slides must stop allocating.
func TestPushSlidMatchesAppend(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var q, arr, ref []int
	for step := range 100000 {
		switch op := r.IntN(10); {
		case op < 6 || len(ref) == 0:
			q, ref = pushSlid(q, &arr, step), append(ref, step)
		case op < 9:
			q, ref = q[1:], ref[1:]
		default:
			q, ref = q[:len(q)-1], ref[:len(ref)-1]
		}
		if !slices.Equal(q, ref) {
			t.Fatalf("step %d: queue %v; want %v", step, q, ref)
		}
	}
	q, arr = nil, nil
	for i := range 300 {
		q = pushSlid(q, &arr, i)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		q = pushSlid(q[1:], &arr, 0)
	})
	if allocs != 0 {
		t.Errorf("a sliding window of 300 allocates %.2f times per push; want 0", allocs)
	}
}
