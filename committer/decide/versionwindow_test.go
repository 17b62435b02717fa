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

// TestVersionWindowRingFitsItsSpan checks the ring's size: a window of a
// few versions costs a few slots, one of a few hundred the next power of
// two, and an emptied window that had grown holds none.
func TestVersionWindowRingFitsItsSpan(t *testing.T) {
	var w versionWindow[int]
	for v := uint64(7); v < 10; v++ {
		w.set(v, int(v))
	}
	if len(w.slots) != minSlots {
		t.Fatalf("3 versions: %d slots; want %d", len(w.slots), minSlots)
	}
	for v := uint64(10); v < 307; v++ {
		w.set(v, int(v))
	}
	if len(w.slots) != 512 {
		t.Fatalf("300 versions: %d slots; want 512", len(w.slots))
	}
	for v := uint64(7); v < 307; v++ {
		if x, ok := w.remove(v); !ok || x != int(v) {
			t.Fatalf("remove(%d) = %d, %v", v, x, ok)
		}
	}
	if w.slots != nil || w.len() != 0 {
		t.Fatalf("emptied: %d slots, %d held; want none", len(w.slots), w.len())
	}
	w.set(5, 5)
	if x, ok := w.get(5); !ok || x != 5 || len(w.slots) != minSlots {
		t.Fatalf("set after emptied: get(5) = %d, %v; %d slots", x, ok, len(w.slots))
	}
}
