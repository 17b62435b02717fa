package demo

import (
	"bytes"
	"flag"
	"runtime"
	"strings"
	"testing"
	"time"
)

var demoLong = flag.Bool("demo.long", false, "run the demo scenario at full size (about a minute)")

// The demo's scenario end to end: workers publish y = f(x) with
// preconditions while x keeps changing, one worker crashes holding a
// rejection and restarts; no stale value is ever published, and y == f(x)
// everywhere once the workers catch up.
func TestDemoScenario(t *testing.T) {
	cfg := Options{
		DataDir: t.TempDir(), Fragments: 4, Rows: 200, Workers: 3,
		Duration: 3 * time.Second, UpdateEvery: 15 * time.Millisecond, WorkTime: 40 * time.Millisecond,
		Settle: 30 * time.Second, Crash: true, Seed: 7, Quiet: true,
		OnStall: func() { t.Logf("goroutines when the workers had not caught up:\n%s", allStacks()) },
	}
	if testing.Short() {
		cfg.Duration = 2 * time.Second
	}
	if *demoLong {
		cfg.Fragments, cfg.Rows, cfg.Workers, cfg.Duration = 16, 2000, 4, 45*time.Second
		cfg.UpdateEvery, cfg.WorkTime = 20*time.Millisecond, 60*time.Millisecond
	}
	var out bytes.Buffer
	res, err := runDemo(t.Context(), cfg, &out)
	if err != nil {
		t.Fatalf("runDemo: %v\n%s", err, out.String())
	}
	t.Logf("\n%s", out.String())
	if !res.ok() {
		t.Fatalf("demo failed: %+v", res)
	}
	if res.stalePublished != 0 || res.staleAtHead != 0 {
		t.Errorf("stale values: %d published, %d at head; want 0", res.stalePublished, res.staleAtHead)
	}
	if !strings.Contains(out.String(), "stale values published: 0") || !strings.Contains(out.String(), "PASS") {
		t.Errorf("summary lacks the verdict:\n%s", out.String())
	}
}

// Without preconditions the same scenario publishes stale values, and
// the verification sees them: the check is not vacuous.
func TestDemoWithoutPreconditionsIsCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	cfg := Options{
		DataDir: t.TempDir(), Fragments: 2, Rows: 100, Workers: 2,
		Duration: 1500 * time.Millisecond, UpdateEvery: 5 * time.Millisecond, WorkTime: 40 * time.Millisecond,
		Settle: 20 * time.Second, Seed: 3, Quiet: true, Unsafe: true,
	}
	var out bytes.Buffer
	res, err := runDemo(t.Context(), cfg, &out)
	if err != nil {
		t.Fatalf("runDemo: %v\n%s", err, out.String())
	}
	if res.stalePublished == 0 || res.ok() {
		t.Errorf("without preconditions: %d stale values published, ok=%v; want some, not ok\n%s", res.stalePublished, res.ok(), out.String())
	}
}

// allStacks is every goroutine's stack, for a test that stalled.
func allStacks() []byte {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n]
		}
		buf = make([]byte, 2*len(buf))
	}
}
