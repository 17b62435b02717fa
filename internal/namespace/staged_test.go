package namespace_test

import (
	"cellguard/internal/lancedbtest"
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStagedFIFO: a staged manifest that is a FIFO (which no one writes)
// is refused at once with 400 code 13 naming it, instead of blocking the
// read and, with it, the table's commit lock; the next commit goes
// through.
func TestStagedFIFO(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		e := newEnv(t, envOptions{})
		out := runOps(t, v, e, "f", nil, map[string]any{"op": "create", "rows": []map[string]any{{"id": 1}}})
		if out.Results[0].Version != 1 {
			t.Fatalf("create: %+v", out.Results)
		}
		name := "18446744073709551613.manifest-aaaaaaaa-0000-0000-0000-000000000001" // version 2
		if err := syscall.Mkfifo(filepath.Join(e.root, "f.lance", "_versions", name), 0o644); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		loc := strings.TrimPrefix(e.root, "/") + "/f.lance/_versions/"
		// A guard against a hang (the bug this tests), not a timed assertion.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		status, body := callCtx(t, ctx, "POST", e.url+"/v1/table/f/version/create",
			`{"id":["f"],"version":2,"manifest_path":"`+loc+name+`","naming_scheme":"V2"}`, nil)
		if status != 400 || body == nil || int(body["code"].(float64)) != 13 || !strings.Contains(body["error"].(string), "FIFO") {
			t.Fatalf("version/create of a FIFO: %d %v, want 400 code 13 naming a FIFO", status, body)
		}
		out = runOps(t, v, e, "f", nil, map[string]any{"op": "open"}, map[string]any{"op": "add", "rows": []map[string]any{{"id": 2}}})
		if out.Results[len(out.Results)-1].Version != 2 || out.Results[len(out.Results)-1].Error != "" {
			t.Fatalf("add after the FIFO: %+v, want version 2", out.Results)
		}
	})
}
