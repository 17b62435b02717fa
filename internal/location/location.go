package location

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// and plain-path locations
	_ "gocloud.dev/blob/memblob"  // mem:// locations, for tests
	"gocloud.dev/gcerrors"
)

// Location is an open dataset location: a gocloud.dev/blob bucket rooted at
// the dataset's Lance directory (`<table>.lance/`), where `_versions/`,
// `_transactions/`, `_deletions/` and `data/` live.
type Location struct {
	URL    string       // as given
	Bucket *blob.Bucket // rooted at the dataset directory
	dir    string       // local directory for file locations; "" otherwise
}

// ErrLocation reports a location that cannot be opened, read or written:
// a malformed URL, an unknown scheme, a directory that does not exist or
// is not writable.
var ErrLocation = errors.New("publish: dataset location unusable")

// OpenLocation opens urlstr: a plain path or file:// URL (a directory,
// created if missing when create is set), mem:// (a fresh in-memory
// bucket), s3://bucket/prefix?… (when the program links
// gocloud.dev/blob/s3blob, as cmd/cellguard does) or any other
// gocloud.dev/blob URL whose driver is linked. Paths are rooted at the
// URL's path, so "s3://b/tables/t.lance" keeps its files under
// "tables/t.lance/".
func OpenLocation(ctx context.Context, urlstr string, create bool) (*Location, error) {
	u, dir, err := bucketURL(urlstr, create)
	if err != nil {
		return nil, err
	}
	if dir != "" {
		st, err := os.Stat(dir)
		if err != nil || !st.IsDir() {
			return nil, fmt.Errorf("%w: %s: not a directory: %v", ErrLocation, urlstr, err)
		}
	}
	b, err := blob.OpenBucket(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("%w: open %s: %v", ErrLocation, urlstr, err)
	}
	return &Location{URL: urlstr, Bucket: b, dir: dir}, nil
}

// Close closes the bucket.
func (l *Location) Close() error { return l.Bucket.Close() }

// LocalNames returns the names of the entries of directory dir (a key
// prefix such as "_versions/") of a local location, without a stat of
// each, so that files renamed away while it reads do not fail it; ok is
// false for a location that is not a local directory. A missing
// directory has no names.
func (l *Location) LocalNames(dir string) (names []string, ok bool, err error) {
	if l.dir == "" {
		return nil, false, nil
	}
	f, err := os.Open(filepath.Join(l.dir, filepath.FromSlash(dir)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, true, nil
	}
	if err != nil {
		return nil, true, err
	}
	defer f.Close()
	names, err = f.Readdirnames(-1)
	return names, true, err
}

// bucketURL turns a location into a gocloud.dev/blob URL, and returns the
// local directory for file locations.
func bucketURL(s string, create bool) (string, string, error) {
	if s == "" {
		return "", "", fmt.Errorf("%w: empty location", ErrLocation)
	}
	if !strings.Contains(s, "://") {
		abs, err := filepath.Abs(s)
		if err != nil {
			return "", "", fmt.Errorf("%w: %s: %v", ErrLocation, s, err)
		}
		s = (&url.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", "", fmt.Errorf("%w: %s: %v", ErrLocation, s, err)
	}
	q := u.Query()
	var dir string
	switch {
	case u.Scheme == "file":
		dir = filepath.FromSlash(u.Path)
		if create {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return "", "", fmt.Errorf("%w: create %s: %v", ErrLocation, dir, err)
			}
		}
		// Write no .attrs sidecar files: Lance readers would list them.
		q.Set("metadata", "skip")
		q.Set("create_dir", "true")
		// Stage writes next to their target ({name}.{hex}.tmp, which no
		// Lance reader takes for a version), not in $TMPDIR: a rename
		// across file systems fails.
		q.Set("no_tmp_dir", "true")
	case strings.Trim(u.Path, "/") != "":
		q.Set("prefix", strings.Trim(u.Path, "/")+"/"+q.Get("prefix"))
		u.Path = ""
	}
	u.RawQuery = q.Encode()
	return u.String(), dir, nil
}

// errExists reports that createIfAbsent found the key taken.
var errExists = errors.New("publish: object exists")

// createIfAbsent stores b at key only if no object is there, atomically:
// the object appears whole, and of two writers racing for one key exactly
// one succeeds; the other gets errExists.
//
// On a local directory it writes a staging file `{key}-{random}` beside
// the target (a name Lance never takes for a version) and hard-links it to
// the target, which fails if the target exists — the filesystem decides
// the race, including against a LanceDB process (fileblob's own
// IfNotExist checks and renames, which a concurrent writer can slip
// between). Elsewhere it uses the store's conditional create
// (WriterOptions.IfNotExist: If-None-Match on S3 and GCS).
func (l *Location) createIfAbsent(ctx context.Context, key string, b []byte) error {
	if l.dir != "" {
		return linkIfAbsent(filepath.Join(l.dir, filepath.FromSlash(key)), b)
	}
	err := l.Bucket.WriteAll(ctx, key, b, &blob.WriterOptions{IfNotExist: true})
	if gcerrors.Code(err) == gcerrors.FailedPrecondition {
		return fmt.Errorf("%w: %s", errExists, key)
	}
	return err
}

func linkIfAbsent(target string, b []byte) error {
	staging, err := stage(target, b)
	if err != nil {
		return err
	}
	defer os.Remove(staging)
	return link(staging, target)
}

// stage writes b, synced, to a staging file beside target and returns
// its name; the caller removes it.
func stage(target string, b []byte) (string, error) {
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return "", err
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	staging := fmt.Sprintf("%s-%x", target, r)
	if err := writeSynced(staging, b); err != nil {
		_ = os.Remove(staging)
		return "", err
	}
	return staging, nil
}

func link(staging, target string) error {
	err := os.Link(staging, target)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %s", errExists, path.Base(target))
	}
	return err
}

// CreatePairIfAbsent is CreateIfAbsent of first, then of second: second
// never appears before first does. On a local directory both are
// written and synced at once (two syncs in the time of one) before
// either appears. errFirst and errSecond are each one's CreateIfAbsent
// error; when first fails for another reason than IsExists, second is
// not created.
func (l *Location) CreatePairIfAbsent(ctx context.Context, first string, b1 []byte, second string, b2 []byte) (errFirst, errSecond error) {
	if l.dir == "" {
		if errFirst = l.createIfAbsent(ctx, first, b1); errFirst != nil && !IsExists(errFirst) {
			return errFirst, nil
		}
		return errFirst, l.createIfAbsent(ctx, second, b2)
	}
	t1, t2 := filepath.Join(l.dir, filepath.FromSlash(first)), filepath.Join(l.dir, filepath.FromSlash(second))
	var s1 string
	var err1 error
	done := make(chan struct{})
	go func() {
		defer close(done)
		s1, err1 = stage(t1, b1)
	}()
	s2, err2 := stage(t2, b2)
	<-done
	if s1 != "" {
		defer os.Remove(s1)
	}
	if s2 != "" {
		defer os.Remove(s2)
	}
	if err1 != nil {
		return err1, nil
	}
	if errFirst = link(s1, t1); errFirst != nil && !IsExists(errFirst) {
		return errFirst, nil
	}
	if err2 != nil {
		return errFirst, err2
	}
	return errFirst, link(s2, t2)
}

func writeSynced(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// CreateIfAbsent stores b at key (relative to the dataset directory)
// unless an object is already there; see IsExists.
func (l *Location) CreateIfAbsent(ctx context.Context, key string, b []byte) error {
	return l.createIfAbsent(ctx, key, b)
}

// IsExists reports whether err says CreateIfAbsent found the key taken.
func IsExists(err error) bool { return errors.Is(err, errExists) }

// DatasetLocation returns the location of dataset ds under root (a path
// or a gocloud.dev/blob URL): <root>/<ds>.lance, what
// lancedb.connect(root).openTable(ds) opens.
func DatasetLocation(root, ds string) (string, error) { return JoinLocation(root, ds+".lance") }

// JoinLocation returns the location name under root, a path or a
// gocloud.dev/blob URL (whose query, such as ?region=…, is kept).
func JoinLocation(root, name string) (string, error) {
	if !strings.Contains(root, "://") {
		return filepath.Join(root, name), nil
	}
	u, err := url.Parse(root)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrLocation, root, err)
	}
	u.Path = path.Join("/", u.Path, name)
	return u.String(), nil
}

// CheckWritable proves that the location takes writes: it creates and
// removes a probe object under `_versions/` whose name no Lance reader
// takes for a version.
func CheckWritable(ctx context.Context, l *Location) error {
	var r [8]byte
	_, _ = rand.Read(r[:])
	key := fmt.Sprintf("%s.cellguard-probe-%x", versionsDir, r)
	if err := l.Bucket.WriteAll(ctx, key, []byte("probe"), nil); err != nil {
		return fmt.Errorf("%w: %s is not writable: %v", ErrLocation, l.URL, err)
	}
	if err := l.Bucket.Delete(ctx, key); err != nil {
		return fmt.Errorf("%w: %s: remove probe %s: %v", ErrLocation, l.URL, key, err)
	}
	return nil
}
