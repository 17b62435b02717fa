package committer

import (
	"context"
	"fmt"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/internal/dataplane"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// Deletion files live in the dataset's own location, beside its data and
// its published versions: the location recorded in the dataset's
// configuration (declog.Config), or, for a dataset created without one,
// <DatasetRoot>/<dataset> when Config.DatasetRoot is set. They are read
// and written through the same gocloud.dev/blob bucket whatever the
// scheme (a directory, S3, …), so deletion-aware rules (the protected-rows
// policy, deletion-vector merges on rebase) work on every store. Both
// forms Lance writes are read: roaring bitmaps (.bin) and Arrow (.arrow).

// DataPlane is the committer's access to dataset locations, injected as
// Config.DataPlane (internal/dataplane.Blob by default). The committer reads
// deletion files through it and stores the deletion files a rebase merges.
type DataPlane interface {
	// Open returns the dataset location at url (a path or a blob URL).
	Open(ctx context.Context, url string) (DatasetFiles, error)
	// Close releases every location opened.
	Close() error
}

// DatasetFiles is one dataset location as the committer uses it.
type DatasetFiles interface {
	table.DeletionVectors
	// CreateIfAbsent stores b under key, relative to the location, unless
	// an object is there already.
	CreateIfAbsent(ctx context.Context, key string, b []byte) error
}

// blobPlane is the default data plane: gocloud.dev/blob buckets.
type blobPlane struct{ b *dataplane.Blob }

func (p blobPlane) Open(ctx context.Context, url string) (DatasetFiles, error) {
	l, err := p.b.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (p blobPlane) Close() error { return p.b.Close() }

// deletionLocation is where dataset ds keeps its deletion files; "" when
// it has no location.
func (c *Committer) deletionLocation(ds string, cfg *cellguardpb.DatasetConfig) (string, error) {
	if loc := cfg.GetLocation(); loc != "" {
		return loc, nil
	}
	if c.cfg.DatasetRoot != "" {
		return dataplane.JoinLocation(c.cfg.DatasetRoot, ds)
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
	return s.DeletionVector(ctx, fragmentID, df)
}

func (d datasetDeletions) store(ctx context.Context) (DatasetFiles, error) {
	loc, err := d.c.deletionLocation(d.st.Dataset, d.st.Config)
	if err != nil {
		return nil, err
	}
	if loc == "" {
		return nil, fmt.Errorf("read deletion file: dataset %s has no location and no dataset root is configured", d.st.Dataset)
	}
	return d.c.plane.Open(ctx, loc)
}

// writeDeletions writes the deletion files the batch's rebases produced,
// before the batch is appended: a committed record never names a file
// that is not there. A file's name embeds a random id and its content is
// fixed by the decision, so an existing file is the same file (a retry
// after a crash) and is left alone.
func (w *worker) writeDeletions(ctx context.Context, vs []verdict) error {
	for _, v := range vs {
		if len(v.Deletions) == 0 {
			continue
		}
		s, err := datasetDeletions{c: w.c, st: w.st}.store(ctx)
		if err != nil {
			return fmt.Errorf("rebase produced deletion files: %w", err)
		}
		for _, dw := range v.Deletions {
			if err := writeDeletion(ctx, s, dw); err != nil {
				return err
			}
		}
	}
	return nil
}

func writeDeletion(ctx context.Context, loc DatasetFiles, dw deletionWrite) error {
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
	if err := loc.CreateIfAbsent(ctx, key, b); err != nil {
		return fmt.Errorf("write deletion file %s: %w", key, err)
	}
	return nil
}

// loadConfig reads the dataset's configuration from its first committed
// record when loading the state did not replay that record (it started
// from a checkpoint).
func (c *Committer) loadConfig(ctx context.Context, st *state) error {
	if st.Head == nil || st.Config != nil {
		return nil
	}
	cfg, err := c.dl.Config(ctx, st.Dataset)
	if err != nil {
		return fmt.Errorf("committer: load configuration of %s: %w", st.Dataset, err)
	}
	st.Config = cfg
	return nil
}
