package table_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// TestPackedReplayLanceHistories replays every fixture history of real
// Lance twice, once on heads as Apply built them and once on each head
// packed first, and requires every version's wire form to be the same
// bytes: a packed head decodes to one that decides and builds exactly
// as the original would.
func TestPackedReplayLanceHistories(t *testing.T) {
	for _, name := range historyNames(t) {
		t.Run(name, func(t *testing.T) {
			h := loadHistory(t, name)
			first := h.Versions[0]
			cur, err := table.FromProto(first.Manifest)
			if err != nil {
				t.Fatalf("FromProto(v%d): %v", first.Version, err)
			}
			plain, packed := rpVersions{first.Version: cur}, rpVersions{first.Version: cur.Packed()}
			pcur := packed[first.Version]
			for _, v := range h.Versions[1:] {
				next, err := table.Apply(t.Context(), cur, v.Txn, plain)
				if err != nil {
					t.Fatalf("v%d: Apply: %v", v.Version, err)
				}
				pnext, err := table.Apply(t.Context(), pcur, v.Txn, packed)
				if err != nil {
					t.Fatalf("v%d: Apply on the packed head: %v", v.Version, err)
				}
				want, got := mustEncoding(t, next), mustEncoding(t, pnext)
				if !bytes.Equal(want, got) {
					t.Fatalf("v%d: the version built on the packed head differs (%d vs %d bytes)", v.Version, len(got), len(want))
				}
				pp := pnext.Packed()
				if next.NumFragments() > 0 && !pp.IsPacked() {
					t.Fatalf("v%d: Packed kept %d fragments decoded", v.Version, next.NumFragments())
				}
				if pp.NumFragments() != next.NumFragments() {
					t.Fatalf("v%d: packed NumFragments %d, want %d", v.Version, pp.NumFragments(), next.NumFragments())
				}
				plain[v.Version], packed[v.Version] = next, pp
				cur, pcur = next, pp
			}
		})
	}
}

// TestPackedManifestRoundTrip: a packed manifest reads as the original,
// fragment by fragment, and its wire form is the original's bytes; the
// packed manifest of a packed one that was read is packed again.
func TestPackedManifestRoundTrip(t *testing.T) {
	m := packedTestManifest(t)
	p := m.Packed()
	if !p.IsPacked() || m.IsPacked() {
		t.Fatalf("IsPacked: packed %v, original %v", p.IsPacked(), m.IsPacked())
	}
	if p.Version() != m.Version() || p.Schema() != m.Schema() || p.NumFragments() != m.NumFragments() {
		t.Fatalf("packed manifest: version %d, %d fragments; want %d, %d", p.Version(), p.NumFragments(), m.Version(), m.NumFragments())
	}
	if !p.IsPacked() {
		t.Fatal("reading the version and the count decoded the fragments")
	}
	if !bytes.Equal(mustEncoding(t, p), mustEncoding(t, m)) {
		t.Fatal("packed manifest encodes to other bytes")
	}
	if p.IsPacked() {
		t.Fatal("still packed after its fragments were read")
	}
	var ids []uint64
	for f := range m.Fragments() {
		ids = append(ids, f.ID())
		g, ok := p.Fragment(f.ID())
		if !ok {
			t.Fatalf("fragment %d missing from the packed manifest", f.ID())
		}
		if g.PhysicalRows() != f.PhysicalRows() || g.LiveRows() != f.LiveRows() || g.EncodedSize() != f.EncodedSize() ||
			(g.DeletionFile() == nil) != (f.DeletionFile() == nil) || len(g.Overlays()) != len(f.Overlays()) {
			t.Fatalf("fragment %d differs once packed", f.ID())
		}
	}
	i := 0
	for f := range p.Fragments() {
		if f.ID() != ids[i] {
			t.Fatalf("scan order: %d at %d, want %d", f.ID(), i, ids[i])
		}
		i++
	}
	again := p.Packed()
	if again == p || !again.IsPacked() || !bytes.Equal(mustEncoding(t, again), mustEncoding(t, m)) {
		t.Fatal("a read packed manifest does not pack again to the same manifest")
	}
}

// TestPackedManifestConcurrentReads reads one packed manifest from many
// goroutines at once (for the race detector): it decodes once, and every
// reader sees the same fragments.
func TestPackedManifestConcurrentReads(t *testing.T) {
	m := packedTestManifest(t)
	p := m.Packed()
	want := mustEncoding(t, m)
	var wg sync.WaitGroup
	got := make([][]byte, 8)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.IsPacked()
			got[i], _ = p.AppendEncoding(nil)
		}()
	}
	wg.Wait()
	for i, g := range got {
		if !bytes.Equal(g, want) {
			t.Fatalf("reader %d saw other bytes", i)
		}
	}
}

func mustEncoding(t *testing.T, m *table.Manifest) []byte {
	t.Helper()
	b, err := m.AppendEncoding(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// packedTestManifest is a manifest with every optional part a fragment
// carries (deletion file, overlay, row ids) and sequence keys a plain
// append would not give (a fragment spliced in between two others).
func packedTestManifest(t *testing.T) *table.Manifest {
	t.Helper()
	del := apFrag(2, 50)
	del.DeletionFile = apDel(1, 7, 3)
	over := apFrag(3, 40)
	over.Overlays = []*lancepb.DataOverlayFile{apOverlay("o3.lance", []int32{1}, []uint32{0, 4}, 2)}
	rowIDs := apFrag(4, 30)
	rowIDs.RowIdSequence = &lancepb.DataFragment_InlineRowIds{InlineRowIds: []byte{1, 2, 3}}
	m, err := table.FromProto(&lancepb.Manifest{
		Fields: []*lancepb.Field{
			{Id: 0, Name: "a", ParentId: -1, LogicalType: "int64"}, {Id: 1, Name: "b", ParentId: -1, LogicalType: "int64"},
			{Id: 2, Name: "c", ParentId: -1, LogicalType: "int64"}, {Id: 3, Name: "d", ParentId: -1, LogicalType: "int64"},
		},
		Version:   7,
		Fragments: []*lancepb.DataFragment{apFrag(0, 10), apFrag(1, 1<<40), del, over, rowIDs, apFrag(9, 5)},
	})
	if err != nil {
		t.Fatal(err)
	}
	b := m.Edit()
	if err := b.Splice([]uint64{1}, []*table.Fragment{table.NewFragment(apFrag(10, 1<<39)), table.NewFragment(apFrag(11, 1<<39))}); err != nil {
		t.Fatal(err)
	}
	if err := b.Append(table.NewFragment(apFrag(12, 1))); err != nil {
		t.Fatal(err)
	}
	return b.Build()
}

// TestChangeIndexReplaceHeadAnswersAlike builds one random history twice
// (fragments replaced, given deletion files, removed, re-created), once
// as is and once with the head packed at random versions and the index
// pointed at the packed head (ReplaceHead) before the next version is
// built from it. Both indexes must answer every question alike: the
// horizon, the bytes held, Changes and Txn for every fragment, and each
// version's view, fragment by fragment by content.
func TestChangeIndexReplaceHeadAnswersAlike(t *testing.T) {
	for seed := range uint64(12) {
		lim := table.IndexLimits{}
		if seed%3 == 2 {
			lim.MaxBytes = 1 + int(seed)*300 // small: the horizon moves
		}
		plain, packed := newIndexHistory(t, seed, 3+int(seed%5)), newIndexHistory(t, seed, 3+int(seed%5))
		ixA, ixB := table.NewChangeIndex(plain.head(), lim), table.NewChangeIndex(packed.head(), lim)
		replaced := 0
		for range 60 {
			if packed.rng.IntN(3) == 0 {
				p := packed.head().Packed()
				if err := ixB.ReplaceHead(p); err != nil {
					t.Fatal(err)
				}
				packed.mans[len(packed.mans)-1] = p
				replaced++
			}
			plain.rng.IntN(3) // the same draws on both sides
			a, b := plain.step(t), packed.step(t)
			if err := ixA.Advance(a, plain.uuids[a.Version()]); err != nil {
				t.Fatal(err)
			}
			if err := ixB.Advance(b, packed.uuids[b.Version()]); err != nil {
				t.Fatal(err)
			}
			sameIndexAnswers(t, ixA, ixB, plain, packed)
		}
		if replaced == 0 {
			t.Fatalf("seed %d: the head was never replaced", seed)
		}
	}
	if err := table.NewChangeIndex(nil, table.IndexLimits{}).ReplaceHead(packedTestManifest(t)); err == nil {
		t.Error("ReplaceHead on an index without a head: no error")
	}
}

func sameIndexAnswers(t *testing.T, a, b *table.ChangeIndex, ha, hb *indexHistory) {
	t.Helper()
	if a.Horizon() != b.Horizon() || a.Bytes() != b.Bytes() || a.Head().Version() != b.Head().Version() {
		t.Fatalf("horizon %d/%d, bytes %d/%d, head %d/%d", a.Horizon(), b.Horizon(), a.Bytes(), b.Bytes(), a.Head().Version(), b.Head().Version())
	}
	head := a.Head().Version()
	for id := range ha.ids + 1 {
		for after := a.Horizon(); after <= head; after++ {
			if x, y := a.Changes(id, after, 1000), b.Changes(id, after, 1000); fmt.Sprint(x) != fmt.Sprint(y) {
				t.Fatalf("Changes(%d, %d): %v plain, %v with packed heads", id, after, x, y)
			}
		}
	}
	for v := a.Horizon(); v <= head; v++ {
		x, y := a.Txn(v)
		if u, w := b.Txn(v); u != x || w != y {
			t.Fatalf("Txn(%d): %q %t plain, %q %t with packed heads", v, x, y, u, w)
		}
		wa, okA := a.At(v)
		wb, okB := b.At(v)
		if !okA || !okB {
			t.Fatalf("At(%d): %t plain, %t with packed heads", v, okA, okB)
		}
		if !table.SameBasePaths(wa.BasePaths(), wb.BasePaths()) || !proto.Equal(&lancepb.Manifest{Fields: wa.Schema().Fields()}, &lancepb.Manifest{Fields: wb.Schema().Fields()}) {
			t.Fatalf("v%d: schema or base paths differ", v)
		}
		for id := range ha.ids + 1 {
			fa, okA := wa.Fragment(id)
			fb, okB := wb.Fragment(id)
			if okA != okB || okA && !proto.Equal(fa.Proto(), fb.Proto()) {
				t.Fatalf("v%d fragment %d: (%v, %t) plain, (%v, %t) with packed heads", v, id, fa, okA, fb, okB)
			}
			if want, okW := hb.mans[v].Fragment(id); okB != okW || okB && !proto.Equal(fb.Proto(), want.Proto()) {
				t.Fatalf("v%d fragment %d: the view differs from the manifest", v, id)
			}
		}
	}
}

// TestPackedBytes bounds what a packed head holds, for heads of 256
// one-file fragments as LanceDB names them (a uuid per data file) and as
// the bench does (one uuid per table, a number per file): compressed,
// well under the fragments' own encodings, which is what an unpacked
// head holds besides its Fragment structs and tries.
func TestPackedBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		name string
		path func(i int) string
		max  float64 // PackedBytes / the encodings' bytes
	}{
		{"uuid-per-file", func(int) string {
			return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x.lance", rng.Uint32(), rng.IntN(1<<16), rng.IntN(1<<12), rng.IntN(1<<12), rng.Uint64N(1<<48))
		}, 0.5},
		{"uuid-per-table", func(i int) string { return fmt.Sprintf("data/3f2b8c1e-5d4a-4b9e-9c7d-0a1b2c3d4e5f-%d.lance", i) }, 0.15},
	} {
		t.Run(c.name, func(t *testing.T) {
			pb := &lancepb.Manifest{Fields: []*lancepb.Field{{Id: 0, Name: "id", ParentId: -1, LogicalType: "int64"}, {Id: 1, Name: "x", ParentId: -1, LogicalType: "double"}}}
			for i := range 256 {
				pb.Fragments = append(pb.Fragments, &lancepb.DataFragment{Id: uint64(i), PhysicalRows: 1000, Files: []*lancepb.DataFile{{
					Path: c.path(i), Fields: []int32{0, 1}, ColumnIndices: []int32{0, 1}, FileMajorVersion: 2, FileMinorVersion: 1, FileSizeBytes: uint64(100000 + 37*i),
				}}})
			}
			m, err := table.FromProto(pb)
			if err != nil {
				t.Fatal(err)
			}
			enc := 0
			for f := range m.Fragments() {
				enc += f.EncodedSize()
			}
			p := m.Packed()
			if r := float64(p.PackedBytes()) / float64(enc); r > c.max {
				t.Errorf("packed head holds %d bytes, %.2f of its fragments' %d; want at most %.2f", p.PackedBytes(), r, enc, c.max)
			} else {
				t.Logf("packed head holds %d bytes, %.2f of its fragments' %d", p.PackedBytes(), r, enc)
			}
			if m.PackedBytes() != 0 {
				t.Errorf("an unpacked manifest reports %d packed bytes", m.PackedBytes())
			}
		})
	}
}
