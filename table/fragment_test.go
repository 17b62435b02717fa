package table_test

import (
	"fmt"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// TestFragmentWireForm: a fragment kept in wire form answers as the
// message it wraps, and identity is the wrapper's, not equality.
func TestFragmentWireForm(t *testing.T) {
	pb := apFrag(7, 1000, apFile("a.lance", 3, 1, 2))
	pb.DeletionFile = apDel(2, 9, 40)
	pb.Overlays = []*lancepb.DataOverlayFile{{}}
	want := proto.CloneOf(pb)
	f := table.NewFragment(pb)
	if !proto.Equal(f.Proto(), want) {
		t.Fatalf("Proto() = %v; want %v", f.Proto(), want)
	}
	if f.ID() != 7 || f.PhysicalRows() != 1000 || f.LiveRows() != 960 {
		t.Errorf("ID, PhysicalRows, LiveRows = %d, %d, %d; want 7, 1000, 960", f.ID(), f.PhysicalRows(), f.LiveRows())
	}
	if loc, ok := f.Locate(2); !ok || loc.Path != "a.lance" || loc.Column != 2 {
		t.Errorf("Locate(2) = %+v, %t; want a.lance column 2", loc, ok)
	}
	if loc, ok := f.Locate(4); ok {
		t.Errorf("Locate(4) = %+v; want no file", loc)
	}
	if !proto.Equal(f.DeletionFile(), want.GetDeletionFile()) || len(f.Overlays()) != 1 || len(f.Files()) != 1 {
		t.Errorf("DeletionFile, Overlays, Files do not match the message")
	}
	if f.EncodedSize() != proto.Size(want) {
		t.Errorf("EncodedSize() = %d; want %d", f.EncodedSize(), proto.Size(want))
	}
	g := table.NewFragment(proto.CloneOf(want))
	if !table.SameFragment(f, f) || table.SameFragment(f, g) || table.SameFragment(f, nil) || !table.SameFragment(nil, nil) {
		t.Error("SameFragment must hold for the same wrapper only")
	}
}

// TestFragmentNotEncodable: a message that cannot be encoded (a path that
// is not UTF-8) is kept decoded and still answers.
func TestFragmentNotEncodable(t *testing.T) {
	pb := apFrag(3, 10, apFile("bad\xff.lance", 0, 1))
	f := table.NewFragment(pb)
	if f.Proto() != pb || f.ID() != 3 || f.EncodedSize() <= 0 {
		t.Errorf("Proto() = %p (want %p), ID() = %d, EncodedSize() = %d", f.Proto(), pb, f.ID(), f.EncodedSize())
	}
	if loc, ok := f.Locate(1); !ok || loc.Path != "bad\xff.lance" {
		t.Errorf("Locate(1) = %+v, %t", loc, ok)
	}
	if !table.SameFragment(f, f) {
		t.Error("SameFragment(f, f) = false")
	}
}

// TestFragmentDecodeConcurrent: goroutines decoding shared fragments at
// once each get their own fragment's content. Run with -race.
func TestFragmentDecodeConcurrent(t *testing.T) {
	const n = 5000
	frags := make([]*table.Fragment, n)
	for i := range frags {
		frags[i] = table.NewFragment(apFrag(uint64(i), uint64(i+1), apFile(fmt.Sprintf("f%d.lance", i), 0, int32(i))))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for k := range 4 * n {
				i := (k*7 + w*131) % n
				pb := frags[i].Proto()
				if pb.GetId() != uint64(i) || pb.GetFiles()[0].GetPath() != fmt.Sprintf("f%d.lance", i) {
					errs <- fmt.Errorf("fragment %d decoded as %v", i, pb)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
