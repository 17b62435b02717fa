package publish

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"cellguard/table"
)

// TestReadVersionFIFO: a version's manifest that is a FIFO (a writer in
// the directory can make one) is refused at once, not read forever: the
// publisher reads the newest version in storage.
func TestReadVersionFIFO(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "t.lance")
	loc, err := OpenLocation(t.Context(), dir, true)
	if err != nil {
		t.Fatal(err)
	}
	defer loc.Close()
	if err := os.MkdirAll(filepath.Join(dir, "_versions"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "_versions", table.ManifestFileName(3, true)), 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a hang guard
	defer cancel()
	if _, err := ReadVersion(ctx, loc, 3); !errors.Is(err, ErrNotRegular) {
		t.Errorf("ReadVersion of a FIFO = %v; want ErrNotRegular", err)
	}
	if _, err := ReadAdoption(ctx, loc); err == nil {
		t.Error("ReadAdoption of a FIFO manifest succeeded")
	}
}
