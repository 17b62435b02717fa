// Package batch defines Batch, the live rows of one fragment that the
// data plane (package cellguard/table/data) reads. It is a package of its
// own so that SDK code can accept and return batches while only programs
// that import table/data link the blob stores and file readers.
package batch

import "github.com/apache/arrow-go/v18/arrow"

// Batch holds the live rows of one fragment as of one manifest version.
type Batch struct {
	// FragmentID is the fragment the rows belong to.
	FragmentID uint64
	// Offsets are the physical offsets of the live rows, ascending:
	// deleted rows are left out, so Offsets[i] need not equal i.
	Offsets []uint32
	// Columns maps each requested field id to its values, one per entry
	// of Offsets. A field no data file of the fragment holds is all null.
	Columns map[int32]arrow.Array
}

// Len returns the number of rows.
func (b *Batch) Len() int { return len(b.Offsets) }

// RowAddress returns the Lance row address of row i:
// fragment id << 32 | physical offset.
func (b *Batch) RowAddress(i int) uint64 { return b.FragmentID<<32 | uint64(b.Offsets[i]) }

// Release releases the columns. Calling it is optional: the arrays use
// Go-managed memory.
func (b *Batch) Release() {
	for _, c := range b.Columns {
		c.Release()
	}
}
