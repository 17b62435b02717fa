package publish

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"gocloud.dev/blob"

	"cellguard/internal/location"
)

// ErrDatasetDeleted reports a dataset whose decision log holds its
// tombstone (`cellguard dataset delete`): it is never published again.
var ErrDatasetDeleted = errors.New("publish: dataset deleted")

// Purge deletes every object under the Lance directory at urlstr and
// returns how many it deleted; a local directory is removed as well. A
// location that does not exist (any more) purges nothing. Only a deleted
// dataset's directory may be purged: a running publisher would write it
// again.
func Purge(ctx context.Context, urlstr string) (int, error) {
	dir, err := location.LocalDir(urlstr)
	if err != nil {
		return 0, err
	}
	if dir != "" {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
	}
	loc, err := OpenLocation(ctx, urlstr, false)
	if err != nil {
		return 0, err
	}
	defer loc.Close()
	n := 0
	it := loc.Bucket.List(&blob.ListOptions{})
	for {
		obj, err := it.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, fmt.Errorf("%w: purge %s: list: %v", ErrLocation, urlstr, err)
		}
		if err := loc.Bucket.Delete(ctx, obj.Key); err != nil {
			return n, fmt.Errorf("%w: purge %s: delete %s: %v", ErrLocation, urlstr, obj.Key, err)
		}
		n++
	}
	if dir != "" {
		if err := os.RemoveAll(dir); err != nil {
			return n, fmt.Errorf("%w: purge %s: %v", ErrLocation, urlstr, err)
		}
	}
	return n, nil
}
