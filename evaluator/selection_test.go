package evaluator

import (
	"errors"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
)

func TestSelectionConstructors(t *testing.T) {
	tests := []struct {
		name string
		sel  RowSelection
		want string
	}{
		{"zero value", RowSelection{}, "{}"},
		{"whole fragments, sorted and deduplicated", WholeFragments(5, 3, 5), "{3:all 5:all}"},
		{"offsets", Offsets(3, 18, 17, 18), "{3:[17 18]}"},
		{"no offsets selects nothing", Offsets(3), "{}"},
		{"range is half open", RowRange(3, 10, 13), "{3:[10 11 12]}"},
		{"empty range", RowRange(3, 10, 10), "{}"},
		{"row addresses", RowAddresses(3<<32|17, 1<<32|2, 3<<32|18), "{1:[2] 3:[17 18]}"},
		{"bitmap", FragmentBitmap(2, roaring.BitmapOf(4, 5)), "{2:[4 5]}"},
		{"empty bitmap", FragmentBitmap(2, roaring.New()), "{}"},
		{"union merges offsets", Union(Offsets(3, 1), Offsets(3, 2), Offsets(4, 9)), "{3:[1 2] 4:[9]}"},
		{"a whole fragment absorbs offsets", Union(Offsets(3, 1), WholeFragments(3), Offsets(3, 2)), "{3:all}"},
		{"long lists are elided", RowRange(0, 0, 100), "{0:[0 1 2 3 4 5 6 7 …+92]}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.sel.String(); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestSelectionAccessors(t *testing.T) {
	s := Union(Offsets(3, 17, 18), WholeFragments(1))
	if s.Len() != 2 || s.IsEmpty() {
		t.Fatalf("Len %d", s.Len())
	}
	r, ok := s.Fragment(1)
	if !ok || !r.Whole() || !r.Contains(99) || r.Count(10) != 10 || r.Bitmap() != nil {
		t.Errorf("fragment 1: %v", r)
	}
	if got := slices.Collect(r.Offsets(3)); !slices.Equal(got, []uint32{0, 1, 2}) {
		t.Errorf("whole offsets %v", got)
	}
	r, ok = s.Fragment(3)
	if !ok || r.Whole() || !r.Contains(17) || r.Contains(16) || r.Count(100) != 2 {
		t.Errorf("fragment 3: %v", r)
	}
	if got := slices.Collect(r.Offsets(18)); !slices.Equal(got, []uint32{17}) {
		t.Errorf("offsets below 18: %v", got)
	}
	// Bitmap returns a copy: modifying it leaves the selection alone.
	r.Bitmap().Add(5)
	if r.Contains(5) {
		t.Error("Bitmap aliases the selection")
	}
	if _, ok := s.Fragment(2); ok {
		t.Error("fragment 2 selected")
	}
	var ids []uint64
	for id := range s.All() {
		ids = append(ids, id)
	}
	if !slices.Equal(ids, []uint64{1, 3}) {
		t.Errorf("All: %v", ids)
	}
	// A builder does not alias what it was given.
	bm := roaring.BitmapOf(1)
	s2 := FragmentBitmap(0, bm)
	bm.Add(2)
	if got := s2.String(); got != "{0:[1]}" {
		t.Errorf("builder aliases its input: %s", got)
	}
}

func TestSelectionWireForms(t *testing.T) {
	sels := []RowSelection{
		WholeFragments(0),
		Offsets(3, 17, 18),
		Union(RowRange(1, 0, 70000), WholeFragments(7), RowAddresses(1<<40|3)),
	}
	for _, s := range sels {
		back, err := SelectionFromProto(s.Proto())
		if err != nil || !back.Equal(s) {
			t.Errorf("proto round trip of %v: %v, %v", s, back, err)
		}
		b, err := s.MarshalRowAddrTreeMap()
		if err != nil {
			t.Fatal(err)
		}
		back, err = SelectionFromRowAddrTreeMap(b)
		if err != nil || !back.Equal(s) {
			t.Errorf("tree map round trip of %v: %v, %v", s, back, err)
		}
		rs, err := s.RowSet()
		if err != nil || !FromRowSet(rs).Equal(s) {
			t.Errorf("RowSet round trip of %v: %v", s, err)
		}
	}
	// Fragment ids past 32 bits have no row address form.
	if _, err := WholeFragments(1 << 33).MarshalRowAddrTreeMap(); !errors.Is(err, ErrInvalidPrecondition) {
		t.Errorf("fragment 2^33 in a row address map: %v", err)
	}
	// The structured form is canonical: equal selections, equal bytes.
	a := Union(Offsets(3, 1), Offsets(3, 2)).Proto()
	b := Offsets(3, 2, 1).Proto()
	if string(a[0].GetOffsetBitmap()) != string(b[0].GetOffsetBitmap()) {
		t.Error("equal selections encode differently")
	}
	// Also for a selection decoded from non-optimized bytes.
	plain := roaring.BitmapOf(1, 2, 3, 4, 5, 6)
	raw, _ := plain.ToBytes()
	dec, err := SelectionFromRowAddrTreeMap(tree(uint32(3), raw))
	if err != nil || string(dec.Proto()[0].GetOffsetBitmap()) != string(RowRange(3, 1, 7).Proto()[0].GetOffsetBitmap()) {
		t.Errorf("decoded selection encodes differently: %v", err)
	}
	// Decoding errors carry index -1 outside a transaction.
	_, err = SelectionFromProto(nil)
	var inv *InvalidError
	if !errors.As(err, &inv) || inv.Precondition != -1 || inv.Reason != InvalidEmptySelection {
		t.Errorf("empty selection: %v", err)
	}
	_, err = SelectionFromRowAddrTreeMap([]byte{9})
	if !errors.As(err, &inv) || inv.Reason != InvalidEncoding {
		t.Errorf("bad tree map: %v", err)
	}
}
