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

// TestEncodePlainFragmentMatchesMarshal checks the direct encoding of
// plain fragments against proto's deterministic encoding, for fragments
// with no file, several, empty and negative field lists, zero values and
// any id.
func TestEncodePlainFragmentMatchesMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	ints := func() []int32 {
		var v []int32
		for range rng.IntN(5) {
			v = append(v, int32(rng.IntN(70))-3)
		}
		return v
	}
	small := func() uint64 {
		if rng.IntN(3) == 0 {
			return 0
		}
		return rng.Uint64N(1 << uint(1+rng.IntN(63)))
	}
	for i := range 2000 {
		pb := &lancepb.DataFragment{Id: small(), PhysicalRows: small()}
		for range rng.IntN(3) {
			path := ""
			if rng.IntN(4) > 0 {
				path = "data/é" + string(rune('a'+rng.IntN(26))) + ".lance"
			}
			pb.Files = append(pb.Files, &lancepb.DataFile{Path: path, Fields: ints(), ColumnIndices: ints(),
				FileMajorVersion: uint32(small()), FileMinorVersion: uint32(small()), FileSizeBytes: small()})
		}
		if !plainFragment(pb) {
			t.Fatalf("case %d: %v is plain", i, pb)
		}
		id := small()
		c := proto.CloneOf(pb)
		c.Id = id
		want := NewFragment(c)
		got := newFragmentWithID(pb, id)
		if !bytes.Equal(got.enc, want.enc) || got.id != want.id || got.rows != want.rows || got.deleted != want.deleted || got.has != want.has {
			t.Fatalf("case %d (id %d): newFragmentWithID = %+v; want %+v", i, id, got, want)
		}
		if len(got.enc) != cap(got.enc) {
			t.Fatalf("case %d: encoding sized %d, used %d", i, cap(got.enc), len(got.enc))
		}
	}
	for _, pb := range []*lancepb.DataFragment{
		{Files: []*lancepb.DataFile{{Path: "\xff"}}},
		{Files: []*lancepb.DataFile{{Path: "p", BaseId: proto.Uint32(0)}}},
		{DeletionFile: &lancepb.DeletionFile{}},
		{Overlays: []*lancepb.DataOverlayFile{{}}},
		{RowIdSequence: &lancepb.DataFragment_InlineRowIds{}},
	} {
		if plainFragment(pb) {
			t.Errorf("%v is not plain", pb)
		}
	}
}

// TestEncodePlainFragmentEveryField sets each field of a fragment, and of
// its data file, in turn: either plainFragment declines it or the direct
// encoding carries it. A field added to the messages cannot be dropped
// silently.
func TestEncodePlainFragmentEveryField(t *testing.T) {
	check := func(pb *lancepb.DataFragment, what string) {
		if !plainFragment(pb) {
			return
		}
		c := proto.CloneOf(pb)
		c.Id = 5
		if got, want := encodePlainFragment(pb, 5), NewFragment(c).enc; !bytes.Equal(got, want) {
			t.Errorf("%s: direct encoding %x, want %x", what, got, want)
		}
	}
	frag := (&lancepb.DataFragment{}).ProtoReflect()
	for i := range frag.Descriptor().Fields().Len() {
		fd := frag.Descriptor().Fields().Get(i)
		pb := &lancepb.DataFragment{}
		setAny(t, pb.ProtoReflect(), fd)
		check(pb, "fragment field "+string(fd.Name()))
	}
	file := (&lancepb.DataFile{}).ProtoReflect()
	for i := range file.Descriptor().Fields().Len() {
		fd := file.Descriptor().Fields().Get(i)
		df := &lancepb.DataFile{}
		setAny(t, df.ProtoReflect(), fd)
		check(&lancepb.DataFragment{Files: []*lancepb.DataFile{df}}, "file field "+string(fd.Name()))
	}
}

// TestFragmentWithRoom checks the room a fragment's encoding gets: exactly
// the size asked for, whatever the size class, and for the usual appended
// fragment one allocation for the Fragment and its encoding together.
func TestFragmentWithRoom(t *testing.T) {
	for n := range 600 {
		f, b := fragmentWithRoom(n)
		if len(b) != 0 || cap(b) != n || f == nil || f.id != 0 || f.enc != nil || f.pb != nil {
			t.Fatalf("fragmentWithRoom(%d): len %d cap %d, fragment %+v", n, len(b), cap(b), f)
		}
	}
	pb := &lancepb.DataFragment{PhysicalRows: 1000, Files: []*lancepb.DataFile{{
		Path: "data/0f3e9a2c-5b1d-4c7e-9a8b-2d6f4e1c3b5a.lance", Fields: []int32{0, 1, 2}, ColumnIndices: []int32{0, 1, 2},
		FileMajorVersion: 2, FileMinorVersion: 1, FileSizeBytes: 123456}}}
	if allocs := testing.AllocsPerRun(100, func() { newFragmentWithID(pb, 7) }); allocs != 1 {
		t.Errorf("an appended fragment takes %.0f allocations; want 1", allocs)
	}
}
