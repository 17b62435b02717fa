package namespace

import (
	"cellguard/internal/publish"
	"cellguard/table"
	"cellguard/table/data"
)

// newDeletions reads deletion vectors from the table's location, for
// rebases that merge them.
func newDeletions(loc *publish.Location) table.DeletionVectors {
	return data.NewStore(loc.Bucket, data.Options{})
}
