package natstest

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// CheckNoGoroutines fails t if, within a few seconds, goroutines still
// run code of any of the packages named (import paths such as
// "cellguard/committer"). Call it after closing what the test started: it
// catches goroutines a component forgot to wait for. The calling test's
// own goroutine and its parents are ignored, as are goroutines that run
// the packages only as callers further down (e.g. a nats.go callback
// registered by one: its frames are the package's too, so it counts).
func CheckNoGoroutines(t testing.TB, pkgs ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := goroutinesIn(pkgs)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("natstest: %d goroutine(s) of %v still running after close:\n\n%s", len(left), pkgs, strings.Join(left, "\n\n"))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// goroutinesIn returns the stacks of the goroutines, other than test
// runners, with a frame in one of pkgs.
func goroutinesIn(pkgs []string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "testing.tRunner") || strings.Contains(g, "testing.(*T).Run") || strings.Contains(g, "natstest.goroutinesIn") {
			continue
		}
		for _, p := range pkgs {
			if strings.Contains(g, "\n"+p+".") {
				out = append(out, g)
				break
			}
		}
	}
	return out
}
