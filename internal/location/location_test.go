package location

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestCreateIfAbsentRace: of writers racing for one key, exactly one
// creates it, the others get errExists, the winner's bytes stay, and no
// staging file is left behind — on a directory (hard link) and in a
// bucket (IfNotExist).
func TestCreateIfAbsentRace(t *testing.T) {
	ctx := context.Background()
	for _, url := range []string{filepath.Join(t.TempDir(), "t.lance"), "mem://"} {
		t.Run(strings.SplitN(url, ":", 2)[0], func(t *testing.T) {
			loc, err := OpenLocation(ctx, url, true)
			if err != nil {
				t.Fatal(err)
			}
			defer loc.Close()
			const n = 8
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = loc.createIfAbsent(ctx, "_versions/x.manifest", fmt.Appendf(nil, "writer %d", i))
				}()
			}
			wg.Wait()
			won := -1
			for i, err := range errs {
				switch {
				case err == nil && won >= 0:
					t.Fatalf("writers %d and %d both created the key", won, i)
				case err == nil:
					won = i
				case !IsExists(err):
					t.Fatalf("writer %d: %v", i, err)
				}
			}
			if won < 0 {
				t.Fatal("no writer created the key")
			}
			b, err := loc.Bucket.ReadAll(ctx, "_versions/x.manifest")
			if err != nil || string(b) != fmt.Sprintf("writer %d", won) {
				t.Fatalf("content %q, %v; want writer %d's", b, err, won)
			}
			if loc.dir != "" {
				ents, err := os.ReadDir(filepath.Join(loc.dir, "_versions"))
				if err != nil || len(ents) != 1 {
					t.Errorf("_versions holds %v (%v), want only the manifest", ents, err)
				}
			}
		})
	}
}

// TestCheckWritable: a writable location passes and keeps nothing; one
// whose _versions is a file fails with ErrLocation.
func TestCheckWritable(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "t.lance")
	loc, err := OpenLocation(ctx, dir, true)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	if err := CheckWritable(ctx, loc); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "_versions")); len(ents) != 0 {
		t.Errorf("probe left %v", ents)
	}
	if err := os.RemoveAll(filepath.Join(dir, "_versions")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "_versions"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckWritable(ctx, loc); !errors.Is(err, ErrLocation) {
		t.Errorf("unwritable: %v, want ErrLocation", err)
	}
}

// TestCreatePairIfAbsent: both objects are created with their bytes;
// each one already there is reported as IsExists and keeps its bytes,
// the other is still created; nothing staged is left behind.
func TestCreatePairIfAbsent(t *testing.T) {
	ctx := context.Background()
	for _, url := range []string{filepath.Join(t.TempDir(), "t.lance"), "mem://"} {
		t.Run(strings.SplitN(url, ":", 2)[0], func(t *testing.T) {
			loc, err := OpenLocation(ctx, url, true)
			if err != nil {
				t.Fatal(err)
			}
			defer loc.Close()
			read := func(key string) string {
				b, err := loc.Bucket.ReadAll(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			e1, e2 := loc.CreatePairIfAbsent(ctx, "_transactions/1.txn", []byte("t1"), "_versions/1.manifest", []byte("m1"))
			if e1 != nil || e2 != nil || read("_transactions/1.txn") != "t1" || read("_versions/1.manifest") != "m1" {
				t.Fatalf("first pair: %v %v", e1, e2)
			}
			e1, e2 = loc.CreatePairIfAbsent(ctx, "_transactions/1.txn", []byte("t2"), "_versions/2.manifest", []byte("m2"))
			if !IsExists(e1) || e2 != nil || read("_transactions/1.txn") != "t1" || read("_versions/2.manifest") != "m2" {
				t.Fatalf("first there: %v %v", e1, e2)
			}
			e1, e2 = loc.CreatePairIfAbsent(ctx, "_transactions/3.txn", []byte("t3"), "_versions/2.manifest", []byte("m3"))
			if e1 != nil || !IsExists(e2) || read("_transactions/3.txn") != "t3" || read("_versions/2.manifest") != "m2" {
				t.Fatalf("second there: %v %v", e1, e2)
			}
			if loc.dir != "" {
				for _, d := range []string{"_versions", "_transactions"} {
					ents, err := os.ReadDir(filepath.Join(loc.dir, d))
					if err != nil || len(ents) != 2 {
						t.Errorf("%s holds %v (%v), want 2 objects", d, ents, err)
					}
				}
			}
		})
	}
}
