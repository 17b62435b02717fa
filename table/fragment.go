package table

import (
	"cellguard/proto/lancepb"
)

// Tombstone is the field id Lance writes in DataFile.fields (and overlay
// files) for a field whose data moved to another file.
const Tombstone int32 = -2

// Fragment is one immutable fragment of a manifest. It wraps the protobuf
// message, which must never be modified once wrapped: versions share it.
type Fragment struct {
	pb *lancepb.DataFragment
}

// NewFragment wraps pb. The caller gives up the right to modify pb.
func NewFragment(pb *lancepb.DataFragment) *Fragment { return &Fragment{pb: pb} }

// ID returns the fragment id.
func (f *Fragment) ID() uint64 { return f.pb.GetId() }

// PhysicalRows returns the number of rows, deleted ones included.
func (f *Fragment) PhysicalRows() uint64 { return f.pb.GetPhysicalRows() }

// Proto returns the underlying message. Callers must not modify it.
func (f *Fragment) Proto() *lancepb.DataFragment { return f.pb }

// Files returns the data files. Callers must not modify them.
func (f *Fragment) Files() []*lancepb.DataFile { return f.pb.GetFiles() }

// Overlays returns the overlay files, oldest first.
func (f *Fragment) Overlays() []*lancepb.DataOverlayFile { return f.pb.GetOverlays() }

// DeletionFile returns the deletion file, or nil when no row is deleted.
func (f *Fragment) DeletionFile() *lancepb.DeletionFile { return f.pb.GetDeletionFile() }

// Location is where a field's base values live inside a fragment.
type Location struct {
	Path   string // data file path, as in DataFile.path
	BaseID uint32 // DataFile.base_id; 0 when absent
	Column int32  // column index, -1 when the file records none
}

// Locate returns the data file and column that hold field id in f. A field no
// live file holds reads as all NULL; Locate reports false for it.
func (f *Fragment) Locate(id int32) (Location, bool) {
	for _, df := range f.pb.GetFiles() {
		for i, fid := range df.GetFields() {
			if fid != id {
				continue
			}
			col := int32(-1)
			if ci := df.GetColumnIndices(); i < len(ci) {
				col = ci[i]
			}
			return Location{Path: df.GetPath(), BaseID: df.GetBaseId(), Column: col}, true
		}
	}
	return Location{}, false
}

// LiveRows returns the number of rows not deleted.
func (f *Fragment) LiveRows() uint64 {
	return f.pb.GetPhysicalRows() - f.pb.GetDeletionFile().GetNumDeletedRows()
}
