package location

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestReadRegular: a regular file is read whole; a FIFO, a directory and
// a file over the limit are refused with typed errors, and the FIFO
// (which no one writes) is refused at once rather than blocking.
func TestReadRegular(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "t.lance")
	loc, err := OpenLocation(t.Context(), dir, true)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	if err := os.MkdirAll(filepath.Join(dir, "_versions", "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "_versions", "ok"), []byte("manifest"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "_versions", "fifo"), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// A guard against a hang, not a timed assertion: without the
	// non-blocking open the FIFO read would block until this ends.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	b, err := loc.ReadRegular(ctx, "_versions/ok", 100)
	if err != nil || string(b) != "manifest" {
		t.Errorf("ReadRegular(ok) = %q, %v; want %q", b, err, "manifest")
	}
	cases := []struct {
		key  string
		max  int64
		want error
	}{
		{"_versions/fifo", 100, ErrNotRegular},
		{"_versions/adir", 100, ErrNotRegular},
		{"_versions/ok", 3, ErrTooLarge},
	}
	for _, c := range cases {
		if _, err := loc.ReadRegular(ctx, c.key, c.max); !errors.Is(err, c.want) {
			t.Errorf("ReadRegular(%s, %d) = %v; want %v", c.key, c.max, err, c.want)
		}
	}
	if _, err := loc.ReadRegular(ctx, "_versions/missing", 100); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadRegular(missing) = %v; want not exist", err)
	}
	if ctx.Err() != nil {
		t.Errorf("a refusal waited for the guard's deadline: %v", ctx.Err())
	}
}

// TestReadRegularBucket: in a bucket (no special files) the size limit
// still holds.
func TestReadRegularBucket(t *testing.T) {
	loc, err := OpenLocation(t.Context(), "mem://", true)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	if err := loc.Bucket.WriteAll(t.Context(), "_versions/ok", []byte("manifest"), nil); err != nil {
		t.Fatal(err)
	}
	if b, err := loc.ReadRegular(t.Context(), "_versions/ok", 8); err != nil || string(b) != "manifest" {
		t.Errorf("ReadRegular(ok, 8) = %q, %v", b, err)
	}
	if _, err := loc.ReadRegular(t.Context(), "_versions/ok", 7); !errors.Is(err, ErrTooLarge) {
		t.Errorf("ReadRegular(ok, 7) = %v; want ErrTooLarge", err)
	}
}
