package table

import (
	"sync"
	"weak"
)

// weakSet holds immutable values in use by a key, weakly, so that equal
// values built apart become one: a value no manifest holds any more is
// collected, and its entry is swept once the set has doubled since its
// last sweep. same, when set, confirms that a value found under a key is
// equal to the one offered (for keys that are hashes); a value that is
// not stays unshared.
type weakSet[K comparable, T any] struct {
	mu    sync.Mutex
	m     map[K]weak.Pointer[T]
	swept int // entries after the last sweep
	same  func(a, b *T) bool
}

func newWeakSet[K comparable, T any](same func(a, b *T) bool) *weakSet[K, T] {
	return &weakSet[K, T]{m: map[K]weak.Pointer[T]{}, same: same}
}

// get returns the value in use under key, or nil.
func (ws *weakSet[K, T]) get(key K) *T {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.m[key].Value()
}

// put returns the value in use under key that equals v, or v, which it
// records when the key is free.
func (ws *weakSet[K, T]) put(key K, v *T) *T {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if in := ws.m[key].Value(); in != nil {
		if ws.same == nil || ws.same(in, v) {
			return in
		}
		return v // another value under the same hash keeps its entry
	}
	if len(ws.m) >= max(2*ws.swept, 64) {
		for k, p := range ws.m {
			if p.Value() == nil {
				delete(ws.m, k)
			}
		}
		ws.swept = len(ws.m)
	}
	ws.m[key] = weak.Make(v)
	return v
}

// len returns the entries held, collected values' included.
func (ws *weakSet[K, T]) len() int {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return len(ws.m)
}
