package data

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// datasets
	_ "gocloud.dev/blob/memblob"  // mem:// datasets, for tests
	"gocloud.dev/gcerrors"
)

// Directories under the dataset root, as in Lance's layout.
const (
	dataDir      = "data/"
	deletionsDir = "_deletions/"
)

// Default cache bounds; see Options.
const (
	DefaultCacheBytes         = 256 << 20
	DefaultDeletionCacheBytes = 32 << 20
)

// Options tunes a Store. The zero Options means all defaults.
type Options struct {
	// CacheBytes bounds the memory held by decoded columns of data and
	// overlay files kept for later reads (and, apart, by the metadata of
	// opened files: a sixteenth of it). Zero means DefaultCacheBytes;
	// negative turns the cache off.
	CacheBytes int64
	// DeletionCacheBytes bounds the memory held by decoded deletion
	// vectors. Zero means DefaultDeletionCacheBytes; negative turns the
	// cache off.
	DeletionCacheBytes int64
}

// Store reads and writes the data files of one dataset in a blob bucket
// rooted at the dataset's directory. It is safe for concurrent use.
type Store struct {
	bucket    *blob.Bucket
	metas     *cache[*lanceMeta]  // opened Lance files: size and tail
	columns   *cache[arrow.Array] // decoded columns of Lance files
	legacy    *cache[*ipcFile]    // decoded Arrow IPC files of older cellguards
	deletions *cache[*roaring.Bitmap]
	local     bool // a local directory (fileblob): see checkRegular
}

// Open opens the dataset rooted at urlstr:
//
//   - a plain path ("/var/lib/ds", "ds") or file:///var/lib/ds: a
//     directory, created on first write;
//   - mem://: an in-memory bucket, empty and private to this Store;
//   - s3://bucket/path/to/ds?region=…: an S3 (or S3-compatible, with
//     endpoint=…) bucket, credentials from the usual AWS sources, once
//     the program links the driver: import _ "gocloud.dev/blob/s3blob"
//     (cmd/cellguard does). It is not linked here, so that a program
//     using only local or in-memory datasets does not carry the AWS SDK.
//
// Any other gocloud.dev/blob URL works if its driver is linked in. For
// every scheme but file, the URL path becomes the key prefix of the
// dataset root.
func Open(ctx context.Context, urlstr string) (*Store, error) {
	return OpenWith(ctx, urlstr, Options{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, urlstr string, opts Options) (*Store, error) {
	u, err := datasetURL(urlstr)
	if err != nil {
		return nil, err
	}
	b, err := blob.OpenBucket(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("data: open %s: %w", urlstr, err)
	}
	return NewStore(b, opts), nil
}

// NewStore returns a Store over b, which must be rooted at the dataset
// directory (see blob.PrefixedBucket). The Store takes ownership of b and
// closes it on Close.
func NewStore(b *blob.Bucket, opts Options) *Store {
	files := orDefault(opts.CacheBytes, DefaultCacheBytes)
	return &Store{
		bucket:    b,
		metas:     newCache[*lanceMeta](files / 16),
		columns:   newCache[arrow.Array](files),
		legacy:    newCache[*ipcFile](files),
		deletions: newCache[*roaring.Bitmap](orDefault(opts.DeletionCacheBytes, DefaultDeletionCacheBytes)),
		local:     isLocal(b),
	}
}

func orDefault(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}

// Close closes the bucket.
func (s *Store) Close() error { return s.bucket.Close() }

// datasetURL turns what Open accepts into a gocloud.dev/blob URL.
func datasetURL(s string) (string, error) {
	if !strings.Contains(s, "://") {
		abs, err := filepath.Abs(s)
		if err != nil {
			return "", fmt.Errorf("data: open %s: %w", s, err)
		}
		s = (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("data: open %s: %w", s, err)
	}
	q := u.Query()
	if u.Scheme == "file" {
		// Create the root on first use, and write no .attrs sidecar files
		// next to the data: Lance readers would see them as strays.
		if !q.Has("create_dir") {
			q.Set("create_dir", "true")
		}
		if !q.Has("metadata") {
			q.Set("metadata", "skip")
		}
	} else if p := strings.Trim(u.Path, "/"); p != "" {
		q.Set("prefix", p+"/"+q.Get("prefix"))
		u.Path = ""
	} else {
		return s, nil
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// read returns the whole object at key, relative to the dataset root.
func (s *Store) read(ctx context.Context, op, key string) ([]byte, error) {
	if s.local {
		attrs, err := s.bucket.Attributes(ctx, key)
		if err != nil {
			return nil, s.readErr(op, key, err)
		}
		if err := checkRegular(key, attrs); err != nil {
			return nil, err
		}
	}
	b, err := s.bucket.ReadAll(ctx, key)
	if err != nil {
		return nil, s.readErr(op, key, err)
	}
	return b, nil
}

// readErr classifies an error of the bucket reading key.
func (s *Store) readErr(op, key string, err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound {
		return errorf(op, ErrNotFound, "%s", key)
	}
	return fmt.Errorf("data: %s: read %s: %w", op, key, err)
}

// write stores b at key, relative to the dataset root. The object appears
// whole or not at all.
func (s *Store) write(ctx context.Context, op, key string, b []byte) error {
	if err := s.bucket.WriteAll(ctx, key, b, nil); err != nil {
		return fmt.Errorf("data: %s: write %s: %w", op, key, err)
	}
	return nil
}
