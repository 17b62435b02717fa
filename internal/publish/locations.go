package publish

import (
	"context"

	"cellguard/internal/location"
)

// Location is an open dataset location (location.Location).
type Location = location.Location

// ErrLocation reports a location that cannot be opened, read or written.
var ErrLocation = location.ErrLocation

// OpenLocation opens a dataset location (location.OpenLocation).
func OpenLocation(ctx context.Context, urlstr string, create bool) (*Location, error) {
	return location.OpenLocation(ctx, urlstr, create)
}

// IsExists reports whether err is CreateIfAbsent finding the object there.
func IsExists(err error) bool { return location.IsExists(err) }

// DatasetLocation is the location of dataset ds under a Lance root.
func DatasetLocation(root, ds string) (string, error) { return location.DatasetLocation(root, ds) }

// JoinLocation is the location of name under a root URL or path.
func JoinLocation(root, name string) (string, error) { return location.JoinLocation(root, name) }

// CheckWritable proves that the location takes writes.
func CheckWritable(ctx context.Context, l *Location) error { return location.CheckWritable(ctx, l) }

// ErrNotRegular reports an object that is not a regular file.
var ErrNotRegular = location.ErrNotRegular

// ErrTooLarge reports an object over the size limit given to ReadRegular.
var ErrTooLarge = location.ErrTooLarge

// MaxFileBytes bounds the manifests and transaction files read from a
// location (location.MaxFileBytes).
const MaxFileBytes = location.MaxFileBytes
