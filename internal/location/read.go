package location

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// ErrNotRegular reports an object that is not a regular file: a FIFO,
// a device, a socket or a directory where a file was expected (only a
// local directory can hold one).
var ErrNotRegular = errors.New("publish: not a regular file")

// MaxFileBytes bounds the manifests and transaction files the publisher
// and adoption read from a location: far above any real manifest, it only
// keeps a stray huge file from being read into memory whole.
const MaxFileBytes = 1 << 30

// ErrTooLarge reports an object over the size limit given to ReadRegular.
var ErrTooLarge = errors.New("publish: object too large")

// ReadRegular reads the object at key (relative to the dataset
// directory), refusing one over max bytes (ErrTooLarge) and, on a local
// directory, anything that is not a regular file (ErrNotRegular). It
// returns when ctx ends, whatever the file system does.
//
// Files in a dataset directory can be written by anyone who can write
// the directory (LanceDB clients stage their manifests there), so a
// reader must not trust them to be files: opening a FIFO for reading
// blocks until a writer comes, and reading a character device may never
// end. A local file is opened with O_NONBLOCK (which makes opening a
// FIFO return at once), checked with fstat, and read in a goroutine the
// caller does not wait for past ctx.
func (l *Location) ReadRegular(ctx context.Context, key string, max int64) ([]byte, error) {
	if l.dir == "" {
		return l.readBucket(ctx, key, max)
	}
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := readRegularFile(filepath.Join(l.dir, filepath.FromSlash(key)), max)
		done <- result{b, err}
	}()
	select {
	case r := <-done:
		return r.b, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("publish: read %s: %w", key, ctx.Err())
	}
}

func (l *Location) readBucket(ctx context.Context, key string, max int64) ([]byte, error) {
	attrs, err := l.Bucket.Attributes(ctx, key)
	if err != nil {
		return nil, err
	}
	if attrs.Size > max {
		return nil, fmt.Errorf("%w: %s has %d bytes, over the limit of %d", ErrTooLarge, key, attrs.Size, max)
	}
	return l.Bucket.ReadAll(ctx, key)
}

func readRegularFile(name string, max int64) ([]byte, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is a %s", ErrNotRegular, filepath.Base(name), fileKind(st.Mode()))
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%w: %s has %d bytes, over the limit of %d", ErrTooLarge, filepath.Base(name), st.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%w: %s grew past the limit of %d bytes", ErrTooLarge, filepath.Base(name), max)
	}
	return b, nil
}

func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&os.ModeNamedPipe != 0:
		return "FIFO"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeDevice != 0:
		return "device"
	case m&os.ModeSymlink != 0:
		return "symlink"
	}
	return "special file (" + m.Type().String() + ")"
}
