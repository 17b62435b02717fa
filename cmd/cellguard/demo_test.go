package main

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
	cfg := demoConfig{
		dataDir: t.TempDir(), fragments: 4, rows: 200, workers: 3,
		duration: 3 * time.Second, updateEvery: 15 * time.Millisecond, workTime: 40 * time.Millisecond,
		settle: 30 * time.Second, crash: true, seed: 7, quiet: true,
		onStall: func() { t.Logf("goroutines when the workers had not caught up:\n%s", allStacks()) },
	}
	if testing.Short() {
		cfg.duration = 2 * time.Second
	}
	if *demoLong {
		cfg.fragments, cfg.rows, cfg.workers, cfg.duration = 16, 2000, 4, 45*time.Second
		cfg.updateEvery, cfg.workTime = 20*time.Millisecond, 60*time.Millisecond
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
	cfg := demoConfig{
		dataDir: t.TempDir(), fragments: 2, rows: 100, workers: 2,
		duration: 1500 * time.Millisecond, updateEvery: 5 * time.Millisecond, workTime: 40 * time.Millisecond,
		settle: 20 * time.Second, seed: 3, quiet: true, unsafe: true,
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
