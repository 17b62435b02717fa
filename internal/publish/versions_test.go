package publish

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"cellguard/table"
)

// TestVersionsWhileFilesComeAndGo lists a `_versions/` directory in which
// another writer keeps creating temporary files and renaming them away, as
// Lance and our own hint writer do. A listing must never fail because an
// entry vanished between reading the directory and stat'ing the entry.
func TestVersionsWhileFilesComeAndGo(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	vdir := filepath.Join(dir, "_versions")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	for v := uint64(1); v <= 3; v++ {
		if err := os.WriteFile(filepath.Join(vdir, table.ManifestFileName(v, true)), []byte("m"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	loc, err := OpenLocation(ctx, "file://"+dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for j := range 16 {
				tmp := filepath.Join(vdir, fmt.Sprintf("latest_version_hint.json.%d-%d.tmp", i, j))
				if err := os.WriteFile(tmp, []byte(`{"version":3}`), 0o644); err != nil {
					t.Error(err)
					return
				}
				if err := os.Rename(tmp, filepath.Join(vdir, "latest_version_hint.json")); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	for range 500 {
		vs, err := Versions(ctx, loc)
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) != 3 || vs[0] != 1 || vs[2] != 3 {
			t.Fatalf("versions %v, want [1 2 3]", vs)
		}
	}
}
