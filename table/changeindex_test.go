package table_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"cellguard/internal/gctest"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// indexHistory is a random history built with Builder: fragments added,
// replaced (new data file, new deletion file), removed and re-created
// under an old id, the schema replaced, base paths redefined, and
// versions that change nothing.
type indexHistory struct {
	rng   *rand.Rand
	mans  []*table.Manifest // by version; mans[0] is nil
	uuids []string
	ids   uint64 // fragment ids ever used are < ids
}

func newIndexHistory(t *testing.T, seed uint64, frags int) *indexHistory {
	t.Helper()
	h := &indexHistory{rng: rand.New(rand.NewPCG(seed, 7)), mans: []*table.Manifest{nil}, uuids: []string{""}}
	pb := &lancepb.Manifest{Version: 1, Fields: []*lancepb.Field{
		{Id: 0, ParentId: -1, Name: "a", LogicalType: "int64"},
		{Id: 1, ParentId: -1, Name: "b", LogicalType: "int64"},
	}}
	for range frags {
		pb.Fragments = append(pb.Fragments, h.frag(h.ids))
		h.ids++
	}
	m, err := table.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	h.push(m)
	return h
}

func (h *indexHistory) frag(id uint64) *lancepb.DataFragment {
	return &lancepb.DataFragment{Id: id, PhysicalRows: 10, Files: []*lancepb.DataFile{
		{Path: fmt.Sprintf("data/%d-%d.lance", id, h.rng.Uint64()), Fields: []int32{0, 1}, ColumnIndices: []int32{0, 1}},
	}}
}

func (h *indexHistory) head() *table.Manifest { return h.mans[len(h.mans)-1] }

func (h *indexHistory) push(m *table.Manifest) {
	h.mans = append(h.mans, m)
	h.uuids = append(h.uuids, fmt.Sprintf("txn-%d", len(h.mans)-1))
}

// step builds the next version with a few random edits.
func (h *indexHistory) step(t *testing.T) *table.Manifest {
	t.Helper()
	b := h.head().Edit()
	b.Header().Version = uint64(len(h.mans))
	for range h.rng.IntN(3) {
		id := h.rng.Uint64N(h.ids + 1)
		_, exists := b.Fragment(id)
		var err error
		switch k := h.rng.IntN(10); {
		case id == h.ids:
			err = b.Append(table.NewFragment(h.frag(id)))
			h.ids++
		case !exists:
			err = b.Append(table.NewFragment(h.frag(id))) // an old id comes back
		case k < 5:
			pb := h.frag(id)
			if k < 2 {
				pb.DeletionFile = &lancepb.DeletionFile{ReadVersion: uint64(len(h.mans)), Id: h.rng.Uint64(), NumDeletedRows: 1}
			}
			err = b.Replace(table.NewFragment(pb))
		case k < 8:
			err = b.Remove(id)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if h.rng.IntN(10) == 0 {
		s, err := table.NewSchema(h.head().Schema().Fields())
		if err != nil {
			t.Fatal(err)
		}
		b.SetSchema(s)
	}
	if h.rng.IntN(10) == 0 {
		b.Header().BasePaths = []*lancepb.BasePath{{Id: 1, Path: fmt.Sprintf("s3://b/%d", h.rng.IntN(3))}}
	}
	m := b.Build()
	h.push(m)
	return m
}

// checkViews compares every view the index offers with the manifests.
func checkViews(t *testing.T, ix *table.ChangeIndex, mans []*table.Manifest, ids uint64) {
	t.Helper()
	head := ix.Head().Version()
	if _, ok := ix.At(ix.Horizon() - 1); ok && ix.Horizon() > 0 {
		t.Fatalf("At(%d) before the horizon %d reports true", ix.Horizon()-1, ix.Horizon())
	}
	if _, ok := ix.At(head + 1); ok {
		t.Fatalf("At(%d) after head reports true", head+1)
	}
	for v := ix.Horizon(); v <= head; v++ {
		w, ok := ix.At(v)
		if !ok {
			t.Fatalf("At(%d) false, horizon %d head %d", v, ix.Horizon(), head)
		}
		m := mans[v]
		if w.Schema() != m.Schema() {
			t.Fatalf("v%d: schema differs", v)
		}
		if !table.SameBasePaths(w.BasePaths(), m.BasePaths()) {
			t.Fatalf("v%d: base paths %v, want %v", v, w.BasePaths(), m.BasePaths())
		}
		for id := range ids + 1 {
			got, okG := w.Fragment(id)
			want, okW := m.Fragment(id)
			if okG != okW || okG && !table.SameFragment(got, want) {
				t.Fatalf("v%d fragment %d: view has (%v, %t), manifest (%v, %t)", v, id, got, okG, want, okW)
			}
		}
	}
}

func TestChangeIndexViewsMatchManifests(t *testing.T) {
	for seed := range uint64(20) {
		lim := table.IndexLimits{}
		if seed%2 == 1 {
			lim.MaxBytes = 1 + int(seed)*300 // small: the horizon moves
		}
		h := newIndexHistory(t, seed, 3+int(seed%5))
		ix := table.NewChangeIndex(h.head(), lim)
		moved := false
		for range 60 {
			m := h.step(t)
			if err := ix.Advance(m, h.uuids[m.Version()]); err != nil {
				t.Fatal(err)
			}
			if ix.Bytes() > max(lim.MaxBytes, 0) && lim.MaxBytes > 0 {
				t.Fatalf("seed %d: index holds %d bytes, limit %d", seed, ix.Bytes(), lim.MaxBytes)
			}
			moved = moved || ix.Horizon() > 1
			checkViews(t, ix, h.mans, h.ids)
		}
		if lim.MaxBytes > 0 && !moved {
			t.Errorf("seed %d: limit %d never moved the horizon", seed, lim.MaxBytes)
		}
		if lim.MaxBytes == 0 && ix.Horizon() != 1 {
			t.Errorf("seed %d: default limits moved the horizon to %d", seed, ix.Horizon())
		}
	}
}

// TestChangeIndexChanges: Changes lists exactly the versions at which the
// fragment, the schema or the base paths changed, and Txn names them.
func TestChangeIndexChanges(t *testing.T) {
	h := newIndexHistory(t, 99, 4)
	ix := table.NewChangeIndex(h.head(), table.IndexLimits{})
	for range 80 {
		m := h.step(t)
		if err := ix.Advance(m, h.uuids[m.Version()]); err != nil {
			t.Fatal(err)
		}
	}
	head := ix.Head().Version()
	for id := range h.ids {
		for after := uint64(1); after < head; after += 7 {
			var want []uint64
			for v := after + 1; v <= head; v++ {
				a, okA := h.mans[v-1].Fragment(id)
				b, okB := h.mans[v].Fragment(id)
				if okA != okB || okA && !table.SameFragment(a, b) || h.mans[v-1].Schema() != h.mans[v].Schema() ||
					!table.SameBasePaths(h.mans[v-1].BasePaths(), h.mans[v].BasePaths()) {
					want = append(want, v)
				}
			}
			got := ix.Changes(id, after, 1000)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("Changes(%d, %d) = %v; want %v", id, after, got, want)
			}
			if len(want) > 2 {
				if got := ix.Changes(id, after, 2); fmt.Sprint(got) != fmt.Sprint(want[:2]) {
					t.Fatalf("Changes(%d, %d, 2) = %v; want %v", id, after, got, want[:2])
				}
			}
			for _, v := range want {
				if u, ok := ix.Txn(v); !ok || u != h.uuids[v] {
					t.Fatalf("Txn(%d) = %q, %t; want %q", v, u, ok, h.uuids[v])
				}
			}
		}
	}
}

func TestChangeIndexRollback(t *testing.T) {
	for seed := range uint64(10) {
		h := newIndexHistory(t, seed, 5)
		ix := table.NewChangeIndex(h.head(), table.IndexLimits{MaxBytes: 4000 + int(seed)*1000})
		for range 30 {
			m := h.step(t)
			if err := ix.Advance(m, h.uuids[m.Version()]); err != nil {
				t.Fatal(err)
			}
		}
		bytes := ix.Bytes()
		base := len(h.mans) - 1
		for range 5 { // a provisional batch
			m := h.step(t)
			if err := ix.Advance(m, h.uuids[m.Version()]); err != nil {
				t.Fatal(err)
			}
		}
		ix.Rollback(h.mans[base])
		if ix.Head() != h.mans[base] {
			t.Fatalf("seed %d: head after rollback is v%d, want v%d", seed, ix.Head().Version(), base)
		}
		if ix.Horizon() >= uint64(base-4) && ix.Bytes() > bytes {
			t.Fatalf("seed %d: %d bytes after rollback, %d before the batch", seed, ix.Bytes(), bytes)
		}
		h.mans = h.mans[:base+1]
		h.uuids = h.uuids[:base+1]
		checkViews(t, ix, h.mans, h.ids)
		for range 10 { // and the index continues along another branch
			m := h.step(t)
			if err := ix.Advance(m, h.uuids[m.Version()]); err != nil {
				t.Fatal(err)
			}
		}
		checkViews(t, ix, h.mans, h.ids)
	}
}

func TestChangeIndexRollbackBeforeHorizonRebuilds(t *testing.T) {
	h := newIndexHistory(t, 3, 5)
	ix := table.NewChangeIndex(h.head(), table.IndexLimits{MaxBytes: 1})
	for range 10 {
		m := h.step(t)
		if err := ix.Advance(m, h.uuids[m.Version()]); err != nil {
			t.Fatal(err)
		}
	}
	ix.Rollback(h.mans[2])
	if ix.Horizon() != 2 || ix.Head() != h.mans[2] {
		t.Fatalf("after Rollback(v2) before the horizon: horizon %d head v%d; want a rebuild at 2", ix.Horizon(), ix.Head().Version())
	}
}

func TestChangeIndexAdvanceGap(t *testing.T) {
	h := newIndexHistory(t, 1, 2)
	ix := table.NewChangeIndex(h.head(), table.IndexLimits{})
	h.step(t)
	m := h.step(t)
	if err := ix.Advance(m, "x"); !errors.Is(err, table.ErrIndexGap) {
		t.Fatalf("Advance(v3) on head v1 = %v; want ErrIndexGap", err)
	}
	if err := ix.Advance(nil, "x"); !errors.Is(err, table.ErrIndexGap) {
		t.Fatalf("Advance(nil) = %v; want ErrIndexGap", err)
	}
	if ix.Head() != h.mans[1] {
		t.Fatalf("a refused Advance changed the head")
	}
	empty := table.NewChangeIndex(nil, table.IndexLimits{})
	if _, ok := empty.At(0); ok {
		t.Fatalf("At on an index without a head reports true")
	}
	if err := empty.Advance(h.mans[1], "create"); err != nil || empty.Head() != h.mans[1] || empty.Horizon() != 1 {
		t.Fatalf("first Advance: %v, horizon %d", err, empty.Horizon())
	}
}

// TestChangeIndexLanceHistories advances an index through every fixture
// history written by real Lance, replayed with Apply, and checks every
// view against the replayed manifests.
func TestChangeIndexLanceHistories(t *testing.T) {
	for _, name := range historyNames(t) {
		t.Run(name, func(t *testing.T) {
			h := loadHistory(t, name)
			first := h.Versions[0]
			cur, err := table.FromProto(first.Manifest)
			if err != nil {
				t.Fatal(err)
			}
			mans := make([]*table.Manifest, first.Version+1)
			mans[first.Version] = cur
			built := rpVersions{first.Version: cur}
			ix := table.NewChangeIndex(cur, table.IndexLimits{})
			var ids uint64
			for _, v := range h.Versions[1:] {
				next, err := table.Apply(t.Context(), cur, v.Txn, built)
				if err != nil {
					t.Fatalf("v%d: %v", v.Version, err)
				}
				if err := ix.Advance(next, v.Txn.GetUuid()); err != nil {
					t.Fatalf("v%d: Advance: %v", v.Version, err)
				}
				if mid, ok := next.MaxFragmentID(); ok {
					ids = max(ids, uint64(mid)+1)
				}
				mans = append(mans, next)
				built[v.Version] = next
				cur = next
			}
			checkViews(t, ix, mans, ids)
		})
	}
}

// TestChangeIndexShrink: shrinking frees the oldest versions first, to the
// requested size (all of them for 0), and every view the index still
// offers matches its manifest; later advances grow it again.
func TestChangeIndexShrink(t *testing.T) {
	h := newIndexHistory(t, 5, 6)
	ix := table.NewChangeIndex(h.head(), table.IndexLimits{})
	for range 40 {
		m := h.step(t)
		if err := ix.Advance(m, h.uuids[m.Version()]); err != nil {
			t.Fatal(err)
		}
	}
	half := ix.Bytes() / 2
	ix.Shrink(half)
	if ix.Bytes() > half || ix.Horizon() <= 1 {
		t.Fatalf("Shrink(%d): %d bytes, horizon %d", half, ix.Bytes(), ix.Horizon())
	}
	checkViews(t, ix, h.mans, h.ids)
	ix.Shrink(0)
	if ix.Bytes() != 0 {
		t.Fatalf("Shrink(0) leaves %d bytes", ix.Bytes())
	}
	if _, ok := ix.At(ix.Head().Version()); !ok {
		t.Fatal("the head is no longer answered after Shrink(0)")
	}
	checkViews(t, ix, h.mans, h.ids)
	for range 5 {
		m := h.step(t)
		if err := ix.Advance(m, h.uuids[m.Version()]); err != nil {
			t.Fatal(err)
		}
	}
	checkViews(t, ix, h.mans, h.ids)
}

// TestChangeIndexFreshAppends drives the index with what a committer
// mostly sees, appended fragments, some of them changed or removed soon
// after (so that fresh fragments get histories), with rollbacks of
// provisional batches and a horizon that moves. Views must match the
// manifests, the bytes after a rollback must be what they were at that
// version, and forgetting everything must leave exactly nothing counted.
func TestChangeIndexFreshAppends(t *testing.T) {
	for seed := range uint64(12) {
		h := newIndexHistory(t, seed, 2)
		lim := table.IndexLimits{MaxBytes: []int{0, 3000, 20000}[seed%3]}
		ix := table.NewChangeIndex(h.head(), lim)
		bytesAt := map[uint64]int{h.head().Version(): ix.Bytes()}
		horizonAt := map[uint64]uint64{h.head().Version(): ix.Horizon()}
		for step := range 150 {
			b := h.head().Edit()
			b.Header().Version = uint64(len(h.mans))
			for range 1 + h.rng.IntN(3) {
				if err := b.Append(table.NewFragment(h.frag(h.ids))); err != nil {
					t.Fatal(err)
				}
				h.ids++
			}
			if h.rng.IntN(4) == 0 { // change or remove a recent fragment
				id := h.ids - 1 - h.rng.Uint64N(min(h.ids, 6))
				if _, ok := b.Fragment(id); ok {
					var err error
					if h.rng.IntN(2) == 0 {
						err = b.Remove(id)
					} else {
						err = b.Replace(table.NewFragment(h.frag(id)))
					}
					if err != nil {
						t.Fatal(err)
					}
				}
			}
			m := b.Build()
			h.push(m)
			if err := ix.Advance(m, h.uuids[m.Version()]); err != nil {
				t.Fatal(err)
			}
			bytesAt[m.Version()], horizonAt[m.Version()] = ix.Bytes(), ix.Horizon()
			if step%10 == 9 { // roll a provisional batch back
				to := m.Version() - 1 - h.rng.Uint64N(3)
				if to >= ix.Horizon() {
					ix.Rollback(h.mans[to])
					if horizonAt[to] == ix.Horizon() && ix.Bytes() != bytesAt[to] {
						t.Fatalf("seed %d: %d bytes after rolling back to v%d; %d there before", seed, ix.Bytes(), to, bytesAt[to])
					}
					h.mans, h.uuids = h.mans[:to+1], h.uuids[:to+1]
				}
			}
			checkViews(t, ix, h.mans, h.ids)
		}
		ix.Shrink(0)
		if ix.Bytes() != 0 || ix.Horizon() != ix.Head().Version() {
			t.Fatalf("seed %d: after Shrink(0): %d bytes, horizon %d, head %d", seed, ix.Bytes(), ix.Horizon(), ix.Head().Version())
		}
		checkViews(t, ix, h.mans, h.ids)
	}
}

// TestChangeIndexKeepsNoCallersUUIDBytes: the index keeps a copy of each
// step's transaction uuid, not the caller's bytes (a decoded uuid is its
// staged body's own, which the index must not keep alive).
func TestChangeIndexKeepsNoCallersUUIDBytes(t *testing.T) {
	h := newIndexHistory(t, 7, 4)
	ix := table.NewChangeIndex(h.head(), table.IndexLimits{})
	for range 100 {
		m := h.step(t)
		want := h.uuids[m.Version()]
		body := []byte("body:" + want)
		released := gctest.Watch(&body[0])
		if err := ix.Advance(m, unsafe.String(&body[5], len(body)-5)); err != nil {
			t.Fatal(err)
		}
		body = nil
		if _, ok := ix.Txn(m.Version()); !ok {
			continue // a version that changed nothing: no step kept
		}
		gctest.AwaitReleased(t, released, "the uuid's bytes")
		if u, _ := ix.Txn(m.Version()); u != want {
			t.Fatalf("Txn(%d) = %q; want %q", m.Version(), u, want)
		}
		return
	}
	t.Fatal("no version of the history changed anything")
}
