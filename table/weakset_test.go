package table

import (
	"runtime"
	"testing"
)

// TestWeakSetKeepsUnequalValuesApart checks that a value offered under
// a key held by an unequal one (a hash collision) is returned as it is,
// and the held value keeps its entry.
func TestWeakSetKeepsUnequalValuesApart(t *testing.T) {
	ws := newWeakSet[int, string](func(a, b *string) bool { return *a == *b })
	x, y, x2 := new("x"), new("y"), new("x")
	if got := ws.put(1, x); got != x {
		t.Fatal("the first value under a key was not recorded")
	}
	if got := ws.put(1, y); got != y {
		t.Fatalf("an unequal value under a held key came back as %q", *got)
	}
	if got := ws.put(1, x2); got != x {
		t.Fatal("an equal value did not come back as the held one")
	}
	if got := ws.get(1); got != x {
		t.Fatal("the held value lost its entry")
	}
	runtime.KeepAlive(x)
}
