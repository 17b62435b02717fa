package data_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"gocloud.dev/blob/memblob"

	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

// mfrag is the expected content of one fragment: every cell of every
// physical row, and which rows are deleted.
type mfrag struct {
	id      uint64
	rows    int
	deleted map[uint32]bool
	vals    map[int32][]any // field → value per physical row; absent field: all null
}

// model is the expected content of a table at one version.
type model struct{ frags []*mfrag }

func (m *model) clone() *model {
	c := &model{}
	for _, f := range m.frags {
		g := &mfrag{id: f.id, rows: f.rows, deleted: maps.Clone(f.deleted), vals: map[int32][]any{}}
		for id, v := range f.vals {
			g.vals[id] = slices.Clone(v)
		}
		c.frags = append(c.frags, g)
	}
	return c
}

func (m *model) frag(id uint64) *mfrag {
	for _, f := range m.frags {
		if f.id == id {
			return f
		}
	}
	panic(fmt.Sprintf("model has no fragment %d", id))
}

func (f *mfrag) value(field int32, o uint32) any {
	if v, ok := f.vals[field]; ok {
		return v[o]
	}
	return nil
}

// scenario commits transactions built from the data plane's writers and
// keeps the manifest and the expected model of every version.
type scenario struct {
	t        *testing.T
	ctx      context.Context
	s        *data.Store
	schema   *table.Schema
	rng      *rand.Rand
	head     *table.Manifest
	want     *model
	versions []*table.Manifest
	models   []*model
}

func newScenario(t *testing.T, s *data.Store) *scenario {
	return &scenario{t: t, ctx: context.Background(), s: s, schema: testSchema(t),
		rng: rand.New(rand.NewPCG(1, 2)), want: &model{}}
}

// gen returns a random value for field id; nullable fields are null one
// time in eight.
func (sc *scenario) gen(id int32) any {
	if testFields[id].GetNullable() && sc.rng.IntN(8) == 0 {
		return nil
	}
	switch id {
	case fX, fY:
		return sc.rng.Int64N(1_000_000) - 500_000
	case fS:
		return fmt.Sprintf("s%d", sc.rng.IntN(1000))
	case fF:
		return sc.rng.Float64()
	case fB:
		return sc.rng.IntN(2) == 0
	}
	panic("gen: field")
}

func (sc *scenario) column(id int32, n int) []any {
	v := make([]any, n)
	for i := range v {
		v[i] = sc.gen(id)
	}
	return v
}

func (sc *scenario) commit(txn *lancepb.Transaction) { sc.commitAfter(txn, func() {}) }

// newFragments writes fragments of the given sizes holding fields, and
// returns them with their expected content (ids not yet known).
func (sc *scenario) newFragments(sizes []int, fields ...int32) ([]*lancepb.DataFragment, []*mfrag) {
	sc.t.Helper()
	var pbs []*lancepb.DataFragment
	var ms []*mfrag
	for _, n := range sizes {
		mf := &mfrag{rows: n, deleted: map[uint32]bool{}, vals: map[int32][]any{}}
		cols := map[int32]arrow.Array{}
		for _, id := range fields {
			mf.vals[id] = sc.column(id, n)
			cols[id] = toArray(fieldArrowType(id), mf.vals[id])
		}
		pb, err := sc.s.WriteFragment(sc.ctx, sc.schema, cols)
		if err != nil {
			sc.t.Fatal(err)
		}
		if pb.GetPhysicalRows() != uint64(n) || pb.GetId() != 0 {
			sc.t.Fatalf("WriteFragment: rows %d id %d, want %d rows id 0", pb.GetPhysicalRows(), pb.GetId(), n)
		}
		pbs = append(pbs, pb)
		ms = append(ms, mf)
	}
	return pbs, ms
}

// learnIDs gives the new fragments of the model the ids the commit
// assigned: those of the fragments of head that the model lacks, in order.
func (sc *scenario) learnIDs(ms []*mfrag) {
	known := map[uint64]bool{}
	for _, f := range sc.want.frags {
		known[f.id] = true
	}
	i := 0
	for f := range sc.head.Fragments() {
		if !known[f.ID()] {
			ms[i].id = f.ID()
			i++
		}
	}
}

func (sc *scenario) create(sizes []int, fields ...int32) {
	pbs, ms := sc.newFragments(sizes, fields...)
	sc.want.frags = ms
	sc.commitAfter(&lancepb.Transaction{Operation: &lancepb.Transaction_Overwrite_{
		Overwrite: &lancepb.Transaction_Overwrite{Fragments: pbs, Schema: testFields}}}, func() {
		sc.want.frags = nil
		sc.learnIDs(ms)
		sc.want.frags = ms
	})
}

func (sc *scenario) appendFragments(sizes []int, fields ...int32) {
	pbs, ms := sc.newFragments(sizes, fields...)
	sc.commitAfter(&lancepb.Transaction{Operation: &lancepb.Transaction_Append_{
		Append: &lancepb.Transaction_Append{Fragments: pbs}}}, func() {
		sc.learnIDs(ms)
		sc.want.frags = append(sc.want.frags, ms...)
	})
}

// commitAfter commits txn, then updates the model with update before the
// version's snapshot is taken.
func (sc *scenario) commitAfter(txn *lancepb.Transaction, update func()) {
	sc.t.Helper()
	var readVersion uint64
	if sc.head != nil {
		readVersion = sc.head.Version()
	}
	txn.ReadVersion = readVersion
	next, err := table.Apply(sc.t.Context(), sc.head, txn, nil)
	if err != nil {
		sc.t.Fatalf("apply at version %d: %v", readVersion, err)
	}
	sc.head = next
	update()
	sc.versions = append(sc.versions, next)
	sc.models = append(sc.models, sc.want.clone())
}

// replace rewrites whole columns of fragments: frag → fields.
func (sc *scenario) replace(changes map[uint64][]int32) {
	sc.t.Helper()
	op := &lancepb.Transaction_DataReplacement{}
	for _, fid := range slices.Sorted(maps.Keys(changes)) {
		frag, _ := sc.head.Fragment(fid)
		mf := sc.want.frag(fid)
		cols := map[int32]arrow.Array{}
		for _, id := range changes[fid] {
			mf.vals[id] = sc.column(id, mf.rows)
			cols[id] = toArray(fieldArrowType(id), mf.vals[id])
		}
		df, err := sc.s.WriteColumns(sc.ctx, sc.schema, frag, cols)
		if err != nil {
			sc.t.Fatal(err)
		}
		op.Replacements = append(op.Replacements, &lancepb.Transaction_DataReplacementGroup{FragmentId: fid, NewFile: df})
	}
	sc.commit(&lancepb.Transaction{Operation: &lancepb.Transaction_DataReplacement_{DataReplacement: op}})
}

// overlay is one overlay to write: the cells per field, with nil values
// generated at random.
type overlay struct {
	frag  uint64
	cells map[int32][]uint32
	nulls map[int32]uint32 // an offset whose new value is null, per field
}

// overlays commits one DataOverlay transaction holding ovs, in order.
func (sc *scenario) overlays(ovs ...overlay) {
	sc.t.Helper()
	var groups []*lancepb.Transaction_DataOverlayGroup
	for _, ov := range ovs {
		frag, _ := sc.head.Fragment(ov.frag)
		mf := sc.want.frag(ov.frag)
		cells := map[int32]data.Cells{}
		for id, offs := range ov.cells {
			vals := make([]any, len(offs))
			for i, o := range offs {
				vals[i] = sc.gen(id)
				if n, ok := ov.nulls[id]; ok && n == o {
					vals[i] = nil
				}
				if mf.vals[id] == nil {
					mf.vals[id] = make([]any, mf.rows)
				}
				mf.vals[id][o] = vals[i]
			}
			cells[id] = data.Cells{Offsets: offs, Values: toArray(fieldArrowType(id), vals)}
		}
		pb, err := sc.s.WriteOverlay(sc.ctx, sc.schema, frag, cells)
		if err != nil {
			sc.t.Fatal(err)
		}
		if n := len(groups); n > 0 && groups[n-1].FragmentId == ov.frag {
			groups[n-1].Overlays = append(groups[n-1].Overlays, pb)
		} else {
			groups = append(groups, &lancepb.Transaction_DataOverlayGroup{FragmentId: ov.frag, Overlays: []*lancepb.DataOverlayFile{pb}})
		}
	}
	sc.commit(&lancepb.Transaction{Operation: &lancepb.Transaction_DataOverlay_{
		DataOverlay: &lancepb.Transaction_DataOverlay{Groups: groups}}})
}

// delete deletes rows: frag → offsets.
func (sc *scenario) delete(rows map[uint64][]uint32) {
	sc.t.Helper()
	op := &lancepb.Transaction_Delete{}
	for _, fid := range slices.Sorted(maps.Keys(rows)) {
		df, err := sc.s.DeleteRows(sc.ctx, sc.head, fid, rows[fid])
		if err != nil {
			sc.t.Fatal(err)
		}
		mf := sc.want.frag(fid)
		for _, o := range rows[fid] {
			mf.deleted[o] = true
		}
		if df.GetNumDeletedRows() != uint64(len(mf.deleted)) || df.GetReadVersion() != sc.head.Version() ||
			df.GetFileType() != lancepb.DeletionFile_BITMAP {
			sc.t.Fatalf("DeleteRows = %v; want %d rows, read version %d, BITMAP", df, len(mf.deleted), sc.head.Version())
		}
		frag, _ := sc.head.Fragment(fid)
		post := cloneFragment(frag.Proto())
		post.DeletionFile = df
		op.UpdatedFragments = append(op.UpdatedFragments, post)
	}
	sc.commit(&lancepb.Transaction{Operation: &lancepb.Transaction_Delete_{Delete: op}})
}

// offsets returns n distinct random offsets below rows.
func (sc *scenario) offsets(rows, n int) []uint32 {
	p := sc.rng.Perm(rows)[:n]
	out := make([]uint32, n)
	for i, o := range p {
		out[i] = uint32(o)
	}
	return out
}

// run commits the scenario: every way the data plane changes cells.
func (sc *scenario) run() {
	sc.create([]int{100, 50, 1}, fX, fS, fF, fB)             // v1: fragments 0, 1, 2; y all null
	sc.appendFragments([]int{70}, fX, fS, fF, fB, fY)        // v2: fragment 3
	sc.replace(map[uint64][]int32{0: {fX}})                  // v3: a column file
	sc.replace(map[uint64][]int32{1: {fS, fF}, 3: {fS, fF}}) // v4: two-field column files
	shared := sc.offsets(89, 20)                             // in [1, 90): clear of the offsets named below
	for i := range shared {
		shared[i]++
	}
	sc.overlays( // v5: three overlays, two of fragment 0 at one committed version
		overlay{frag: 0, cells: map[int32][]uint32{fX: shared, fS: shared}, nulls: map[int32]uint32{fS: shared[3]}},
		overlay{frag: 0, cells: map[int32][]uint32{
			fX: append(slices.Clone(shared[:8]), 99, 98, 0), // overlaps the first: list order decides
			fY: {5, 6, 7, shared[0]},
		}, nulls: map[int32]uint32{fY: 6}},
		overlay{frag: 3, cells: map[int32][]uint32{fB: {0, 69}, fY: {1}}, nulls: map[int32]uint32{fB: 69}},
	)
	sc.delete(map[uint64][]uint32{0: {shared[0], shared[1], 98, 42}, 2: {0}})                // v6
	sc.overlays(overlay{frag: 0, cells: map[int32][]uint32{fX: {shared[0], shared[2], 97}}}) // v7: one covered cell is deleted
	sc.replace(map[uint64][]int32{0: {fX}})                                                  // v8: supersedes x in all overlays
	sc.delete(map[uint64][]uint32{0: {3, 4}, 3: sc.offsets(70, 30)})                         // v9: adds to the deletions
	sc.overlays(overlay{frag: 0, cells: map[int32][]uint32{fX: {5, 50, 51}, fF: {5}}})       // v10: newer than the column file
	sc.appendFragments([]int{10}, fX)                                                        // v11
}

func (sc *scenario) check() {
	t := sc.t
	all := []int32{fX, fS, fF, fB, fY}
	for vi, m := range sc.versions {
		want := sc.models[vi]
		t.Run(fmt.Sprintf("v%d", m.Version()), func(t *testing.T) {
			i := 0
			for b, err := range sc.s.Scan(sc.ctx, m, all) {
				if err != nil {
					t.Fatalf("Scan: %v", err)
				}
				if i >= len(want.frags) {
					t.Fatalf("Scan yields fragment %d beyond the %d expected", b.FragmentID, len(want.frags))
				}
				checkBatch(t, b, want.frags[i], all)
				i++
			}
			if i != len(want.frags) {
				t.Fatalf("Scan yielded %d fragments, want %d", i, len(want.frags))
			}
			for _, mf := range want.frags {
				b, err := sc.s.ReadFragment(sc.ctx, m, mf.id, []int32{fY, fX})
				if err != nil {
					t.Fatalf("ReadFragment(%d): %v", mf.id, err)
				}
				checkBatch(t, b, mf, []int32{fY, fX})
				sc.checkCells(t, m, mf)
			}
		})
	}
}

// checkCells reads every physical row of mf, in reverse order, one field
// at a time, and checks values and deletions.
func (sc *scenario) checkCells(t *testing.T, m *table.Manifest, mf *mfrag) {
	var live []uint32
	for o := mf.rows - 1; o >= 0; o-- {
		if mf.deleted[uint32(o)] {
			_, err := sc.s.ReadCells(sc.ctx, m, fX, mf.id, []uint32{uint32(o)})
			if !errors.Is(err, data.ErrDeleted) {
				t.Errorf("ReadCells(frag %d, offset %d) error = %v, want ErrDeleted", mf.id, o, err)
			}
			continue
		}
		live = append(live, uint32(o))
	}
	for _, id := range []int32{fX, fS, fF, fB, fY} {
		a, err := sc.s.ReadCells(sc.ctx, m, id, mf.id, live)
		if err != nil {
			t.Fatalf("ReadCells(field %d, frag %d): %v", id, mf.id, err)
		}
		got := fromArray(a)
		for i, o := range live {
			if w := mf.value(id, o); !reflect.DeepEqual(got[i], w) {
				t.Errorf("ReadCells field %d frag %d offset %d = %v; want %v", id, mf.id, o, got[i], w)
			}
		}
	}
	_, err := sc.s.ReadCells(sc.ctx, m, fX, mf.id, []uint32{uint32(mf.rows)})
	if !errors.Is(err, data.ErrOutOfRange) {
		t.Errorf("ReadCells past the end: error = %v, want ErrOutOfRange", err)
	}
}

func checkBatch(t *testing.T, b *data.Batch, mf *mfrag, fields []int32) {
	t.Helper()
	if b.FragmentID != mf.id {
		t.Fatalf("batch of fragment %d, want %d", b.FragmentID, mf.id)
	}
	var live []uint32
	for o := range mf.rows {
		if !mf.deleted[uint32(o)] {
			live = append(live, uint32(o))
		}
	}
	if !slices.Equal(b.Offsets, live) && !(len(live) == 0 && len(b.Offsets) == 0) {
		t.Fatalf("fragment %d offsets = %v; want %v", mf.id, b.Offsets, live)
	}
	if len(b.Columns) != len(fields) {
		t.Fatalf("fragment %d: %d columns, want %d", mf.id, len(b.Columns), len(fields))
	}
	for _, id := range fields {
		col := b.Columns[id]
		if col.Len() != len(live) {
			t.Fatalf("fragment %d field %d: %d values, want %d", mf.id, id, col.Len(), len(live))
		}
		got := fromArray(col)
		for i, o := range live {
			if w := mf.value(id, o); !reflect.DeepEqual(got[i], w) {
				t.Errorf("fragment %d field %d offset %d = %v; want %v", mf.id, id, o, got[i], w)
			}
		}
	}
}

// TestScanModel commits a history that uses every writer (fragments,
// column files, overlays with shared and per-field coverage, two overlays
// at one committed version, null overlay values, deletions over overlaid
// cells, column files superseding overlays) and reads every version back,
// cell by cell, against an in-memory model.
func TestScanModel(t *testing.T) {
	backends(t, func(t *testing.T, s *data.Store) {
		sc := newScenario(t, s)
		sc.run()
		sc.check()
	})
}

// TestConcurrentScans scans every version from several goroutines at once
// through one Store with small caches, so entries are evicted while in use,
// and compares with what TestScanModel checks a sequential scan against.
func TestConcurrentScans(t *testing.T) {
	s := data.NewStore(memblob.OpenBucket(nil), data.Options{CacheBytes: 4 << 10, DeletionCacheBytes: 256})
	defer s.Close()
	sc := newScenario(t, s)
	sc.run()
	sc.check() // sequential, against the model
	all := []int32{fX, fS, fF, fB, fY}
	scan := func(m *table.Manifest) ([][]any, error) {
		var out [][]any
		for b, err := range s.Scan(context.Background(), m, all) {
			if err != nil {
				return nil, err
			}
			out = append(out, []any{b.FragmentID, b.Offsets})
			for _, id := range all {
				out = append(out, fromArray(b.Columns[id]))
			}
		}
		return out, nil
	}
	want := make([][][]any, len(sc.versions))
	for i, m := range sc.versions {
		var err error
		if want[i], err = scan(m); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := range sc.versions {
				vi := (k + g) % len(sc.versions)
				got, err := scan(sc.versions[vi])
				if err != nil || !reflect.DeepEqual(got, want[vi]) {
					t.Errorf("goroutine %d, version %d: scan differs from a sequential one (error %v)", g, sc.versions[vi].Version(), err)
				}
			}
		})
	}
	wg.Wait()
}
