package table

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// TestNewFragmentWithID checks that encoding a fragment with its id put in
// front gives exactly the deterministic encoding of a copy with the id
// set, for fragments with every optional part and unknown fields, and
// that the input is left alone.
func TestNewFragmentWithID(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 500 {
		pb := &lancepb.DataFragment{
			PhysicalRows: 1 + rng.Uint64N(1<<40),
			Files: []*lancepb.DataFile{{
				Path: "data/f.lance", Fields: []int32{0, 1, Tombstone}, ColumnIndices: []int32{0, 1, 2},
				FileMajorVersion: 2, FileMinorVersion: uint32(rng.IntN(2)), FileSizeBytes: rng.Uint64(),
			}},
		}
		if rng.IntN(2) == 0 {
			pb.DeletionFile = &lancepb.DeletionFile{FileType: lancepb.DeletionFile_BITMAP, ReadVersion: 3, Id: 9, NumDeletedRows: 2}
		}
		if rng.IntN(2) == 0 {
			pb.RowIdSequence = &lancepb.DataFragment_InlineRowIds{InlineRowIds: []byte{1, 2, 3}}
		}
		if rng.IntN(2) == 0 {
			pb.Overlays = []*lancepb.DataOverlayFile{{DataFile: &lancepb.DataFile{Path: "o.lance", Fields: []int32{1}}}}
		}
		if rng.IntN(3) == 0 {
			pb.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 900, protowire.VarintType), 7))
		}
		before := proto.CloneOf(pb)
		id := rng.Uint64N(1 << uint(1+rng.IntN(63)))
		got := newFragmentWithID(pb, id)

		c := proto.CloneOf(before)
		c.Id = id
		want := NewFragment(c)
		if !bytes.Equal(got.enc, want.enc) || got.id != want.id || got.rows != want.rows || got.deleted != want.deleted || got.has != want.has {
			t.Fatalf("case %d (id %d): newFragmentWithID = %+v; want %+v", i, id, got, want)
		}
		if !proto.Equal(got.Proto(), c) {
			t.Fatalf("case %d: decodes to %v; want %v", i, got.Proto(), c)
		}
		if !proto.Equal(pb, before) {
			t.Fatalf("case %d: the input was modified", i)
		}
	}
}
