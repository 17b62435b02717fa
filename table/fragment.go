package table

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// Tombstone is the field id Lance writes in DataFile.fields (and overlay
// files) for a field whose data moved to another file.
const Tombstone int32 = -2

// Fragment is one immutable fragment of a manifest. Versions share it.
//
// A committer keeps the head manifest of every active dataset resident, and
// a decoded DataFragment (message, data file, slices) costs several times
// its wire form. So a Fragment keeps the wire form and the few numbers the
// fragment structures and row arithmetic need, and decodes the rest on
// access (Proto, Files, Overlays, DeletionFile, Locate; the last two only
// when the fragment has overlays or a deletion file). Deciding decodes only
// the fragments a transaction or precondition names, never a whole
// manifest; a caller asking one fragment many questions should keep what
// it decoded. A message
// that cannot be encoded (a string that is not UTF-8) is kept decoded.
type Fragment struct {
	id      uint64
	rows    uint64
	deleted uint64
	has     parts                 // which optional parts it carries
	enc     []byte                // wire form; nil when pb is kept
	pb      *lancepb.DataFragment // only when the message cannot be encoded
}

// NewFragment wraps pb. The caller gives up the right to modify pb.
func NewFragment(pb *lancepb.DataFragment) *Fragment {
	f := &Fragment{
		id:      pb.GetId(),
		rows:    pb.GetPhysicalRows(),
		deleted: pb.GetDeletionFile().GetNumDeletedRows(),
		has:     partsOf(pb),
	}
	enc, err := proto.MarshalOptions{Deterministic: true}.Marshal(pb)
	if err != nil {
		f.pb = pb
		return f
	}
	f.enc = enc
	return f
}

// newFragmentWithID returns the fragment pb would be with its id set to
// id, without copying pb: pb is neither modified nor kept. A fragment
// whose id is 0 is encoded with field 1 (id) put in front of its own
// encoding, which is exactly the deterministic encoding of the fragment
// with that id, since fields are encoded in field-number order
// (TestNewFragmentWithID); otherwise a copy is made. A plain fragment
// (plainFragment: files and rows only, the common append) is encoded
// without reflection (fragment_enc.go).
func newFragmentWithID(pb *lancepb.DataFragment, id uint64) *Fragment {
	if plainFragment(pb) { // nothing deleted, no optional part
		return newPlainFragment(pb, id)
	}
	if pb.GetId() == id || pb.GetId() != 0 {
		c := proto.CloneOf(pb)
		c.Id = id
		return NewFragment(c)
	}
	opts := proto.MarshalOptions{Deterministic: true}
	size := opts.Size(pb)
	opts.UseCachedSize = true // Size just cached them, and pb is not modified
	enc := make([]byte, 0, protowire.SizeTag(1)+protowire.SizeVarint(id)+size)
	enc = protowire.AppendVarint(protowire.AppendTag(enc, 1, protowire.VarintType), id)
	enc, err := opts.MarshalAppend(enc, pb)
	if err != nil {
		c := proto.CloneOf(pb)
		c.Id = id
		return NewFragment(c)
	}
	return &Fragment{
		id:      id,
		rows:    pb.GetPhysicalRows(),
		deleted: pb.GetDeletionFile().GetNumDeletedRows(),
		has:     partsOf(pb),
		enc:     enc,
	}
}

// SameFragment reports whether a and b are the same fragment object: the
// one a version shares with another, not merely an equal one. Nil fragments
// are the same only as each other.
func SameFragment(a, b *Fragment) bool {
	if a == b {
		return true
	}
	if a == nil || b == nil {
		return false
	}
	if a.pb != nil || b.pb != nil {
		return a.pb == b.pb
	}
	return len(a.enc) > 0 && len(a.enc) == len(b.enc) && &a.enc[0] == &b.enc[0]
}

// parts records which optional parts a fragment carries, for the feature
// flag counts of its manifest.
type parts uint8

const (
	hasDeletion parts = 1 << iota
	hasRowIDs
	hasOverlays
)

func partsOf(pb *lancepb.DataFragment) parts {
	var p parts
	if pb.GetDeletionFile() != nil {
		p |= hasDeletion
	}
	if pb.GetRowIdSequence() != nil {
		p |= hasRowIDs
	}
	if len(pb.GetOverlays()) > 0 {
		p |= hasOverlays
	}
	return p
}

// ID returns the fragment id.
func (f *Fragment) ID() uint64 { return f.id }

// PhysicalRows returns the number of rows, deleted ones included.
func (f *Fragment) PhysicalRows() uint64 { return f.rows }

// Proto returns the fragment as a message, decoded for this call (or the
// wrapped one, when kept decoded). Callers must not modify it.
func (f *Fragment) Proto() *lancepb.DataFragment {
	if f.pb != nil {
		return f.pb
	}
	pb := &lancepb.DataFragment{}
	if err := proto.Unmarshal(f.enc, pb); err != nil {
		// enc came from Marshal of a valid message; this cannot happen.
		panic("table: fragment wire form does not decode: " + err.Error())
	}
	return pb
}

// EncodedSize returns the bytes the fragment keeps resident for its
// message: the wire form, or an estimate when kept decoded.
func (f *Fragment) EncodedSize() int {
	if f.pb != nil {
		return proto.Size(f.pb)
	}
	return len(f.enc)
}

// Files returns the data files. Callers must not modify them.
func (f *Fragment) Files() []*lancepb.DataFile { return f.Proto().GetFiles() }

// Overlays returns the overlay files, oldest first. Most fragments have
// none; asking them decodes nothing.
func (f *Fragment) Overlays() []*lancepb.DataOverlayFile {
	if f.has&hasOverlays == 0 {
		return nil
	}
	return f.Proto().GetOverlays()
}

// DeletionFile returns the deletion file, or nil when no row is deleted.
// Asking a fragment without one decodes nothing.
func (f *Fragment) DeletionFile() *lancepb.DeletionFile {
	if f.has&hasDeletion == 0 {
		return nil
	}
	return f.Proto().GetDeletionFile()
}

// Location is where a field's base values live inside a fragment.
type Location struct {
	Path   string // data file path, as in DataFile.path
	BaseID uint32 // DataFile.base_id; 0 when absent
	Column int32  // column index, -1 when the file records none
}

// Locate returns the data file and column that hold field id in f. A field no
// live file holds reads as all NULL; Locate reports false for it.
func (f *Fragment) Locate(id int32) (Location, bool) {
	for _, df := range f.Files() {
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
func (f *Fragment) LiveRows() uint64 { return f.rows - f.deleted }
