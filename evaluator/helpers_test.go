package evaluator

import (
	"fmt"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// This file builds manifest histories by hand, the way Lance operations
// change them, so that the golden tests state each rule on exact manifest
// states. The oracle (oracle_test.go) drives real transactions through
// table.Apply instead.

// Field ids of the test table.
const (
	fID  int32 = 0 // id int64 not null
	fX   int32 = 1 // x int64
	fY   int32 = 2 // y float64 = f(x)
	fZ   int32 = 3 // z float64 = g(x)
	fS   int32 = 4 // s struct
	fSA  int32 = 5 // s.a int32
	fSB  int32 = 6 // s.b utf8
	rows       = 100
)

func testField(id, parent int32, name, typ string, nullable bool) *lancepb.Field {
	kind := lancepb.Field_LEAF
	if typ == "struct" {
		kind = lancepb.Field_PARENT
	}
	return &lancepb.Field{Type: kind, Id: id, ParentId: parent, Name: name, LogicalType: typ, Nullable: nullable}
}

func testSchema() []*lancepb.Field {
	return []*lancepb.Field{
		testField(fID, -1, "id", "int64", false),
		testField(fX, -1, "x", "int64", true),
		testField(fY, -1, "y", "double", true),
		testField(fZ, -1, "z", "double", true),
		testField(fS, -1, "s", "struct", true),
		testField(fSA, fS, "a", "int32", true),
		testField(fSB, fS, "b", "string", true),
	}
}

func dataFile(path string, fields ...int32) *lancepb.DataFile {
	cols := make([]int32, len(fields))
	for i := range cols {
		cols[i] = int32(i)
	}
	return &lancepb.DataFile{Path: path, Fields: fields, ColumnIndices: cols, FileMajorVersion: 2, FileMinorVersion: 0}
}

// testFragment is fragment id with rows physical rows, its base columns in
// three files: (id, x), y, z, and s in a fourth.
func testFragment(id uint64) *lancepb.DataFragment {
	return &lancepb.DataFragment{
		Id:           id,
		PhysicalRows: rows,
		Files: []*lancepb.DataFile{
			dataFile(fmt.Sprintf("f%d-idx.lance", id), fID, fX),
			dataFile(fmt.Sprintf("f%d-y.lance", id), fY),
			dataFile(fmt.Sprintf("f%d-z.lance", id), fZ),
			dataFile(fmt.Sprintf("f%d-s.lance", id), fS, fSA, fSB),
		},
	}
}

// hist is a history of manifests starting at a read version.
type hist struct {
	t     testing.TB
	read  uint64 // the read version: 41 unless pin moved it
	byVer map[uint64]*table.Manifest
	steps []Step
	head  *table.Manifest
	dv    table.MemDeletions
	next  uint64 // deletion file ids
}

// newHist returns the test table at version 41 with fragments 0 to 3.
func newHist(t testing.TB) *hist {
	t.Helper()
	pb := &lancepb.Manifest{Version: 41, Fields: testSchema()}
	for id := range uint64(4) {
		pb.Fragments = append(pb.Fragments, testFragment(id))
	}
	m, err := table.FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	return &hist{t: t, read: 41, byVer: map[uint64]*table.Manifest{41: m}, head: m, dv: table.MemDeletions{}, next: 1000}
}

func (h *hist) pinned() *table.Manifest { return h.byVer[h.read] }

// pin makes the current head the read version: what was committed so far
// is the state the worker read.
func (h *hist) pin() {
	h.read = h.head.Version()
	h.steps = nil
}

// commit records the next version built by edit.
func (h *hist) commit(edit func(b *table.Builder)) {
	h.t.Helper()
	b := h.head.Edit()
	v := h.head.Version() + 1
	b.Header().Version = v
	edit(b)
	h.head = b.Build()
	h.byVer[v] = h.head
	h.steps = append(h.steps, Step{Version: v, TxnUUID: fmt.Sprintf("txn-%d", v), Manifest: h.head})
}

// frag returns a private copy of a head fragment to modify.
func (h *hist) frag(b *table.Builder, id uint64) *lancepb.DataFragment {
	h.t.Helper()
	f, ok := b.Fragment(id)
	if !ok {
		h.t.Fatalf("no fragment %d", id)
	}
	return proto.CloneOf(f.Proto())
}

func (h *hist) replace(b *table.Builder, pb *lancepb.DataFragment) {
	h.t.Helper()
	if err := b.Replace(table.NewFragment(pb)); err != nil {
		h.t.Fatal(err)
	}
}

// replaceColumns is DataReplacement / REWRITE_COLUMNS: new base files for
// fields in fragment id, tombstoning them in old files and overlays.
func (h *hist) replaceColumns(id uint64, path string, fields ...int32) {
	h.commit(func(b *table.Builder) {
		pb := h.frag(b, id)
		tombstone := func(ids []int32) {
			for i, f := range ids {
				for _, g := range fields {
					if f == g {
						ids[i] = table.Tombstone
					}
				}
			}
		}
		for _, df := range pb.Files {
			tombstone(df.Fields)
		}
		var ovs []*lancepb.DataOverlayFile
		for _, ov := range pb.Overlays {
			tombstone(ov.DataFile.Fields)
			live := false
			for _, f := range ov.DataFile.Fields {
				live = live || f >= 0
			}
			if live {
				ovs = append(ovs, ov)
			}
		}
		pb.Overlays = ovs
		pb.Files = append(pb.Files, dataFile(path, fields...))
		h.replace(b, pb)
	})
}

// editFragment commits an arbitrary edit of fragment id.
func (h *hist) editFragment(id uint64, edit func(pb *lancepb.DataFragment)) {
	h.commit(func(b *table.Builder) {
		pb := h.frag(b, id)
		edit(pb)
		h.replace(b, pb)
	})
}

// delete marks offsets of fragment id deleted: a new deletion file with
// the union of old and new tombstones.
func (h *hist) delete(id uint64, offsets ...uint32) {
	h.commit(func(b *table.Builder) { h.deleteIn(b, id, offsets...) })
}

// rewriteRows is an Update in REWRITE_ROWS mode: the rows are deleted in
// fragment id and rewritten, with new values, into a new fragment newID.
func (h *hist) rewriteRows(id, newID uint64, offsets ...uint32) {
	h.commit(func(b *table.Builder) {
		h.deleteIn(b, id, offsets...)
		nf := testFragment(newID)
		nf.PhysicalRows = uint64(len(offsets))
		if err := b.Append(table.NewFragment(nf)); err != nil {
			h.t.Fatal(err)
		}
	})
}

func (h *hist) deleteIn(b *table.Builder, id uint64, offsets ...uint32) {
	pb := h.frag(b, id)
	dv := roaring.New()
	if old := pb.DeletionFile; old != nil {
		prev, err := h.dv.DeletionVector(h.t.Context(), id, old)
		if err != nil {
			h.t.Fatal(err)
		}
		dv.Or(prev)
	}
	dv.AddMany(offsets)
	h.next++
	pb.DeletionFile = &lancepb.DeletionFile{
		FileType:       lancepb.DeletionFile_ARROW_ARRAY,
		ReadVersion:    b.Header().Version - 1,
		Id:             h.next,
		NumDeletedRows: dv.GetCardinality(),
	}
	h.dv.Put(id, pb.DeletionFile, dv)
	h.replace(b, pb)
}

func bitmapOf(offsets ...uint32) []byte {
	bm := roaring.BitmapOf(offsets...)
	bm.RunOptimize()
	b, err := bm.ToBytes()
	if err != nil {
		panic(err)
	}
	return b
}

func rangeBitmap(start, end uint64) []byte {
	bm := roaring.New()
	bm.AddRange(start, end)
	bm.RunOptimize()
	b, err := bm.ToBytes()
	if err != nil {
		panic(err)
	}
	return b
}

// overlay appends an overlay to fragment id supplying fields at offsets
// (dense coverage), stamped with the new version.
func (h *hist) overlay(id uint64, path string, fields []int32, offsets ...uint32) {
	h.commit(func(b *table.Builder) {
		pb := h.frag(b, id)
		pb.Overlays = append(pb.Overlays, &lancepb.DataOverlayFile{
			DataFile:         dataFile(path, fields...),
			Coverage:         &lancepb.DataOverlayFile_SharedOffsetBitmap{SharedOffsetBitmap: bitmapOf(offsets...)},
			CommittedVersion: b.Header().Version,
		})
		h.replace(b, pb)
	})
}

// schemaEdit replaces the schema with edit applied to a copy of it.
func (h *hist) schemaEdit(edit func(fields []*lancepb.Field) []*lancepb.Field) {
	h.commit(func(b *table.Builder) {
		var fields []*lancepb.Field
		for _, f := range b.Schema().Fields() {
			fields = append(fields, proto.CloneOf(f))
		}
		s, err := table.NewSchema(edit(fields))
		if err != nil {
			h.t.Fatal(err)
		}
		b.SetSchema(s)
	})
}

// drop is Project without the given fields: the schema loses them and data
// files left with no live field are pruned from every fragment.
func (h *hist) drop(ids ...int32) {
	h.commit(func(b *table.Builder) {
		var fields []*lancepb.Field
		for _, f := range b.Schema().Fields() {
			if !containsID(ids, f.GetId()) {
				fields = append(fields, f)
			}
		}
		s, err := table.NewSchema(fields)
		if err != nil {
			h.t.Fatal(err)
		}
		b.SetSchema(s)
		var frags []*table.Fragment
		b.Fragments(func(f *table.Fragment) bool {
			frags = append(frags, f)
			return true
		})
		for _, f := range frags {
			pb := proto.CloneOf(f.Proto())
			var keep []*lancepb.DataFile
			for _, df := range pb.Files {
				live := false
				for _, id := range df.Fields {
					live = live || id >= 0 && !containsID(ids, id)
				}
				if live {
					keep = append(keep, df)
				}
			}
			if len(keep) != len(pb.Files) {
				pb.Files = keep
				h.replace(b, pb)
			}
		}
	})
}

func containsID(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// compact rewrites fragments old into one new fragment newID holding their
// live rows (ReserveFragments + Rewrite).
func (h *hist) compact(newID uint64, old ...uint64) {
	h.commit(func(b *table.Builder) {
		var n uint64
		for _, id := range old {
			f, _ := b.Fragment(id)
			n += f.LiveRows()
		}
		nf := testFragment(newID)
		nf.PhysicalRows = n
		for _, df := range nf.Files {
			df.Path = "compacted-" + df.Path
		}
		if err := b.Splice(old, []*table.Fragment{table.NewFragment(nf)}); err != nil {
			h.t.Fatal(err)
		}
	})
}

// appendFragment adds a new fragment (Append).
func (h *hist) appendFragment(id uint64) {
	h.commit(func(b *table.Builder) {
		if err := b.Append(table.NewFragment(testFragment(id))); err != nil {
			h.t.Fatal(err)
		}
	})
}

// restore commits a copy of version v's content (Restore).
func (h *hist) restore(v uint64) {
	old := h.byVer[v]
	h.commit(func(b *table.Builder) {
		b.SetSchema(old.Schema())
		b.RemoveAll()
		for f := range old.Fragments() {
			if err := b.Append(f); err != nil {
				h.t.Fatal(err)
			}
		}
	})
}

// eval evaluates pre at the read version against head, then blames.
func (h *hist) eval(pre []Precondition, policy DeletionPolicy) (Verdict, error) {
	opts := Options{Policy: policy, Deletions: h.dv}
	v, err := Evaluate(h.t.Context(), h.pinned(), h.head, pre, opts)
	if err != nil {
		return v, err
	}
	return Blame(h.t.Context(), h.pinned(), h.steps, pre, v, opts), nil
}

// render prints a verdict without details, one violation per line.
func render(v Verdict) string {
	var b strings.Builder
	b.WriteString(v.Outcome.String())
	for _, x := range v.Violations {
		x.Detail = ""
		b.WriteString("\n")
		b.WriteString(x.String())
	}
	return b.String()
}
