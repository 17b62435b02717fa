// Package dataplane gives the committer a dataset's files in its own
// location: the deletion files that preconditions and rebases read, and the
// deletion files a rebase merges. It is the committer's data plane, injected
// as committer.Config.DataPlane, so that the committer itself depends only
// on the small interfaces it needs (and on ctx-taking table.DeletionVectors).
//
// Locations are gocloud.dev/blob URLs or paths (a directory, file://, s3://,
// …), opened once and kept: a dataset's deletion files live in
// <location>/_deletions/, exactly where Lance keeps them. Both forms Lance
// writes are read: roaring bitmaps (.bin) and Arrow (.arrow).
package dataplane

import (
	"context"
	"sync"

	"github.com/RoaringBitmap/roaring/v2"

	"cellguard/internal/location"
	"cellguard/internal/logrec"
	"cellguard/proto/lancepb"
	"cellguard/table/data"
)

// Blob is the data plane over gocloud.dev/blob buckets. The zero value is
// ready to use; Close releases the buckets it opened.
type Blob struct {
	mu     sync.Mutex
	stores map[string]*Location
}

// Location is one dataset location: it reads (and caches) deletion files
// and stores new ones create-if-absent.
type Location struct {
	read  *data.Store        // over write's bucket
	write *location.Location // owns the bucket
}

// Open returns the dataset location at url, opening it on first use.
func (b *Blob) Open(ctx context.Context, url string) (*Location, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.stores[url]; ok {
		return s, nil
	}
	loc, err := location.OpenLocation(ctx, url, true)
	if err != nil {
		return nil, err
	}
	// One bucket serves both: the store reads through it, the location
	// writes create-if-absent through it and owns closing it.
	s := &Location{read: data.NewStore(loc.Bucket, data.Options{}), write: loc}
	if b.stores == nil {
		b.stores = map[string]*Location{}
	}
	b.stores[url] = s
	return s, nil
}

// Close closes every location opened.
func (b *Blob) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.stores {
		_ = s.write.Close()
	}
	b.stores = nil
	return nil
}

// DeletionVector implements table.DeletionVectors.
func (l *Location) DeletionVector(ctx context.Context, fragmentID uint64, df *lancepb.DeletionFile) (*roaring.Bitmap, error) {
	return l.read.DeletionVector(ctx, fragmentID, df)
}

// CreateIfAbsent stores b under key (relative to the location) unless an
// object is there already; an existing object is not an error, since a
// deletion file's name embeds a random id and its content is fixed by the
// decision that named it (a retry after a crash writes the same bytes).
func (l *Location) CreateIfAbsent(ctx context.Context, key string, b []byte) error {
	if err := l.write.CreateIfAbsent(ctx, key, b); err != nil && !location.IsExists(err) {
		return err
	}
	return nil
}

// JoinLocation is the location of dataset ds under a root URL or path.
func JoinLocation(root, ds string) (string, error) { return location.JoinLocation(root, ds) }

// DatasetLocation is the location of a dataset published under a Lance
// root: <root>/<ds>.lance, the directory lancedb.connect(root) opens as
// table ds.
func DatasetLocation(root, ds string) (string, error) { return location.DatasetLocation(root, ds) }

// DefaultStorageVersion is the Lance data storage version of tables
// cellguard creates.
const DefaultStorageVersion = logrec.DefaultStorageVersion
