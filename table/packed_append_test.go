package table_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// packedAppendHead is version 1 of a table of n one-file fragments.
func packedAppendHead(t testing.TB, n int) *table.Manifest {
	return packedAppendTable(t, n, false)
}

// packedAppendTable is packedAppendHead, with stable row ids if stable.
func packedAppendTable(t testing.TB, n int, stable bool) *table.Manifest {
	t.Helper()
	pb := apManifest(1)
	for i := range n {
		pb.Fragments = append(pb.Fragments, apFrag(uint64(i), 1000, apFile(fmt.Sprintf("data/3f2b8c1e-5d4a-4b9e-%012d.lance", i), 0, 1, 2, 3)))
	}
	if stable {
		apStable(pb)
	}
	pb.MaxFragmentId = nil
	if n > 0 {
		id := uint32(n - 1)
		pb.MaxFragmentId = &id
	}
	m, err := table.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func packedAppendTxn(read uint64, i int) *lancepb.Transaction {
	return apAppend(read, apFrag(0, uint64(100+i), apFile(fmt.Sprintf("data/a-%d.lance", i), 0, 1, 2, 3)))
}

// TestAppendOntoPackedHeadStaysPacked: an Append onto a packed head
// decodes neither the head nor the packed fragments of the new version,
// nor does the change index advancing over it or pointed at its packed
// form; packing the new version packs only the appended fragment.
func TestAppendOntoPackedHeadStaysPacked(t *testing.T) {
	head := packedAppendHead(t, 256).Packed()
	ix := table.NewChangeIndex(head, table.IndexLimits{})
	next, err := table.Apply(t.Context(), head, packedAppendTxn(1, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Advance(next, "u"); err != nil {
		t.Fatal(err)
	}
	if !head.IsPacked() || !next.IsPacked() {
		t.Fatalf("after an Append: head packed %t, new version packed %t", head.IsPacked(), next.IsPacked())
	}
	if next.NumFragments() != 257 || !next.Packable() {
		t.Fatalf("new version: %d fragments, packable %t", next.NumFragments(), next.Packable())
	}
	if id, ok := next.MaxFragmentID(); !ok || id != 256 {
		t.Fatalf("max fragment id %d %t, want 256", id, ok)
	}
	p := next.Packed()
	if err := ix.ReplaceHead(p); err != nil {
		t.Fatal(err)
	}
	if !next.IsPacked() || !p.IsPacked() || p.Packable() || p.PackedChunks() != 2 {
		t.Fatalf("packed again: %d chunks, packed %t/%t, packable %t", p.PackedChunks(), next.IsPacked(), p.IsPacked(), p.Packable())
	}
	plain, err := table.Apply(t.Context(), packedAppendHead(t, 256), packedAppendTxn(1, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustEncoding(t, p), mustEncoding(t, plain)) || !bytes.Equal(mustEncoding(t, next), mustEncoding(t, plain)) {
		t.Fatal("the appended version differs from the one built on the unpacked head")
	}
	if f := ix.Changes(256, 1, 10); len(f) != 1 || f[0] != 2 {
		t.Fatalf("change index: fragment 256 changes %v, want [2]", f)
	}
}

// TestPackedAppends builds one random history twice: once on unpacked
// manifests, once packing the head at random and reading it (which
// decodes it) at random, with appends most of the time and every few
// versions another operation (a delete, a deletion file, a compaction,
// a reserve, a config change, an overwrite, with odd seeds a restore),
// some tables with stable row ids.
// Every version must encode to the same bytes, list the same fragments
// in the same order and answer lookups and counts alike; without
// restores, the change indexes of the two histories must answer alike
// and hold the same bytes (a version restored from a packed one is
// decoded on its own: its fragments are equal to the head's, not the
// same, and the index records them as changed). Appends onto a packed
// head whose highest fragment id is last in scan order must
// leave it and the new version packed, and a head must never be in
// more than a few chunks.
func TestPackedAppends(t *testing.T) {
	for seed := range uint64(6) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			plain := packedAppendTable(t, int(seed*40), seed%3 == 2)
			packed := plain.Packed()
			plainV, packedV := rpVersions{1: plain}, rpVersions{1: packed}
			ixA, ixB := table.NewChangeIndex(plain, table.IndexLimits{MaxBytes: 1 << 16}), table.NewChangeIndex(packed, table.IndexLimits{MaxBytes: 1 << 16})
			maxChunks, stayed := 0, 0
			for i := range 400 {
				v := plain.Version()
				txn := packedRandomTxn(rng, plain, v, i, seed%2 == 1)
				wasPacked := packed.IsPacked() && maxIsLast(plain)
				next, err := table.Apply(t.Context(), plain, txn, plainV)
				if err != nil {
					t.Fatalf("step %d: Apply: %v", i, err)
				}
				pnext, err := table.Apply(t.Context(), packed, txn, packedV)
				if err != nil {
					t.Fatalf("step %d: Apply on the packed head: %v", i, err)
				}
				if _, ok := txn.GetOperation().(*lancepb.Transaction_Append_); ok && wasPacked {
					if !packed.IsPacked() || !pnext.IsPacked() {
						t.Fatalf("step %d: an Append decoded the packed head (%t) or its successor (%t)", i, !packed.IsPacked(), !pnext.IsPacked())
					}
					stayed++
				}
				if err := ixA.Advance(next, txn.GetUuid()); err != nil {
					t.Fatal(err)
				}
				if err := ixB.Advance(pnext, txn.GetUuid()); err != nil {
					t.Fatal(err)
				}
				if pnext.NumFragments() != next.NumFragments() {
					t.Fatalf("step %d: %d fragments, want %d", i, pnext.NumFragments(), next.NumFragments())
				}
				a, aok := next.MaxFragmentID()
				if b, bok := pnext.MaxFragmentID(); a != b || aok != bok {
					t.Fatalf("step %d: max fragment id %d %t, want %d %t", i, b, bok, a, aok)
				}
				if rng.IntN(3) == 0 {
					p := pnext.Packed()
					if err := ixB.ReplaceHead(p); err != nil {
						t.Fatal(err)
					}
					pnext = p
					maxChunks = max(maxChunks, p.PackedChunks())
				}
				if rng.IntN(8) == 0 || i == 399 {
					samePackedManifests(t, i, next, pnext)
					if seed%2 == 0 {
						samePackedIndexes(t, i, ixA, ixB, next)
					}
				}
				plainV[next.Version()], packedV[pnext.Version()] = next, pnext
				plain, packed = next, pnext
			}
			if maxChunks > 8 || maxChunks < 2 || stayed < 100 {
				t.Fatalf("at most %d chunks; %d appends onto packed heads", maxChunks, stayed)
			}
			t.Logf("at most %d chunks; %d appends onto packed heads", maxChunks, stayed)
		})
	}
}

// packedRandomTxn is a transaction on head, at version v: an Append
// (1 to 3 fragments; a single one now and then with an id of its own) four times
// in five, otherwise another operation.
func packedRandomTxn(rng *rand.Rand, head *table.Manifest, v uint64, i int, restore bool) *lancepb.Transaction {
	var ids []uint64
	for f := range head.Fragments() { // the plain head: reading it decodes nothing
		ids = append(ids, f.ID())
	}
	pick := func() *lancepb.DataFragment {
		f, _ := head.Fragment(ids[rng.IntN(len(ids))])
		return f.Proto()
	}
	op := rng.IntN(20)
	switch {
	case op == 0 && len(ids) > 0:
		return apDelete(v, []uint64{ids[rng.IntN(len(ids))]})
	case op == 1 && len(ids) > 0:
		f := pick()
		if f.GetDeletionFile() != nil {
			break
		}
		return apDelete(v, nil, apWithDel(f, apDel(v, uint64(i+1), 1)))
	case op == 2 && len(ids) > 2 && head.Header().GetReaderFeatureFlags()&table.FlagStableRowIDs == 0: // a stable table's rewrite carries row ids
		j := rng.IntN(len(ids) - 1)
		old := make([]*lancepb.DataFragment, 2)
		old[0], _ = protoOf(head, ids[j])
		old[1], _ = protoOf(head, ids[j+1])
		return apRewrite(v, &lancepb.Transaction_Rewrite_RewriteGroup{OldFragments: old, NewFragments: []*lancepb.DataFragment{apFrag(0, old[0].GetPhysicalRows()+old[1].GetPhysicalRows(), apFile(fmt.Sprintf("data/c-%d.lance", i), 0, 1, 2, 3))}})
	case op == 3:
		return &lancepb.Transaction{ReadVersion: v, Operation: &lancepb.Transaction_ReserveFragments_{ReserveFragments: &lancepb.Transaction_ReserveFragments{NumFragments: uint32(1 + rng.IntN(3))}}}
	case op == 4:
		return &lancepb.Transaction{ReadVersion: v, Operation: &lancepb.Transaction_UpdateConfig_{UpdateConfig: &lancepb.Transaction_UpdateConfig{UpsertValues: map[string]string{"k": fmt.Sprint(i)}}}}
	case op == 5 && rng.IntN(4) == 0:
		return apOverwrite(v, &lancepb.Transaction_Overwrite{Schema: apSchema(), Fragments: []*lancepb.DataFragment{apFrag(0, 7, apFile(fmt.Sprintf("data/o-%d.lance", i), 0, 1, 2, 3))}})
	case op == 6 && v > 3 && restore:
		return apRestore(v, v-1-uint64(rng.IntN(3)))
	}
	txn := apAppend(v)
	txn.Uuid = fmt.Sprint("u", i)
	app := txn.GetAppend()
	n := 1 + rng.IntN(3)
	for k := range n {
		f := apFrag(0, uint64(1+rng.IntN(1000)), apFile(fmt.Sprintf("data/a-%d-%d.lance", i, k), 0, 1, 2, 3))
		if n == 1 && rng.IntN(5) == 0 {
			if m, ok := head.MaxFragmentID(); ok {
				f.Id = uint64(m) + 5 // an id above the high-water mark
			}
		}
		app.Fragments = append(app.Fragments, f)
	}
	return txn
}

// maxIsLast reports whether m's last fragment in scan order has its
// highest id: where an Append puts its fragments at the end.
func maxIsLast(m *table.Manifest) bool {
	var last uint64
	maxID, n := uint64(0), 0
	for f := range m.Fragments() {
		last, maxID, n = f.ID(), max(maxID, f.ID()), n+1
	}
	return n == 0 || last == maxID
}

func protoOf(m *table.Manifest, id uint64) (*lancepb.DataFragment, bool) {
	f, ok := m.Fragment(id)
	if !ok {
		return nil, false
	}
	return f.Proto(), true
}

func samePackedManifests(t *testing.T, step int, want, got *table.Manifest) {
	t.Helper()
	if !bytes.Equal(mustEncoding(t, want), mustEncoding(t, got)) {
		t.Fatalf("step %d: v%d encodes to other bytes", step, want.Version())
	}
	var ids []uint64
	for f := range want.Fragments() {
		ids = append(ids, f.ID())
	}
	i := 0
	for f := range got.Fragments() {
		if i >= len(ids) || f.ID() != ids[i] {
			t.Fatalf("step %d: scan order differs at %d", step, i)
		}
		i++
	}
	for _, id := range ids {
		f, ok := got.Fragment(id)
		g, _ := want.Fragment(id)
		if !ok || !bytes.Equal(mustFragment(t, f), mustFragment(t, g)) || f.LiveRows() != g.LiveRows() {
			t.Fatalf("step %d: fragment %d differs", step, id)
		}
	}
	if _, ok := got.Fragment(1 << 40); ok {
		t.Fatalf("step %d: a fragment that does not exist is found", step)
	}
}

func mustFragment(t *testing.T, f *table.Fragment) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(f.Proto())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func samePackedIndexes(t *testing.T, step int, a, b *table.ChangeIndex, head *table.Manifest) {
	t.Helper()
	if a.Horizon() != b.Horizon() || a.Bytes() != b.Bytes() {
		t.Fatalf("step %d: horizon %d/%d, bytes %d/%d", step, a.Horizon(), b.Horizon(), a.Bytes(), b.Bytes())
	}
	maxID, _ := head.MaxFragmentID()
	for id := range uint64(maxID) + 2 {
		for after := a.Horizon(); after <= head.Version(); after += 1 + (head.Version()-after)/4 {
			x, y := a.Changes(id, after, 1000), b.Changes(id, after, 1000)
			if fmt.Sprint(x) != fmt.Sprint(y) {
				t.Fatalf("step %d: Changes(%d, %d): %v plain, %v packed", step, id, after, x, y)
			}
		}
	}
	for v := a.Horizon(); v <= head.Version(); v += 1 + (head.Version()-v)/4 {
		wa, okA := a.At(v)
		wb, okB := b.At(v)
		if okA != okB {
			t.Fatalf("step %d: At(%d) %t/%t", step, v, okA, okB)
		}
		if !okA {
			continue
		}
		for id := range uint64(maxID) + 2 {
			fa, okA := wa.Fragment(id)
			fb, okB := wb.Fragment(id)
			if okA != okB || okA && !bytes.Equal(mustFragment(t, fa), mustFragment(t, fb)) {
				t.Fatalf("step %d: v%d fragment %d differs", step, v, id)
			}
		}
	}
}
