// Package gctest tells tests whether an object is still reachable.
package gctest

import (
	"runtime"
	"testing"
	"time"
)

// Watch returns a channel closed once the object ptr points to has been
// collected.
func Watch[T any](ptr *T) <-chan struct{} {
	released := make(chan struct{})
	runtime.AddCleanup(ptr, func(ch chan struct{}) { close(ch) }, released)
	return released
}

// AwaitReleased collects garbage until released (from Watch) is closed,
// or fails the test: what names the object that is still reachable.
func AwaitReleased(t testing.TB, released <-chan struct{}, what string) {
	t.Helper()
	for range 20 {
		runtime.GC()
		select {
		case <-released:
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("%s still reachable after 20 collections", what)
}
