package data

import (
	"os"

	"gocloud.dev/blob"
)

// isLocal reports whether b is a local directory (gocloud's fileblob,
// whose bucket and objects are files: As gives their os.FileInfo).
func isLocal(b *blob.Bucket) bool {
	var fi os.FileInfo
	return b.As(&fi)
}

// checkRegular refuses an object that a local directory holds as
// something other than a regular file: a FIFO, a device, a socket.
// Anyone who may write a dataset directory can put one where a manifest
// names a file, and opening a FIFO for reading blocks until a writer
// comes (no context ends it), so reading one would hang the reader — the
// committer on a deletion file, for instance. It is a *FormatError (the
// file is not what the manifest says). Objects of other buckets pass.
func checkRegular(key string, attrs *blob.Attributes) error {
	var fi os.FileInfo
	if !attrs.As(&fi) || fi.Mode().IsRegular() {
		return nil
	}
	return formatErr(key, nil, "not a regular file (%s)", fi.Mode().Type())
}
