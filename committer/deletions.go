package committer

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// fsDeletions reads Lance deletion files from <root>/<dataset>/_deletions.
// Deletion files never change once written, so contents are cached.
//
// Portable-roaring files (.bin) are decoded; Arrow IPC files (.arrow) are
// not parsed by this build and read as an error, which the evaluator and
// the rebase rules treat conservatively (as "changed").
type fsDeletions struct {
	root  string
	ds    string
	mu    sync.Mutex
	cache map[string]*roaring.Bitmap
}

func newFSDeletions(root string) *fsDeletionsRoot { return &fsDeletionsRoot{root: root} }

// fsDeletionsRoot hands out the per-dataset reader.
type fsDeletionsRoot struct {
	root string
	mu   sync.Mutex
	byDS map[string]*fsDeletions
}

func (r *fsDeletionsRoot) dataset(ds string) *fsDeletions {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byDS == nil {
		r.byDS = map[string]*fsDeletions{}
	}
	d, ok := r.byDS[ds]
	if !ok {
		d = &fsDeletions{root: r.root, ds: ds, cache: map[string]*roaring.Bitmap{}}
		r.byDS[ds] = d
	}
	return d
}

func (d *fsDeletions) path(fragmentID uint64, df *lancepb.DeletionFile) string {
	return filepath.Join(d.root, d.ds, "_deletions", table.DeletionFilePath(fragmentID, df))
}

// DeletionVector implements table.DeletionVectors.
func (d *fsDeletions) DeletionVector(_ context.Context, fragmentID uint64, df *lancepb.DeletionFile) (*roaring.Bitmap, error) {
	p := d.path(fragmentID, df)
	d.mu.Lock()
	bm, ok := d.cache[p]
	d.mu.Unlock()
	if ok {
		return bm, nil
	}
	if !strings.HasSuffix(p, ".bin") {
		return nil, fmt.Errorf("read deletion file %s: arrow deletion files are not read by this build: %w", p, table.ErrMalformed)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read deletion file: %w", err)
	}
	bm, err = table.DecodeBitmap(b)
	if err != nil {
		return nil, fmt.Errorf("read deletion file %s: %w", p, err)
	}
	if bm.GetCardinality() != df.GetNumDeletedRows() {
		return nil, fmt.Errorf("read deletion file %s: holds %d rows, manifest says %d: %w", p, bm.GetCardinality(), df.GetNumDeletedRows(), table.ErrMalformed)
	}
	d.mu.Lock()
	d.cache[p] = bm
	d.mu.Unlock()
	return bm, nil
}

// write stores a deletion file a rebase produced, atomically (temp file
// and rename); an existing file with that name is left alone, since the
// name embeds a unique id.
func (d *fsDeletions) write(w deletionWrite) error {
	p := d.path(w.FragmentID, w.File)
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	bm := w.Rows.Clone()
	bm.RunOptimize()
	b, err := bm.ToBytes()
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// writeDeletions writes the deletion files the batch's rebases produced,
// before the batch is appended: a committed record never names a file
// that is not there.
func (w *worker) writeDeletions(vs []verdict) error {
	for _, v := range vs {
		if len(v.deletions) == 0 {
			continue
		}
		if w.c.dvRoot == nil {
			return fmt.Errorf("rebase produced deletion files but no dataset root is configured")
		}
		d := w.c.dvRoot.dataset(w.ds)
		for _, dw := range v.deletions {
			if err := d.write(dw); err != nil {
				return err
			}
		}
	}
	return nil
}
