package decide

import (
	"math/rand/v2"
	"testing"
)

// TestVersionWindowMatchesMap runs random operations, shaped like a
// state's window (versions set at the top, removed from the bottom, rolled
// back from the top, now and then anywhere, below the span included),
// against a versionWindow and a Go map, and checks that they agree on
// every version around the span after each step.
func TestVersionWindowMatchesMap(t *testing.T) {
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 3))
		var w versionWindow[int]
		ref := map[uint64]int{}
		top, bottom := uint64(1000), uint64(1000)
		for step := range 3000 {
			switch op := r.IntN(12); {
			case op < 5:
				top++
				w.set(top, step)
				ref[top] = step
			case op < 7 && bottom < top:
				w.remove(bottom)
				delete(ref, bottom)
				bottom++
			case op < 8 && top > bottom:
				w.remove(top)
				delete(ref, top)
				top--
			case op < 10:
				v := bottom - 5 + r.Uint64N(top-bottom+10)
				if r.IntN(2) == 0 {
					w.set(v, step)
					ref[v] = step
				} else {
					x, ok := w.remove(v)
					y, found := ref[v]
					if ok != found || x != y {
						t.Fatalf("seed %d step %d: remove(%d) = %d, %v; want %d, %v", seed, step, v, x, ok, y, found)
					}
					delete(ref, v)
				}
			default:
				v := top + 1 + r.Uint64N(40)
				w.set(v, step)
				ref[v] = step
				top = max(top, v)
			}
			if w.len() != len(ref) {
				t.Fatalf("seed %d step %d: len %d; want %d", seed, step, w.len(), len(ref))
			}
			// Every version around the window, every 64 steps and at the
			// end; a few random ones at every step.
			lo, hi := bottom-50, top+50
			probes := 16
			if step%64 == 0 || step == 2999 {
				probes = int(hi - lo + 1)
			}
			for i := range probes {
				v := lo + uint64(i)
				if probes == 16 {
					v = lo + r.Uint64N(hi-lo+1)
				}
				x, ok := w.get(v)
				y, found := ref[v]
				if ok != found || x != y {
					t.Fatalf("seed %d step %d: get(%d) = %d, %v; want %d, %v", seed, step, v, x, ok, y, found)
				}
			}
		}
	}
}
