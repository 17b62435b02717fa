package table

import (
	"bytes"
	"testing"
)

// TestPackedChunkMerging packs runs of fragments of shrinking sizes one
// after another, each run a little under 1/mergeRatio of the one
// before, so that no run is merged into its predecessor by size: the
// chunks never outnumber
// maxChunks, the last pack merging them all, and the chunks read as one
// packed form, the same bytes packing every fragment at once gives.
func TestPackedChunkMerging(t *testing.T) {
	sizes := []int{1}
	for range maxChunks {
		sizes = append([]int{mergeRatio*sizes[0] + 1}, sizes...)
	}
	var all fragmentList
	f := &packedFrags{}
	id, seq := uint64(0), uint64(0)
	most := 0
	for _, n := range sizes {
		var run fragmentList
		for range n {
			seq += seqGap
			frag := &Fragment{id: id, rows: id % 7, enc: []byte{8, byte(id), byte(id >> 8), byte(id >> 16)}}
			run, all = run.add(frag, seq), all.add(frag, seq)
			id++
		}
		f = f.with(&run)
		most = max(most, len(f.chunks))
		if f.n != all.byID.Len() || f.maxID != id-1 || f.lastSeq != seq || f.maxIDSeq != seq {
			t.Fatalf("summary: %d fragments, max id %d at %d, last key %d", f.n, f.maxID, f.maxIDSeq, f.lastSeq)
		}
	}
	if most != maxChunks || len(f.chunks) != 1 {
		t.Fatalf("at most %d chunks, %d at the end; want %d, then 1", most, len(f.chunks), maxChunks)
	}
	whole := (&packedFrags{}).with(&all)
	if !bytes.Equal(unpackChunks(f.chunks), unpackChunks(whole.chunks)) {
		t.Fatal("the merged chunks differ from the fragments packed at once")
	}
	p := newPackedList(f, fragmentList{})
	l := p.decodedList()
	if l.byID.Len() != all.byID.Len() {
		t.Fatalf("decoded %d fragments, want %d", l.byID.Len(), all.byID.Len())
	}
	all.order.All(func(seq, id uint64) bool {
		e, ok := l.byID.Get(id)
		want, _ := all.byID.Get(id)
		if !ok || e.seq != seq || e.frag.rows != want.frag.rows || !bytes.Equal(e.frag.enc, want.frag.enc) {
			t.Fatalf("fragment %d decodes differently", id)
		}
		return true
	})
}

// TestPackedAgainKeepsChunks: packing a packed manifest that was read
// (decoded) keeps its chunks as they are, and packing one appended to
// keeps the chunks it had.
func TestPackedAgainKeepsChunks(t *testing.T) {
	var l fragmentList
	for i := range uint64(300) {
		l = l.add(&Fragment{id: i, enc: []byte{8, byte(i), 16, 1}}, (i+1)*seqGap)
	}
	m := &Manifest{header: nil, frags: l}
	p := m.Packed()
	p.list()
	again := p.Packed()
	if again == p || !again.IsPacked() || again.packed.pre != p.packed.pre {
		t.Fatal("a read packed manifest packed again does not keep its chunks")
	}
	b := again.edit()
	if err := b.Append(&Fragment{id: 300, enc: []byte{8, 1}}); err != nil {
		t.Fatal(err)
	}
	next := b.Build()
	if !again.IsPacked() || !next.IsPacked() || b.pre == nil {
		t.Fatal("an append onto a packed manifest decoded it")
	}
	pn := next.Packed()
	if len(pn.packed.pre.chunks) != 2 || pn.packed.pre.chunks[0] != p.packed.pre.chunks[0] {
		t.Fatalf("packing after an append: %d chunks, the first one shared %t", len(pn.packed.pre.chunks), pn.packed.pre.chunks[0] == p.packed.pre.chunks[0])
	}
}
