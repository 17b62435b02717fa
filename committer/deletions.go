package committer

import (
	"context"
	"fmt"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/internal/publish"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

// Deletion files live in the dataset's own location, beside its data and
// its published versions: the location recorded in the dataset's
// configuration (declog.Config), or, for a dataset created without one,
// <DatasetRoot>/<dataset> when Config.DatasetRoot is set. They are read
// and written through the same gocloud.dev/blob bucket whatever the
// scheme (a directory, S3, …), so deletion-aware rules (the protected-rows
// policy, deletion-vector merges on rebase) work on every store. Both
// forms Lance writes are read: roaring bitmaps (.bin) and Arrow (.arrow).

// deletionStores opens one store per location and keeps it for the
// committer's lifetime.
type deletionStores struct {
	mu     sync.Mutex
	stores map[string]*deletionStore
}

// deletionStore is one dataset location: a data.Store that reads (and
// caches) deletion files, and the location the committer writes the
// deletion files a rebase produces to.
type deletionStore struct {
	read *data.Store
	loc  *publish.Location
}

func (d *deletionStores) open(ctx context.Context, location string) (*deletionStore, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.stores[location]; ok {
		return s, nil
	}
	rloc, err := publish.OpenLocation(ctx, location, true)
	if err != nil {
		return nil, err
	}
	wloc, err := publish.OpenLocation(ctx, location, true)
	if err != nil {
		rloc.Close()
		return nil, err
	}
	s := &deletionStore{read: data.NewStore(rloc.Bucket, data.Options{}), loc: wloc}
	if d.stores == nil {
		d.stores = map[string]*deletionStore{}
	}
	d.stores[location] = s
	return s, nil
}

func (d *deletionStores) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.stores {
		_ = s.read.Close()
		_ = s.loc.Close()
	}
	d.stores = nil
}

// deletionLocation is where dataset ds keeps its deletion files; "" when
// it has no location.
func (c *Committer) deletionLocation(ds string, cfg *cellguardpb.DatasetConfig) (string, error) {
	if loc := cfg.GetLocation(); loc != "" {
		return loc, nil
	}
	if c.cfg.DatasetRoot != "" {
		return publish.JoinLocation(c.cfg.DatasetRoot, ds)
	}
	return "", nil
}

// datasetDeletions implements table.DeletionVectors for one dataset's
// worker, resolving the location from the state's configuration on each
// call (it is known only once the dataset is created or loaded).
type datasetDeletions struct {
	c  *Committer
	st *state
}

// DeletionVector implements table.DeletionVectors.
func (d datasetDeletions) DeletionVector(ctx context.Context, fragmentID uint64, df *lancepb.DeletionFile) (*roaring.Bitmap, error) {
	s, err := d.store(ctx)
	if err != nil {
		return nil, err
	}
	return s.read.DeletionVector(ctx, fragmentID, df)
}

func (d datasetDeletions) store(ctx context.Context) (*deletionStore, error) {
	loc, err := d.c.deletionLocation(d.st.ds, d.st.cfg)
	if err != nil {
		return nil, err
	}
	if loc == "" {
		return nil, fmt.Errorf("read deletion file: dataset %s has no location and no dataset root is configured", d.st.ds)
	}
	return d.c.dvLocs.open(ctx, loc)
}

// writeDeletions writes the deletion files the batch's rebases produced,
// before the batch is appended: a committed record never names a file
// that is not there. A file's name embeds a random id and its content is
// fixed by the decision, so an existing file is the same file (a retry
// after a crash) and is left alone.
func (w *worker) writeDeletions(ctx context.Context, vs []verdict) error {
	for _, v := range vs {
		if len(v.deletions) == 0 {
			continue
		}
		s, err := datasetDeletions{c: w.c, st: w.st}.store(ctx)
		if err != nil {
			return fmt.Errorf("rebase produced deletion files: %w", err)
		}
		for _, dw := range v.deletions {
			if err := writeDeletion(ctx, s.loc, dw); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeDeletion(ctx context.Context, loc *publish.Location, dw deletionWrite) error {
	if dw.File.GetFileType() != lancepb.DeletionFile_BITMAP {
		return fmt.Errorf("write deletion file for fragment %d: rebase asked for type %s, only BITMAP is written", dw.FragmentID, dw.File.GetFileType())
	}
	bm := dw.Rows.Clone()
	bm.RunOptimize()
	b, err := bm.ToBytes()
	if err != nil {
		return fmt.Errorf("write deletion file for fragment %d: %w", dw.FragmentID, err)
	}
	key := "_deletions/" + table.DeletionFilePath(dw.FragmentID, dw.File)
	if err := loc.CreateIfAbsent(ctx, key, b); err != nil && !publish.IsExists(err) {
		return fmt.Errorf("write deletion file %s: %w", key, err)
	}
	return nil
}

// loadConfig reads the dataset's configuration from its first committed
// record when loading the state did not replay that record (it started
// from a checkpoint).
func (c *Committer) loadConfig(ctx context.Context, st *state) error {
	if st.head == nil || st.cfg != nil {
		return nil
	}
	cfg, err := c.dl.Config(ctx, st.ds)
	if err != nil {
		return fmt.Errorf("committer: load configuration of %s: %w", st.ds, err)
	}
	st.cfg = cfg
	return nil
}
