package evaluator

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// The simulator behind the oracle. It keeps, for every committed version,
// the truth about every cell: each physical row has a logical identity (it
// survives compaction, as a stable row id would) and every cell holds the
// id of the write that produced its value (0 is NULL). Each operation is
// built as a real lancepb.Transaction, as a writer would build it from the
// head manifest, and applied with table.Apply; the simulator updates its
// truth from what the operation means (which rows, which fields, which new
// values), never from the resulting manifest. Deletion vectors go to a
// table.MemDeletions.
//
// Transactions are built at head (read version = head): concurrency
// enters through the preconditions, which are read at older versions.

type simField struct {
	id       int32
	name     string
	typ      string
	nullable bool
}

type simFrag struct {
	rowIDs  []uint64
	deleted []bool
	vals    map[int32][]uint64 // physical values by field; a missing field is NULL
}

func (f *simFrag) clone() *simFrag {
	c := &simFrag{rowIDs: slices.Clone(f.rowIDs), deleted: slices.Clone(f.deleted), vals: map[int32][]uint64{}}
	for k, v := range f.vals {
		c.vals[k] = slices.Clone(v)
	}
	return c
}

func (f *simFrag) value(field int32, off int) uint64 {
	if v, ok := f.vals[field]; ok {
		return v[off]
	}
	return 0
}

func (f *simFrag) live() []int {
	var out []int
	for i, d := range f.deleted {
		if !d {
			out = append(out, i)
		}
	}
	return out
}

type simState struct {
	fields []simField
	frags  map[uint64]*simFrag // immutable once committed; clone to change
	loc    map[uint64][2]uint64
}

func (s *simState) field(id int32) (simField, bool) {
	for _, f := range s.fields {
		if f.id == id {
			return f, true
		}
	}
	return simField{}, false
}

// locate returns where row identity rid physically is.
func (s *simState) locate(rid uint64) (uint64, int, bool) {
	if s.loc == nil {
		s.loc = map[uint64][2]uint64{}
		for id, f := range s.frags {
			for off, r := range f.rowIDs {
				s.loc[r] = [2]uint64{id, uint64(off)}
			}
		}
	}
	l, ok := s.loc[rid]
	return l[0], int(l[1]), ok
}

func (s *simState) next() *simState {
	return &simState{fields: slices.Clone(s.fields), frags: maps.Clone(s.frags)}
}

type sim struct {
	t         testing.TB
	rng       *rand.Rand
	states    []*simState       // by version
	mans      []*table.Manifest // by version
	uuids     []string
	dv        table.MemDeletions
	nextWrite uint64
	nextRow   uint64
	nextFile  int
	nextDel   uint64
	maxField  int32 // highest field id ever used: ids are never reused
	log       []string
	counts    map[string]int
}

// Manifest implements table.Versions for Restore.
func (s *sim) Manifest(_ context.Context, v uint64) (*table.Manifest, error) {
	if v == 0 || v >= uint64(len(s.mans)) {
		return nil, &table.Error{Op: "sim", Err: table.ErrVersionNotFound}
	}
	return s.mans[v], nil
}

func (s *sim) head() uint64 { return uint64(len(s.mans) - 1) }

func (s *sim) write() uint64 { s.nextWrite++; return s.nextWrite }

func (s *sim) file(fields []int32) *lancepb.DataFile {
	s.nextFile++
	cols := make([]int32, len(fields))
	for i := range cols {
		cols[i] = int32(i)
	}
	return &lancepb.DataFile{Path: fmt.Sprintf("data/%d.lance", s.nextFile), Fields: slices.Clone(fields),
		ColumnIndices: cols, FileMajorVersion: 2, FileMinorVersion: 1}
}

var simTypes = []string{"int64", "int32", "double", "string"}

// newSim creates the table (version 1) with fields 0..4 and 2-4 fragments.
func newSim(t testing.TB, seed uint64) *sim {
	s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), dv: table.MemDeletions{}, counts: map[string]int{}}
	s.states = []*simState{nil}
	s.mans = []*table.Manifest{nil}
	s.uuids = []string{""}
	st := &simState{frags: map[uint64]*simFrag{}}
	for id := range int32(5) {
		st.fields = append(st.fields, simField{id: id, name: fmt.Sprintf("c%d", id), typ: simTypes[s.rng.IntN(len(simTypes))], nullable: id != 0})
	}
	s.maxField = 4
	txn := &lancepb.Transaction{Uuid: "txn-1", Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{
		Schema: schemaProto(st.fields),
	}}}
	ow := txn.GetOverwrite()
	for i := range 2 + s.rng.IntN(3) {
		pb, f := s.newRows(st, 1+s.rng.IntN(40), nil)
		ow.Fragments = append(ow.Fragments, pb)
		st.frags[uint64(i)] = f
	}
	m, err := table.Create(txn)
	if err != nil {
		t.Fatal(err)
	}
	s.record(m, st, txn, "create")
	return s
}

func schemaProto(fields []simField) []*lancepb.Field {
	out := make([]*lancepb.Field, len(fields))
	for i, f := range fields {
		out[i] = &lancepb.Field{Type: lancepb.Field_LEAF, Id: f.id, ParentId: -1, Name: f.name, LogicalType: f.typ, Nullable: f.nullable}
	}
	return out
}

// newRows builds a fragment of n fresh rows (id 0, assigned at commit)
// holding every field, its fields split over one to three files. Values
// come from src(field, row) when given, else from one new write.
func (s *sim) newRows(st *simState, n int, src func(field int32, row int) uint64) (*lancepb.DataFragment, *simFrag) {
	f := &simFrag{deleted: make([]bool, n), vals: map[int32][]uint64{}}
	w := s.write()
	for range n {
		s.nextRow++
		f.rowIDs = append(f.rowIDs, s.nextRow)
	}
	pb := &lancepb.DataFragment{PhysicalRows: uint64(n)}
	groups := make([][]int32, 1+s.rng.IntN(3))
	for _, fld := range st.fields {
		g := s.rng.IntN(len(groups))
		groups[g] = append(groups[g], fld.id)
		vals := make([]uint64, n)
		for r := range vals {
			vals[r] = w
			if src != nil {
				vals[r] = src(fld.id, r)
			}
		}
		f.vals[fld.id] = vals
	}
	for _, g := range groups {
		if len(g) > 0 {
			pb.Files = append(pb.Files, s.file(g))
		}
	}
	return pb, f
}

// record makes m and st the next version.
func (s *sim) record(m *table.Manifest, st *simState, txn *lancepb.Transaction, what string) {
	s.t.Helper()
	v := uint64(len(s.mans))
	if m.Version() != v {
		s.t.Fatalf("%s: Apply built version %d, want %d", what, m.Version(), v)
	}
	s.mans = append(s.mans, m)
	s.states = append(s.states, st)
	s.uuids = append(s.uuids, txn.GetUuid())
	s.log = append(s.log, fmt.Sprintf("v%d %s", v, what))
	s.counts[what]++
	s.consistent(m, st)
}

// consistent checks that the manifest and the truth agree on the shape of
// the table: the same fragments, rows, deletions and fields.
func (s *sim) consistent(m *table.Manifest, st *simState) {
	s.t.Helper()
	if m.NumFragments() != len(st.frags) {
		s.t.Fatalf("v%d: manifest has %d fragments, simulation %d\n%s", m.Version(), m.NumFragments(), len(st.frags), s.history())
	}
	for id, f := range st.frags {
		mf, ok := m.Fragment(id)
		if !ok || mf.PhysicalRows() != uint64(len(f.rowIDs)) {
			s.t.Fatalf("v%d: fragment %d differs between manifest and simulation\n%s", m.Version(), id, s.history())
		}
		dels := 0
		for _, d := range f.deleted {
			if d {
				dels++
			}
		}
		if got := mf.DeletionFile().GetNumDeletedRows(); got != uint64(dels) {
			s.t.Fatalf("v%d: fragment %d has %d deleted rows, simulation %d", m.Version(), id, got, dels)
		}
	}
	if m.Schema().Len() != len(st.fields) {
		s.t.Fatalf("v%d: schema has %d fields, simulation %d", m.Version(), m.Schema().Len(), len(st.fields))
	}
}

func (s *sim) history() string {
	out := ""
	for _, l := range s.log {
		out += l + "\n"
	}
	return out
}

// commit applies txn at head and records st as its truth.
func (s *sim) commit(txn *lancepb.Transaction, st *simState, what string) {
	s.t.Helper()
	txn.ReadVersion = s.head()
	txn.Uuid = fmt.Sprintf("txn-%d", s.head()+1)
	m, err := table.Apply(s.t.Context(), s.mans[s.head()], txn, s)
	if err != nil {
		s.t.Fatalf("%s at v%d: %v\n%s", what, s.head(), err, s.history())
	}
	s.record(m, st, txn, what)
}

// pickFrag returns a random fragment of head with at least one live row.
func (s *sim) pickFrag() (uint64, *simFrag, bool) {
	st := s.states[s.head()]
	ids := slices.Sorted(maps.Keys(st.frags))
	s.rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids {
		if f := st.frags[id]; len(f.live()) > 0 {
			return id, f, true
		}
	}
	return 0, nil, false
}

func (s *sim) headFrag(id uint64) *lancepb.DataFragment {
	f, _ := s.mans[s.head()].Fragment(id)
	return proto.CloneOf(f.Proto())
}

// pickOffsets returns k distinct random elements of from, sorted.
func (s *sim) pick(from []int, k int) []int {
	from = slices.Clone(from)
	s.rng.Shuffle(len(from), func(i, j int) { from[i], from[j] = from[j], from[i] })
	if k > len(from) {
		k = len(from)
	}
	out := from[:k]
	slices.Sort(out)
	return out
}

func (s *sim) pickFields(st *simState, max int) []int32 {
	idx := s.pick(seq(len(st.fields)), 1+s.rng.IntN(max))
	out := make([]int32, len(idx))
	for i, j := range idx {
		out[i] = st.fields[j].id
	}
	return out
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func toU32(offs []int) []uint32 {
	out := make([]uint32, len(offs))
	for i, o := range offs {
		out[i] = uint32(o)
	}
	return out
}

// deletionFile writes a deletion file holding dv for fragment id.
func (s *sim) deletionFile(id uint64, dv *roaring.Bitmap) *lancepb.DeletionFile {
	s.nextDel++
	df := &lancepb.DeletionFile{ReadVersion: s.head(), Id: s.nextDel, NumDeletedRows: dv.GetCardinality()}
	if s.rng.IntN(2) == 0 {
		df.FileType = lancepb.DeletionFile_BITMAP
	}
	s.dv.Put(id, df, dv)
	return df
}

func deletedBitmap(f *simFrag) *roaring.Bitmap {
	bm := roaring.New()
	for i, d := range f.deleted {
		if d {
			bm.Add(uint32(i))
		}
	}
	return bm
}

// ── Operations ──────────────────────────────────────────────────────────

func (s *sim) opAppend() {
	st := s.states[s.head()].next()
	txn := &lancepb.Transaction{Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{}}}
	n := 1 + s.rng.IntN(2)
	maxID, _ := s.mans[s.head()].MaxFragmentID()
	for i := range n {
		pb, f := s.newRows(st, 1+s.rng.IntN(40), nil)
		txn.GetAppend().Fragments = append(txn.GetAppend().Fragments, pb)
		st.frags[uint64(maxID)+1+uint64(i)] = f
	}
	s.commit(txn, st, "Append")
}

func (s *sim) opDelete() {
	id, f, ok := s.pickFrag()
	if !ok {
		return
	}
	st := s.states[s.head()].next()
	live := f.live()
	offs := s.pick(live, 1+s.rng.IntN(min(5, len(live))))
	if s.rng.IntN(8) == 0 {
		offs = live
	}
	del := &lancepb.Transaction_Delete{Predicate: "sim"}
	if len(offs) == len(live) {
		del.DeletedFragmentIds = []uint64{id}
		delete(st.frags, id)
	} else {
		nf := f.clone()
		for _, o := range offs {
			nf.deleted[o] = true
		}
		st.frags[id] = nf
		pb := s.headFrag(id)
		pb.DeletionFile = s.deletionFile(id, deletedBitmap(nf))
		del.UpdatedFragments = []*lancepb.DataFragment{pb}
	}
	s.commit(&lancepb.Transaction{Operation: &lancepb.Transaction_Delete_{Delete: del}}, st, "Delete")
}

// opUpdateRows is an Update in REWRITE_ROWS mode: matched rows are deleted
// in place and rewritten, with new values for the updated fields, into a
// new fragment (new row identities).
func (s *sim) opUpdateRows() {
	id, f, ok := s.pickFrag()
	if !ok {
		return
	}
	st := s.states[s.head()].next()
	live := f.live()
	offs := s.pick(live, 1+s.rng.IntN(min(4, len(live))))
	fields := s.pickFields(st, 2)
	w := s.write()
	pb, nf := s.newRows(st, len(offs), func(field int32, r int) uint64 {
		if slices.Contains(fields, field) {
			return w
		}
		return f.value(field, offs[r])
	})
	maxID, _ := s.mans[s.head()].MaxFragmentID()
	st.frags[uint64(maxID)+1] = nf
	up := &lancepb.Transaction_Update{NewFragments: []*lancepb.DataFragment{pb}, UpdateMode: lancepb.Transaction_REWRITE_ROWS}
	for _, fl := range fields {
		up.FieldsModified = append(up.FieldsModified, uint32(fl))
	}
	if len(offs) == len(live) {
		up.RemovedFragmentIds = []uint64{id}
		delete(st.frags, id)
	} else {
		old := f.clone()
		for _, o := range offs {
			old.deleted[o] = true
		}
		st.frags[id] = old
		post := s.headFrag(id)
		post.DeletionFile = s.deletionFile(id, deletedBitmap(old))
		up.UpdatedFragments = []*lancepb.DataFragment{post}
	}
	s.commit(&lancepb.Transaction{Operation: &lancepb.Transaction_Update_{Update: up}}, st, "Update/REWRITE_ROWS")
}

// opUpdateColumns is an Update in REWRITE_COLUMNS mode: a new file for the
// updated fields of one fragment, new values at matched rows and the old
// values copied elsewhere.
func (s *sim) opUpdateColumns() {
	id, f, ok := s.pickFrag()
	if !ok {
		return
	}
	st := s.states[s.head()].next()
	fields := s.pickFields(st, 2)
	matched := s.pick(f.live(), 1+s.rng.IntN(5))
	nf := f.clone()
	w := s.write()
	for _, fl := range fields {
		vals := make([]uint64, len(f.rowIDs))
		for r := range vals {
			vals[r] = f.value(fl, r)
		}
		for _, r := range matched {
			vals[r] = w
		}
		nf.vals[fl] = vals
	}
	st.frags[id] = nf
	post := s.headFrag(id)
	post.Files = append(post.Files, s.file(fields))
	up := &lancepb.Transaction_Update{
		UpdatedFragments:             []*lancepb.DataFragment{post},
		UpdateMode:                   lancepb.Transaction_REWRITE_COLUMNS,
		UpdatedFragmentOffsetBitmaps: map[uint64][]byte{id: bitmapOf(toU32(matched)...)},
	}
	for _, fl := range fields {
		up.FieldsModified = append(up.FieldsModified, uint32(fl))
	}
	s.commit(&lancepb.Transaction{Operation: &lancepb.Transaction_Update_{Update: up}}, st, "Update/REWRITE_COLUMNS")
}

// opReplace is a DataReplacement of some fields of one fragment: the fields
// of one data file (replaced in place), a set of held fields (tombstoned
// and added), or fields no file holds (added). One time in four the new
// file holds the very same values (a rewrite that changes nothing).
func (s *sim) opReplace() {
	id, f, ok := s.pickFrag()
	if !ok {
		return
	}
	st := s.states[s.head()].next()
	pb := s.headFrag(id)
	held := map[int32]bool{}
	var fileFields [][]int32
	for _, df := range pb.Files {
		var live []int32
		clean := true
		for _, fl := range df.Fields {
			if _, ok := st.field(fl); ok {
				held[fl] = true
				live = append(live, fl)
			} else {
				clean = false
			}
		}
		if clean && len(live) > 0 {
			fileFields = append(fileFields, live)
		}
	}
	var unheld, heldList []int32
	for _, fl := range st.fields {
		if held[fl.id] {
			heldList = append(heldList, fl.id)
		} else {
			unheld = append(unheld, fl.id)
		}
	}
	var fields []int32
	switch r := s.rng.IntN(3); {
	case r == 0 && len(unheld) > 0:
		fields = unheld[:1+s.rng.IntN(len(unheld))]
	case r == 1 && len(fileFields) > 0:
		fields = fileFields[s.rng.IntN(len(fileFields))]
	case len(heldList) > 0:
		idx := s.pick(seq(len(heldList)), 1+s.rng.IntN(min(2, len(heldList))))
		for _, i := range idx {
			fields = append(fields, heldList[i])
		}
	default:
		return
	}
	same := s.rng.IntN(4) == 0
	nf := f.clone()
	w := s.write()
	for _, fl := range fields {
		vals := make([]uint64, len(f.rowIDs))
		for r := range vals {
			vals[r] = w
			if same {
				vals[r] = f.value(fl, r)
			}
		}
		nf.vals[fl] = vals
	}
	st.frags[id] = nf
	what := "DataReplacement"
	if same {
		what += " (same values)"
	}
	s.commit(&lancepb.Transaction{Operation: &lancepb.Transaction_DataReplacement_{DataReplacement: &lancepb.Transaction_DataReplacement{
		Replacements: []*lancepb.Transaction_DataReplacementGroup{{FragmentId: id, NewFile: s.file(fields)}},
	}}}, st, what)
}

// opOverlay attaches an overlay to one fragment: new values for some
// fields at some offsets (deleted rows included), dense or sparse.
func (s *sim) opOverlay() {
	id, f, ok := s.pickFrag()
	if !ok {
		return
	}
	st := s.states[s.head()].next()
	fields := s.pickFields(st, 3)
	n := len(f.rowIDs)
	nf := f.clone()
	w := s.write()
	ov := &lancepb.DataOverlayFile{DataFile: s.file(fields)}
	cover := func() []int { return s.pick(seq(n), s.rng.IntN(min(6, n)+1)) }
	if s.rng.IntN(2) == 0 {
		rows := cover()
		if len(rows) == 0 {
			rows = []int{s.rng.IntN(n)}
		}
		ov.Coverage = &lancepb.DataOverlayFile_SharedOffsetBitmap{SharedOffsetBitmap: bitmapOf(toU32(rows)...)}
		for _, fl := range fields {
			for _, r := range rows {
				nf.vals[fl] = setVal(nf.vals[fl], n, r, w)
			}
		}
	} else {
		fc := &lancepb.FieldCoverage{}
		for _, fl := range fields {
			rows := cover()
			fc.OffsetBitmaps = append(fc.OffsetBitmaps, bitmapOf(toU32(rows)...))
			for _, r := range rows {
				nf.vals[fl] = setVal(nf.vals[fl], n, r, w)
			}
		}
		ov.Coverage = &lancepb.DataOverlayFile_FieldCoverage{FieldCoverage: fc}
	}
	st.frags[id] = nf
	s.commit(&lancepb.Transaction{Operation: &lancepb.Transaction_DataOverlay_{DataOverlay: &lancepb.Transaction_DataOverlay{
		Groups: []*lancepb.Transaction_DataOverlayGroup{{FragmentId: id, Overlays: []*lancepb.DataOverlayFile{ov}}},
	}}}, st, "DataOverlay")
}

func setVal(vals []uint64, n, r int, v uint64) []uint64 {
	if vals == nil {
		vals = make([]uint64, n) // the field read as NULL so far
	}
	vals[r] = v
	return vals
}

// opProject drops, renames or re-types a field (Project).
func (s *sim) opProject() {
	st := s.states[s.head()].next()
	i := s.rng.IntN(len(st.fields))
	what := "Project/"
	switch r := s.rng.IntN(4); {
	case r == 0 && len(st.fields) > 2:
		dropped := st.fields[i].id
		st.fields = slices.Delete(st.fields, i, i+1)
		for id, f := range st.frags {
			nf := f.clone()
			delete(nf.vals, dropped)
			st.frags[id] = nf
		}
		what += "drop"
	case r == 1:
		st.fields[i].name += "'"
		what += "rename"
	case r == 2:
		st.fields[i].nullable = !st.fields[i].nullable
		what += "nullability"
	default:
		st.fields[i].typ = simTypes[(slices.Index(simTypes, st.fields[i].typ)+1)%len(simTypes)]
		what += "retype"
	}
	s.commit(&lancepb.Transaction{Operation: &lancepb.Transaction_Project_{Project: &lancepb.Transaction_Project{
		Schema: schemaProto(st.fields),
	}}}, st, what)
}

// opMerge adds a column (Merge): a new field with a data file in some
// fragments; the others read it as NULL.
func (s *sim) opMerge() {
	st := s.states[s.head()].next()
	s.maxField++
	nf := simField{id: s.maxField, name: fmt.Sprintf("c%d", s.maxField), typ: simTypes[s.rng.IntN(len(simTypes))], nullable: true}
	st.fields = append(st.fields, nf)
	merge := &lancepb.Transaction_Merge{Schema: schemaProto(st.fields)}
	w := s.write()
	for f := range s.mans[s.head()].Fragments() {
		pb := proto.CloneOf(f.Proto())
		if s.rng.IntN(4) != 0 {
			pb.Files = append(pb.Files, s.file([]int32{nf.id}))
			sf := st.frags[f.ID()].clone()
			vals := make([]uint64, len(sf.rowIDs))
			for r := range vals {
				vals[r] = w
			}
			sf.vals[nf.id] = vals
			st.frags[f.ID()] = sf
		}
		merge.Fragments = append(merge.Fragments, pb)
	}
	s.commit(&lancepb.Transaction{Operation: &lancepb.Transaction_Merge_{Merge: merge}}, st, "Merge/add column")
}

// opCompact compacts one or two fragments into one (ReserveFragments, then
// Rewrite): live rows move with their values and identities; deleted rows
// are purged; overlays are folded into the new base files.
func (s *sim) opCompact() {
	st0 := s.states[s.head()]
	ids := slices.Sorted(maps.Keys(st0.frags))
	if len(ids) == 0 {
		return
	}
	old := s.pick(seq(len(ids)), 1+s.rng.IntN(min(2, len(ids))))
	st := st0.next()
	s.commit(&lancepb.Transaction{Operation: &lancepb.Transaction_ReserveFragments_{ReserveFragments: &lancepb.Transaction_ReserveFragments{NumFragments: 1}}},
		st, "ReserveFragments")
	reserved, _ := s.mans[s.head()].MaxFragmentID()
	st = st.next()
	var rowIDs []uint64
	type src struct {
		f   *simFrag
		off int
	}
	var srcs []src
	group := &lancepb.Transaction_Rewrite_RewriteGroup{}
	for _, i := range old {
		id := ids[i]
		f := st.frags[id]
		for _, o := range f.live() {
			rowIDs = append(rowIDs, f.rowIDs[o])
			srcs = append(srcs, src{f, o})
		}
		group.OldFragments = append(group.OldFragments, s.headFrag(id))
		delete(st.frags, id)
	}
	if len(srcs) > 0 {
		pb, nf := s.newRows(st, len(srcs), func(field int32, r int) uint64 { return srcs[r].f.value(field, srcs[r].off) })
		nf.rowIDs = rowIDs
		s.nextRow -= uint64(len(srcs)) // newRows drew identities the compaction does not use
		pb.Id = uint64(reserved)
		st.frags[uint64(reserved)] = nf
		group.NewFragments = []*lancepb.DataFragment{pb}
	}
	s.commit(&lancepb.Transaction{Operation: &lancepb.Transaction_Rewrite_{Rewrite: &lancepb.Transaction_Rewrite{
		Groups: []*lancepb.Transaction_Rewrite_RewriteGroup{group},
	}}}, st, "Rewrite (compaction)")
}

// opRestore restores an older version.
func (s *sim) opRestore() {
	if s.head() < 2 {
		return
	}
	v := 1 + s.rng.Uint64N(s.head()-1)
	old := s.states[v]
	st := &simState{fields: old.fields, frags: old.frags}
	s.commit(&lancepb.Transaction{Operation: &lancepb.Transaction_Restore_{Restore: &lancepb.Transaction_Restore{Version: v}}},
		st, "Restore")
}

// opOverwrite replaces the table with new rows under the same schema;
// fragment ids restart at 0, so old ids now name different fragments.
func (s *sim) opOverwrite() {
	st := &simState{fields: slices.Clone(s.states[s.head()].fields), frags: map[uint64]*simFrag{}}
	ow := &lancepb.Transaction_Overwrite{Schema: schemaProto(st.fields)}
	for i := range 1 + s.rng.IntN(3) {
		pb, f := s.newRows(st, 1+s.rng.IntN(40), nil)
		ow.Fragments = append(ow.Fragments, pb)
		st.frags[uint64(i)] = f
	}
	s.commit(&lancepb.Transaction{Operation: &lancepb.Transaction_Overwrite_{Overwrite: ow}}, st, "Overwrite")
}

// opConfig changes metadata only: schema metadata or a field's metadata.
func (s *sim) opConfig() {
	st := s.states[s.head()].next()
	uc := &lancepb.Transaction_UpdateConfig{}
	if s.rng.IntN(2) == 0 {
		val := "v"
		uc.FieldMetadataUpdates = map[int32]*lancepb.Transaction_UpdateMap{
			st.fields[s.rng.IntN(len(st.fields))].id: {UpdateEntries: []*lancepb.Transaction_UpdateMapEntry{{Key: "k", Value: &val}}},
		}
	} else {
		val := fmt.Sprint(s.head())
		uc.SchemaMetadataUpdates = &lancepb.Transaction_UpdateMap{UpdateEntries: []*lancepb.Transaction_UpdateMapEntry{{Key: "k", Value: &val}}}
	}
	s.commit(&lancepb.Transaction{Operation: &lancepb.Transaction_UpdateConfig_{UpdateConfig: uc}}, st, "UpdateConfig")
}

// step commits one random operation.
func (s *sim) step() {
	ops := []struct {
		weight int
		op     func()
	}{
		{6, s.opAppend},
		{8, s.opDelete},
		{5, s.opUpdateRows},
		{6, s.opUpdateColumns},
		{6, s.opReplace},
		{9, s.opOverlay},
		{2, s.opProject},
		{1, s.opMerge},
		{3, s.opCompact},
		{2, s.opRestore},
		{1, s.opOverwrite},
		{1, s.opConfig},
	}
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	r := s.rng.IntN(total)
	for _, o := range ops {
		if r < o.weight {
			o.op()
			return
		}
		r -= o.weight
	}
}
