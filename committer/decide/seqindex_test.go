package decide

import "testing"

func TestSeqIndex(t *testing.T) {
	var x SeqIndex
	if x.Top() != 0 {
		t.Fatalf("empty top %d", x.Top())
	}
	// A rollback on a dataset with no committed version yet (a batch of
	// rejections whose append failed) truncates an index never pushed to.
	x.Truncate(0)
	if x.Top() != 0 {
		t.Fatalf("empty top after truncate(0) %d", x.Top())
	}
	x.Push(10)
	x.Push(0)
	x.Set(2, 12)
	if s, ok := x.At(2); !ok || s != 12 || x.Top() != 2 {
		t.Errorf("at(2) = %d %v, top %d", s, ok, x.Top())
	}
	x.Truncate(1)
	if _, ok := x.At(2); ok || x.Top() != 1 {
		t.Errorf("after truncate: top %d", x.Top())
	}
	var y SeqIndex
	y.Start(70)
	if y.Top() != 69 {
		t.Errorf("started at 70: top %d, want 69", y.Top())
	}
	y.Push(700)
	y.Push(710)
	if s, ok := y.At(71); !ok || s != 710 {
		t.Errorf("at(71) = %d %v", s, ok)
	}
	if _, ok := y.At(69); ok {
		t.Error("version before the start is indexed")
	}
	y.Trim(71)
	if _, ok := y.At(70); ok || y.First != 71 || y.Top() != 71 {
		t.Errorf("after trim: first %d top %d", y.First, y.Top())
	}
}
