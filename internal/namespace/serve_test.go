package namespace_test

import (
	"context"
	"net"
	"testing"

	"cellguard/internal/lancedbtest"
	"cellguard/internal/namespace"
	"cellguard/internal/natstest"
)

// TestServeStops: Serve returns when its context ends, after a commit
// went through it, and leaves no goroutine of the package behind.
func TestServeStops(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		e := newEnv(t, envOptions{})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- namespace.Serve(ctx, ln, e.ns) }()
		e.url = "http://" + ln.Addr().String()
		out := runOps(t, v, e, "s", nil, map[string]any{"op": "create", "rows": []map[string]any{{"id": 1}}})
		if out.Results[0].Version != 1 {
			t.Fatalf("create: %+v", out.Results)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Serve: %v", err)
		}
		natstest.CheckNoGoroutines(t, "cellguard/internal/namespace")
	})
}
