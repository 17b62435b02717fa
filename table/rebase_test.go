package table_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// cfWorld is a small table history: version 1 is the read version, every
// commit applies a transaction with table.Apply.
type cfWorld struct {
	t         *testing.T
	dv        table.MemDeletions
	versions  []*table.Manifest // versions[i] is version i+1
	committed []table.Committed
}

func cfNewWorld(t *testing.T, fragments ...*lancepb.DataFragment) *cfWorld {
	t.Helper()
	if len(fragments) == 0 {
		fragments = []*lancepb.DataFragment{cfBaseFrag(1), cfBaseFrag(2)}
	}
	maxID := uint32(0)
	for _, f := range fragments {
		maxID = max(maxID, uint32(f.GetId()))
	}
	m, err := table.FromProto(&lancepb.Manifest{
		Version:       1,
		Fields:        cfTestFields(),
		Fragments:     fragments,
		MaxFragmentId: proto.Uint32(maxID),
	})
	if err != nil {
		t.Fatal(err)
	}
	return &cfWorld{t: t, dv: table.MemDeletions{}, versions: []*table.Manifest{m}}
}

func (w *cfWorld) read() *table.Manifest { return w.versions[0] }
func (w *cfWorld) head() *table.Manifest { return w.versions[len(w.versions)-1] }

// df registers a deletion file of fragment frag deleting rows.
func (w *cfWorld) df(frag, readVersion, id uint64, rows ...uint32) *lancepb.DeletionFile {
	d := cfDel(frag, readVersion, id, uint64(len(rows)))
	w.dv.Put(frag, d, roaring.BitmapOf(rows...))
	return d
}

// commit applies theirs at the head, as the committer would after its own
// (trivial) rebase.
func (w *cfWorld) commit(theirs *lancepb.Transaction) {
	w.t.Helper()
	theirs = proto.CloneOf(theirs)
	theirs.ReadVersion = w.head().Version()
	next, err := table.Apply(w.t.Context(), w.head(), theirs, nil)
	if err != nil {
		w.t.Fatalf("Apply(%s): %v", theirs.GetUuid(), err)
	}
	w.versions = append(w.versions, next)
	w.committed = append(w.committed, table.Committed{Version: next.Version(), Txn: theirs})
}

func (w *cfWorld) rebase(ours *lancepb.Transaction) table.RebaseResult {
	w.t.Helper()
	res, err := table.Rebase(w.t.Context(), table.RebaseInput{Txn: ours, Read: w.read(), Head: w.head(), Committed: w.committed, Deletions: w.dv})
	if err != nil {
		w.t.Fatalf("Rebase: %v", err)
	}
	return res
}

// rebaseOK rebases ours, expects no conflict, applies the result at the
// head (writing its new deletion files first) and returns both.
func (w *cfWorld) rebaseOK(ours *lancepb.Transaction) (table.RebaseResult, *table.Manifest) {
	w.t.Helper()
	res := w.rebase(ours)
	if res.Conflict != nil {
		w.t.Fatalf("Rebase conflict: %s (%s)", res.Conflict.Resolution, res.Conflict.Reason)
	}
	if res.Txn.GetReadVersion() != w.head().Version() {
		w.t.Fatalf("rebased read_version = %d; want %d", res.Txn.GetReadVersion(), w.head().Version())
	}
	for _, nf := range res.NewDeletionFiles {
		w.dv.Put(nf.FragmentID, nf.File, nf.Rows)
	}
	next, err := table.Apply(w.t.Context(), w.head(), res.Txn, nil)
	if err != nil {
		w.t.Fatalf("Apply(rebased): %v", err)
	}
	return res, next
}

// conflict rebases ours and expects a conflict of resolution want.
func (w *cfWorld) conflict(ours *lancepb.Transaction, want table.Resolution, reason string) *table.Conflict {
	w.t.Helper()
	res := w.rebase(ours)
	if res.Conflict == nil {
		w.t.Fatalf("Rebase succeeded; want a %s conflict", want)
	}
	if res.Txn != nil {
		w.t.Errorf("Rebase returned both a conflict and a transaction")
	}
	if res.Conflict.Resolution != want {
		w.t.Fatalf("Rebase conflict = %s (%s); want %s", res.Conflict.Resolution, res.Conflict.Reason, want)
	}
	if !strings.Contains(res.Conflict.Reason, reason) {
		w.t.Errorf("conflict reason %q; want it to mention %q", res.Conflict.Reason, reason)
	}
	return res.Conflict
}

func (w *cfWorld) deleted(m *table.Manifest, id uint64) []uint32 {
	w.t.Helper()
	f, ok := m.Fragment(id)
	if !ok {
		w.t.Fatalf("fragment %d missing", id)
	}
	bm, err := table.Deleted(w.t.Context(), w.dv, f)
	if err != nil {
		w.t.Fatal(err)
	}
	return bm.ToArray()
}

func cfNamed(uuid string, t *lancepb.Transaction) *lancepb.Transaction {
	t.Uuid = uuid
	return t
}

func cfPostImage(t *lancepb.Transaction, id uint64) *lancepb.DataFragment {
	var list []*lancepb.DataFragment
	if d := t.GetDelete(); d != nil {
		list = d.GetUpdatedFragments()
	} else {
		list = t.GetUpdate().GetUpdatedFragments()
	}
	for _, f := range list {
		if f.GetId() == id {
			return f
		}
	}
	return nil
}

func TestRebaseDisjointDeletesMerge(t *testing.T) {
	w := cfNewWorld(t)
	w.commit(cfNamed("theirs", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 11, 1, 2))))))
	ours := cfNamed("ours", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 22, 5)))))

	res, next := w.rebaseOK(ours)
	if len(res.NewDeletionFiles) != 1 {
		t.Fatalf("NewDeletionFiles = %v; want one", res.NewDeletionFiles)
	}
	nf := res.NewDeletionFiles[0]
	want := &lancepb.DeletionFile{FileType: lancepb.DeletionFile_BITMAP, ReadVersion: 2, Id: table.DeletionFileID("ours", 1), NumDeletedRows: 3}
	if nf.FragmentID != 1 || !proto.Equal(nf.File, want) || !slices.Equal(nf.Rows.ToArray(), []uint32{1, 2, 5}) {
		t.Errorf("new deletion file = %d %v %v; want 1 %v [1 2 5]", nf.FragmentID, nf.File, nf.Rows.ToArray(), want)
	}
	if got := cfPostImage(res.Txn, 1).GetDeletionFile(); !proto.Equal(got, want) {
		t.Errorf("post-image deletion file = %v; want %v", got, want)
	}
	if got := w.deleted(next, 1); !slices.Equal(got, []uint32{1, 2, 5}) {
		t.Errorf("deleted rows after apply = %v; want [1 2 5]", got)
	}
}

func TestRebaseOverlappingDeletes(t *testing.T) {
	t.Run("partly overlapping", func(t *testing.T) {
		w := cfNewWorld(t)
		w.commit(cfNamed("theirs", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 11, 1, 2))))))
		// Beyond Lance, which retries: deleting row 2 twice changes nothing.
		res, next := w.rebaseOK(cfNamed("ours", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 22, 2, 3))))))
		if len(res.NewDeletionFiles) != 1 {
			t.Fatalf("NewDeletionFiles = %v; want one", res.NewDeletionFiles)
		}
		if got := w.deleted(next, 1); !slices.Equal(got, []uint32{1, 2, 3}) {
			t.Errorf("deleted rows = %v; want [1 2 3]", got)
		}
	})
	t.Run("already deleted", func(t *testing.T) {
		w := cfNewWorld(t)
		theirsDF := w.df(1, 1, 11, 1, 2, 3)
		w.commit(cfNamed("theirs", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), theirsDF)))))
		res, _ := w.rebaseOK(cfNamed("ours", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 22, 2, 3))))))
		if len(res.NewDeletionFiles) != 0 {
			t.Errorf("NewDeletionFiles = %v; want none", res.NewDeletionFiles)
		}
		if got := cfPostImage(res.Txn, 1).GetDeletionFile(); !proto.Equal(got, theirsDF) {
			t.Errorf("post-image deletion file = %v; want the head's %v", got, theirsDF)
		}
	})
	t.Run("row moved by a concurrent update", func(t *testing.T) {
		w := cfNewWorld(t)
		w.commit(cfNamed("theirs", cfUpdateRows(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 11, 2))), true)))
		c := w.conflict(cfNamed("ours", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 22, 2, 3))))), table.Retryable, "rows [2] of fragment 1")
		if c.Theirs != table.OpUpdate || c.TheirsVersion != 2 || c.TheirsUUID != "theirs" || !cfEqualIDs(c.Fragments, []uint64{1}) {
			t.Errorf("conflict = %+v; want theirs Update at version 2, fragment 1", c)
		}
	})
	t.Run("deletes of other rows after an update", func(t *testing.T) {
		w := cfNewWorld(t)
		w.commit(cfNamed("theirs", cfUpdateRows(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 11, 2))), true)))
		_, next := w.rebaseOK(cfNamed("ours", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 22, 4))))))
		if got := w.deleted(next, 1); !slices.Equal(got, []uint32{2, 4}) {
			t.Errorf("deleted rows = %v; want [2 4]", got)
		}
	})
}

func TestRebaseUpdateOverlappingDelete(t *testing.T) {
	w := cfNewWorld(t)
	w.commit(cfNamed("theirs", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 11, 2, 7))))))
	// Ours moved rows 2 and 3 out of fragment 1; theirs deleted row 2.
	ours := cfNamed("ours", cfUpdateRows(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 22, 2, 3))), true))
	c := w.conflict(ours, table.Retryable, "rewrote rows [2] of fragment 1")
	if c.Ours != table.OpUpdate || c.Theirs != table.OpDelete || c.TheirsVersion != 2 || c.TheirsUUID != "theirs" {
		t.Errorf("conflict = %+v", c)
	}

	// Disjoint rows merge.
	ours = cfNamed("ours", cfUpdateRows(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 23, 3, 4))), true))
	_, next := w.rebaseOK(ours)
	if got := w.deleted(next, 1); !slices.Equal(got, []uint32{2, 3, 4, 7}) {
		t.Errorf("deleted rows = %v; want [2 3 4 7]", got)
	}
	// Rows an update lists in its offsets count too, even without deleting them.
	ours = cfWithOffsets(cfNamed("ours", cfUpdateRows(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 24, 4))), true)), 1, cfBitmapBytes(t, 7))
	w.conflict(ours, table.Retryable, "rewrote rows [7]")
}

func TestRebaseMergeDeletesWholeFragment(t *testing.T) {
	for _, kind := range []string{"delete", "update"} {
		t.Run(kind, func(t *testing.T) {
			w := cfNewWorld(t)
			w.commit(cfNamed("theirs", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 11, 0, 1, 2, 3, 4))))))
			post := cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 22, 5, 6, 7, 8, 9))
			var ours *lancepb.Transaction
			if kind == "delete" {
				ours = cfDeleteTxn(cfFrags(post))
			} else {
				ours = cfWithOffsets(cfUpdateRows(cfFrags(post), true), 1, cfBitmapBytes(t, 5))
			}
			res, next := w.rebaseOK(cfNamed("ours", ours))
			if len(res.NewDeletionFiles) != 0 || cfPostImage(res.Txn, 1) != nil {
				t.Errorf("fragment 1 still has a post-image or deletion file: %v", res.Txn)
			}
			removed := res.Txn.GetDelete().GetDeletedFragmentIds()
			if kind == "update" {
				removed = res.Txn.GetUpdate().GetRemovedFragmentIds()
				if len(res.Txn.GetUpdate().GetUpdatedFragmentOffsetBitmaps()) != 0 {
					t.Errorf("offsets of the removed fragment remain: %v", res.Txn.GetUpdate().GetUpdatedFragmentOffsetBitmaps())
				}
			}
			if !slices.Equal(removed, []uint64{1}) {
				t.Errorf("removed fragments = %v; want [1]", removed)
			}
			if _, ok := next.Fragment(1); ok {
				t.Errorf("fragment 1 survives Apply")
			}
		})
	}
}

func TestRebaseDeterministicDeletionFile(t *testing.T) {
	w := cfNewWorld(t)
	w.commit(cfNamed("theirs", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 11, 1))))))
	ours := cfNamed("ours", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 22, 5)))))
	a, b := w.rebase(ours), w.rebase(ours)
	ab, err := proto.MarshalOptions{Deterministic: true}.Marshal(a.Txn)
	if err != nil {
		t.Fatal(err)
	}
	bb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(b.Txn)
	if string(ab) != string(bb) {
		t.Errorf("two rebases of the same input differ")
	}
	fa, fb := a.NewDeletionFiles[0], b.NewDeletionFiles[0]
	if !proto.Equal(fa.File, fb.File) || !fa.Rows.Equals(fb.Rows) {
		t.Errorf("new deletion files differ: %v / %v", fa.File, fb.File)
	}
	if fa.File.GetId() != table.DeletionFileID("ours", 1) {
		t.Errorf("deletion file id = %d; want DeletionFileID(ours, 1) = %d", fa.File.GetId(), table.DeletionFileID("ours", 1))
	}
	ids := map[uint64]string{}
	for _, in := range []struct {
		uuid string
		frag uint64
	}{{"ours", 1}, {"ours", 2}, {"other", 1}, {"ours1", 0}, {"", 0}} {
		id := table.DeletionFileID(in.uuid, in.frag)
		if id == 0 {
			t.Errorf("DeletionFileID(%q, %d) = 0", in.uuid, in.frag)
		}
		if prev, dup := ids[id]; dup {
			t.Errorf("DeletionFileID(%q, %d) collides with %s", in.uuid, in.frag, prev)
		}
		ids[id] = in.uuid
	}
	// The input is left alone.
	if got := cfPostImage(ours, 1).GetDeletionFile().GetId(); got != 22 || ours.GetReadVersion() != 1 {
		t.Errorf("Rebase modified its input")
	}
}

// Lance #9216: a Delete rebased over a concurrent overlay must not drop it.
func TestRebaseKeepsConcurrentOverlay(t *testing.T) {
	w := cfNewWorld(t)
	w.commit(cfNamed("theirs", cfOverlayTxn(t, 1, []int32{cfX}, 0, 1)))
	for _, tc := range []struct {
		name string
		ours *lancepb.Transaction
	}{
		{"delete", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 22, 5))))},
		{"row-moving update of uncovered rows", cfUpdateRows(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 23, 6))), true)},
		{"column rewrite of another field", func() *lancepb.Transaction {
			u := cfUpdateCols(nil, cfY)
			u.GetUpdate().UpdatedFragments = cfFrags(cfFragment(1, 10, cfDataFile("f1.lance", cfID, cfX, table.Tombstone), cfDataFile("y1.lance", cfY)))
			u.GetUpdate().UpdatedFragmentOffsetBitmaps = map[uint64][]byte{1: cfBitmapBytes(t, 0, 1)}
			return u
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, next := w.rebaseOK(cfNamed("ours", tc.ours))
			if got := cfPostImage(res.Txn, 1).GetOverlays(); len(got) != 1 || got[0].GetCommittedVersion() != 2 {
				t.Errorf("rebased post-image overlays = %v; want the head's overlay", got)
			}
			f, _ := next.Fragment(1)
			if got := f.Overlays(); len(got) != 1 || !slices.Equal(got[0].GetDataFile().GetFields(), []int32{cfX}) {
				t.Errorf("overlays after apply = %v; want the concurrent overlay on field x", got)
			}
		})
	}
	// A row-moving update of covered rows loses the overlay's values.
	ours := cfNamed("ours", cfUpdateRows(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 24, 1, 6))), true))
	c := w.conflict(ours, table.Retryable, "rows [1] this Update moved out of fragment 1")
	if c.Theirs != table.OpDataOverlay || c.TheirsVersion != 2 {
		t.Errorf("conflict = %+v", c)
	}
}

// Lance #9217: a Delete rebased over a Project must not bring back the data
// file the Project pruned.
func TestRebaseDoesNotResurrectPrunedFile(t *testing.T) {
	frag := cfFragment(1, 10, cfDataFile("a.lance", cfID, cfX), cfDataFile("b.lance", cfY))
	w := cfNewWorld(t, frag, cfBaseFrag(2))
	w.commit(cfNamed("theirs", cfProject(true, cfID, cfX, cfS, cfSA)))
	res, next := w.rebaseOK(cfNamed("ours", cfDeleteTxn(cfFrags(cfWithDeletion(frag, w.df(1, 1, 22, 5))))))
	paths := func(files []*lancepb.DataFile) []string {
		var out []string
		for _, f := range files {
			out = append(out, f.GetPath())
		}
		return out
	}
	if got := paths(cfPostImage(res.Txn, 1).GetFiles()); !slices.Equal(got, []string{"a.lance"}) {
		t.Errorf("rebased post-image files = %v; want [a.lance]", got)
	}
	f, _ := next.Fragment(1)
	if got := paths(f.Files()); !slices.Equal(got, []string{"a.lance"}) {
		t.Errorf("files after apply = %v; want [a.lance]", got)
	}
}

// Reference F.2 / Lance #9043: field-disjoint column rewrites of one
// fragment rebase instead of retrying.
func TestRebaseFieldDisjointColumnRewrites(t *testing.T) {
	colUpdate := func(uuid string, modified uint32, files ...*lancepb.DataFile) *lancepb.Transaction {
		u := cfUpdateCols(nil, modified)
		u.GetUpdate().UpdatedFragments = cfFrags(cfFragment(1, 10, files...))
		return cfNamed(uuid, u)
	}
	locate := func(m *table.Manifest, field int32) string {
		f, _ := m.Fragment(1)
		loc, ok := f.Locate(field)
		if !ok {
			return "<none>"
		}
		return loc.Path
	}
	check := func(t *testing.T, next *table.Manifest, want map[int32]string) {
		t.Helper()
		for field, path := range want {
			if got := locate(next, field); got != path {
				t.Errorf("field %d lives in %s; want %s", field, got, path)
			}
		}
	}

	t.Run("update×update", func(t *testing.T) {
		w := cfNewWorld(t)
		w.commit(colUpdate("theirs", cfY, cfDataFile("f1.lance", cfID, cfX, table.Tombstone), cfDataFile("y1.lance", cfY)))
		ours := colUpdate("ours", cfX, cfDataFile("f1.lance", cfID, table.Tombstone, cfY), cfDataFile("x1.lance", cfX))
		if c, _ := table.CheckConflict(ours, w.committed[0].Txn); c.Resolution != table.Rebasable {
			t.Fatalf("CheckConflict = %s; want Rebasable", c.Resolution)
		}
		res, next := w.rebaseOK(ours)
		post := cfPostImage(res.Txn, 1)
		want := []*lancepb.DataFile{
			cfDataFile("f1.lance", cfID, table.Tombstone, table.Tombstone), cfDataFile("y1.lance", cfY), cfDataFile("x1.lance", cfX),
		}
		if !slices.EqualFunc(post.GetFiles(), want, func(a, b *lancepb.DataFile) bool { return proto.Equal(a, b) }) {
			t.Errorf("rebased files = %v; want %v", post.GetFiles(), want)
		}
		check(t, next, map[int32]string{cfID: "f1.lance", cfX: "x1.lance", cfY: "y1.lance"})
	})
	t.Run("update×replacement", func(t *testing.T) {
		w := cfNewWorld(t)
		w.commit(cfNamed("theirs", cfReplacement(1, cfY)))
		_, next := w.rebaseOK(colUpdate("ours", cfX, cfDataFile("f1.lance", cfID, table.Tombstone, cfY), cfDataFile("x1.lance", cfX)))
		check(t, next, map[int32]string{cfID: "f1.lance", cfX: "x1.lance", cfY: "repl.lance"})
	})
	t.Run("same field", func(t *testing.T) {
		w := cfNewWorld(t)
		w.commit(colUpdate("theirs", cfY, cfDataFile("f1.lance", cfID, cfX, table.Tombstone), cfDataFile("y1.lance", cfY)))
		w.conflict(colUpdate("ours", cfY, cfDataFile("f1.lance", cfID, cfX, table.Tombstone), cfDataFile("y2.lance", cfY)), table.Retryable, "fields [2]")
	})
	t.Run("undeclared field rewritten on both sides", func(t *testing.T) {
		w := cfNewWorld(t)
		w.commit(colUpdate("theirs", cfY, cfDataFile("f1.lance", cfID, cfX, table.Tombstone), cfDataFile("y1.lance", cfY)))
		// Ours declares x but also moved y.
		w.conflict(colUpdate("ours", cfX, cfDataFile("f1.lance", cfID, table.Tombstone, table.Tombstone), cfDataFile("xy.lance", cfX, cfY)), table.Retryable, "fragment 1")
	})
	t.Run("nested field and its struct", func(t *testing.T) {
		frag := cfFragment(1, 10, cfDataFile("a.lance", cfID, cfX, cfY), cfDataFile("s.lance", cfS, cfSA))
		w := cfNewWorld(t, frag, cfBaseFrag(2))
		theirs := cfUpdateCols(nil, cfS)
		theirs.GetUpdate().UpdatedFragments = cfFrags(cfFragment(1, 10, cfDataFile("a.lance", cfID, cfX, cfY), cfDataFile("s.lance", table.Tombstone, table.Tombstone), cfDataFile("s2.lance", cfS, cfSA)))
		w.commit(cfNamed("theirs", theirs))
		ours := cfUpdateCols(nil, cfSA)
		ours.GetUpdate().UpdatedFragments = cfFrags(cfFragment(1, 10, cfDataFile("a.lance", cfID, cfX, cfY), cfDataFile("s.lance", cfS, table.Tombstone), cfDataFile("sa.lance", cfSA)))
		ours = cfNamed("ours", ours)
		// Exact ids look disjoint; the schema says field 4 is inside 3.
		if c, _ := table.CheckConflict(ours, w.committed[0].Txn); c.Resolution != table.Rebasable {
			t.Fatalf("CheckConflict = %s; want Rebasable", c.Resolution)
		}
		w.conflict(ours, table.Retryable, "overlapping fields [4]")
	})
	t.Run("concurrent delete without offsets", func(t *testing.T) {
		w := cfNewWorld(t)
		w.commit(cfNamed("theirs", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 11, 3))))))
		ours := colUpdate("ours", cfX, cfDataFile("f1.lance", cfID, table.Tombstone, cfY), cfDataFile("x1.lance", cfX))
		w.conflict(ours, table.Retryable, "does not list the rows")
		w.conflict(cfWithOffsets(ours, 1, cfBitmapBytes(t, 3, 4)), table.Retryable, "rewrote rows [3]")
		res, next := w.rebaseOK(cfWithOffsets(ours, 1, cfBitmapBytes(t, 4, 5)))
		if got := cfPostImage(res.Txn, 1).GetDeletionFile().GetId(); got != 11 {
			t.Errorf("post-image deletion file id = %d; want the head's (11)", got)
		}
		if got := w.deleted(next, 1); !slices.Equal(got, []uint32{3}) {
			t.Errorf("deleted rows = %v; want [3]", got)
		}
		check(t, next, map[int32]string{cfX: "x1.lance", cfY: "f1.lance"})
	})
}

func TestRebasePrunesIndexCoverage(t *testing.T) {
	for _, tc := range []struct {
		name     string
		indexed  int32
		modified uint32
	}{
		{"same field", cfY, cfY},
		{"struct index, leaf rewritten", cfS, cfSA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := cfNewWorld(t)
			w.commit(cfNamed("theirs", cfUpdateCols([]uint64{1}, tc.modified)))
			ours := cfNamed("ours", cfCreateIndex([]*lancepb.IndexMetadata{cfIndex("i", 1, []int32{tc.indexed}, cfBitmapBytes(t, 1, 2))}))
			res := w.rebase(ours)
			if res.Conflict != nil {
				t.Fatalf("conflict: %s", res.Conflict.Reason)
			}
			bm, err := table.DecodeBitmap(res.Txn.GetCreateIndex().GetNewIndices()[0].GetFragmentBitmap())
			if err != nil {
				t.Fatal(err)
			}
			if got := bm.ToArray(); !slices.Equal(got, []uint32{2}) {
				t.Errorf("index covers %v; want [2]", got)
			}
			if got := ours.GetCreateIndex().GetNewIndices()[0].GetFragmentBitmap(); string(got) != string(cfBitmapBytes(t, 1, 2)) {
				t.Errorf("Rebase modified its input's index bitmap")
			}
		})
	}
}

func TestRebaseOverlayOverMovedRows(t *testing.T) {
	w := cfNewWorld(t)
	w.commit(cfNamed("theirs", cfUpdateRows(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 11, 3))), true)))
	c := w.conflict(cfNamed("ours", cfOverlayTxn(t, 1, []int32{cfX}, 2, 3)), table.Retryable, "rows [3] of fragment 1")
	if c.Theirs != table.OpUpdate || c.TheirsVersion != 2 {
		t.Errorf("conflict = %+v", c)
	}
	_, next := w.rebaseOK(cfNamed("ours", cfOverlayTxn(t, 1, []int32{cfX}, 4, 5)))
	if f, _ := next.Fragment(1); len(f.Overlays()) != 1 {
		t.Errorf("overlay not applied: %v", f.Overlays())
	}
}

func TestRebaseStopsAtFirstConflict(t *testing.T) {
	w := cfNewWorld(t)
	w.commit(cfNamed("a", cfRepresentative(t, table.OpAppend, 0)))
	w.commit(cfNamed("b", cfRepresentative(t, table.OpReserveFragments, 0)))
	w.commit(cfNamed("c", cfOverwrite(nil)))
	w.commit(cfNamed("d", cfRepresentative(t, table.OpAppend, 0)))
	c := w.conflict(cfNamed("ours", cfRepresentative(t, table.OpAppend, 0)), table.Incompatible, "Overwrite")
	if c.TheirsVersion != 4 || c.TheirsUUID != "c" || c.Theirs != table.OpOverwrite || c.Ours != table.OpAppend {
		t.Errorf("conflict = %+v; want Overwrite c at version 4", c)
	}
}

func TestRebaseKeepsIdentity(t *testing.T) {
	w := cfNewWorld(t)
	w.commit(cfNamed("theirs", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(2), w.df(2, 1, 11, 1))))))
	ours := cfNamed("ours", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 22, 5)))))
	ours.Tag = "t"
	ours.TransactionProperties = map[string]string{"k": "v"}
	ours.Preconditions = []*lancepb.Precondition{{Kind: &lancepb.Precondition_CellsUnchanged{CellsUnchanged: &lancepb.CellsUnchanged{FieldIds: []int32{cfX}}}}}
	before := proto.CloneOf(ours)
	res, _ := w.rebaseOK(ours)
	want := proto.CloneOf(ours)
	want.ReadVersion = 2
	if !proto.Equal(res.Txn, want) {
		t.Errorf("rebased = %v; want %v", res.Txn, want)
	}
	if !proto.Equal(ours, before) {
		t.Errorf("Rebase modified its input")
	}
	if len(res.NewDeletionFiles) != 0 {
		t.Errorf("NewDeletionFiles = %v; want none", res.NewDeletionFiles)
	}
}

func TestRebaseNoConcurrentCommits(t *testing.T) {
	w := cfNewWorld(t)
	ours := cfNamed("ours", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 22, 5)))))
	res, next := w.rebaseOK(ours)
	if !proto.Equal(res.Txn, ours) {
		t.Errorf("rebased = %v; want the input", res.Txn)
	}
	if got := w.deleted(next, 1); !slices.Equal(got, []uint32{5}) {
		t.Errorf("deleted rows = %v; want [5]", got)
	}
}

func TestRebaseRemovedFragment(t *testing.T) {
	w := cfNewWorld(t)
	w.commit(cfNamed("theirs", cfDeleteTxn(nil, 1)))
	c := w.conflict(cfNamed("ours", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 22, 5))))), table.Retryable, "removed")
	if !cfEqualIDs(c.Fragments, []uint64{1}) || c.TheirsVersion != 2 {
		t.Errorf("conflict = %+v", c)
	}
}

func TestRebaseInputErrors(t *testing.T) {
	w := cfNewWorld(t)
	w.commit(cfNamed("theirs", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 11, 1))))))
	ours := cfNamed("ours", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w.df(1, 1, 22, 5)))))
	good := table.RebaseInput{Txn: ours, Read: w.read(), Head: w.head(), Committed: w.committed, Deletions: w.dv}
	unknownDF := cfWithDeletion(cfBaseFrag(1), cfDel(1, 1, 99, 1))
	for _, tc := range []struct {
		name   string
		modify func(in *table.RebaseInput)
		want   error
	}{
		{"nil transaction", func(in *table.RebaseInput) { in.Txn = nil }, table.ErrMalformed},
		{"unsupported transaction", func(in *table.RebaseInput) { in.Txn = cfTx("c", &lancepb.Transaction_Clone{}) }, table.ErrUnsupportedOperation},
		{"no head", func(in *table.RebaseInput) { in.Head = nil }, table.ErrMalformed},
		{"no read manifest", func(in *table.RebaseInput) { in.Read = nil }, table.ErrMalformed},
		{"read manifest of another version", func(in *table.RebaseInput) { in.Read = w.head() }, table.ErrMalformed},
		{"committed list too short", func(in *table.RebaseInput) { in.Committed = nil }, table.ErrVersionNotFound},
		{"committed version wrong", func(in *table.RebaseInput) {
			in.Committed = []table.Committed{{Version: 3, Txn: w.committed[0].Txn}}
		}, table.ErrVersionNotFound},
		{"committed unsupported", func(in *table.RebaseInput) {
			in.Committed = []table.Committed{{Version: 2, Txn: cfTx("m", &lancepb.Transaction_UpdateMemWalState{})}}
		}, table.ErrUnsupportedOperation},
		{"no deletion vectors", func(in *table.RebaseInput) { in.Deletions = nil }, table.ErrMalformed},
		{"unreadable deletion file", func(in *table.RebaseInput) { in.Txn = cfDeleteTxn(cfFrags(unknownDF)) }, table.ErrVersionNotFound},
		{"empty post-image", func(in *table.RebaseInput) { in.Txn = cfDeleteTxn(cfFrags(nil)) }, table.ErrInvalidTransaction},
		{"update without payload", func(in *table.RebaseInput) {
			in.Txn = &lancepb.Transaction{ReadVersion: 1, Operation: &lancepb.Transaction_Update_{}}
		}, nil},
		{"fragment not in read version", func(in *table.RebaseInput) {
			in.Txn = cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(9), w.df(9, 1, 1, 1))))
		}, table.ErrInvalidTransaction},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := good
			tc.modify(&in)
			_, err := table.Rebase(t.Context(), in)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Rebase: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Rebase error = %v; want %v", err, tc.want)
			}
		})
	}
	// Both sides changed the deletion vector and ours un-deletes a row.
	w2 := cfNewWorld(t)
	readDF := w2.df(1, 0, 5, 1)
	w2.versions[0], _ = table.FromProto(&lancepb.Manifest{Version: 1, Fields: cfTestFields(),
		Fragments: cfFrags(cfWithDeletion(cfBaseFrag(1), readDF), cfBaseFrag(2)), MaxFragmentId: proto.Uint32(2)})
	w2.commit(cfNamed("theirs", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w2.df(1, 1, 11, 1, 2))))))
	_, err := table.Rebase(t.Context(), table.RebaseInput{
		Txn:  cfNamed("ours", cfDeleteTxn(cfFrags(cfWithDeletion(cfBaseFrag(1), w2.df(1, 1, 22, 5))))),
		Read: w2.read(), Head: w2.head(), Committed: w2.committed, Deletions: w2.dv,
	})
	if !errors.Is(err, table.ErrInvalidTransaction) {
		t.Errorf("Rebase of a post-image that restores a row: error = %v; want ErrInvalidTransaction", err)
	}
}

// cfGen builds random transactions against a world's read version.
type cfGen struct {
	t   *testing.T
	w   *cfWorld
	rng *rand.Rand
	n   uint64 // for unique file paths and deletion file ids
}

func (g *cfGen) next() uint64 { g.n++; return g.n }

func (g *cfGen) frag() uint64 { return 1 + g.rng.Uint64N(3) }

func (g *cfGen) rows() []uint32 {
	var out []uint32
	for range 1 + g.rng.IntN(3) {
		out = append(out, uint32(g.rng.IntN(10)))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (g *cfGen) field() int32 { return []int32{cfX, cfY}[g.rng.IntN(2)] }

func (g *cfGen) path(what string) string {
	return what + "-" + strconv.FormatUint(g.next(), 10) + ".lance"
}

// deleted returns fragment f at the read version with rows also deleted.
func (g *cfGen) deleted(f uint64, rows []uint32) *lancepb.DataFragment {
	rf, _ := g.w.read().Fragment(f)
	return cfWithDeletion(rf.Proto(), g.w.df(f, 1, 1000+g.next(), rows...))
}

func (g *cfGen) random(uuid string) *lancepb.Transaction {
	var t *lancepb.Transaction
	switch g.rng.IntN(12) {
	case 0:
		if g.rng.IntN(8) == 0 {
			t = cfDeleteTxn(nil, g.frag())
		} else {
			t = cfDeleteTxn(cfFrags(g.deleted(g.frag(), g.rows())))
		}
	case 1:
		f, rows := g.frag(), g.rows()
		t = cfUpdateRows(cfFrags(g.deleted(f, rows)), true)
		t.GetUpdate().NewFragments[0] = cfFragment(0, uint64(len(rows)), cfDataFile(g.path("moved"), cfID, cfX, cfY))
	case 2:
		f, field := g.frag(), g.field()
		files := []*lancepb.DataFile{cfDataFile("f"+strconv.FormatUint(f, 10)+".lance", cfID, cfX, cfY), cfDataFile(g.path("col"), field)}
		files[0].Fields[field] = table.Tombstone
		t = cfUpdateCols(nil, uint32(field))
		t.GetUpdate().UpdatedFragments = cfFrags(cfFragment(f, 10, files...))
		if g.rng.IntN(4) > 0 {
			t = cfWithOffsets(t, f, cfBitmapBytes(g.t, g.rows()...))
		}
	case 3:
		t = cfReplacement(g.frag(), g.field())
		t.GetDataReplacement().GetReplacements()[0].NewFile.Path = g.path("repl")
	case 4:
		t = cfOverlayTxn(g.t, g.frag(), []int32{g.field()}, g.rows()...)
		t.GetDataOverlay().GetGroups()[0].GetOverlays()[0].DataFile.Path = g.path("overlay")
	case 5:
		t = cfRepresentative(g.t, table.OpAppend, 0)
		t.GetAppend().GetFragments()[0].GetFiles()[0].Path = g.path("append")
	case 6:
		t = cfProject(true, cfID, cfX, cfY, cfS, cfSA)
	case 7:
		t = cfConfigKeys([]string{"a", "b"}[g.rng.IntN(2)], "v")
	case 8:
		f := g.frag()
		t = cfCreateIndex([]*lancepb.IndexMetadata{cfIndex([]string{"i1", "i2"}[g.rng.IntN(2)], byte(g.next()), []int32{cfY}, cfBitmapBytes(g.t, uint32(f), 3))})
	case 9:
		t = cfRewrite(g.frag())
		t.GetRewrite().GetGroups()[0].NewFragments = cfFrags(cfFragment(0, 10, cfDataFile(g.path("compact"), cfID, cfX, cfY)))
	case 10:
		// Two fragments at once.
		t = cfDeleteTxn(cfFrags(g.deleted(1, g.rows()), g.deleted(3, g.rows())))
	default:
		t = cfRepresentative(g.t, table.OpReserveFragments, 0)
	}
	t.Uuid = uuid
	t.ReadVersion = 1
	return t
}

// Random histories: transactions built at version 1 are committed one by
// one through Rebase and Apply; then one more is rebased over all of them.
// Rebase must never fail on valid input, and whatever it accepts must
// apply, keep every row deleted at the head deleted, and keep the head's
// overlays.
func TestRebaseRandomHistories(t *testing.T) {
	rng := rand.New(rand.NewPCG(9043, 9216))
	outcomes := map[string]int{}
	for iter := range 400 {
		w := cfNewWorld(t, cfBaseFrag(1), cfBaseFrag(2), cfBaseFrag(3))
		g := &cfGen{t: t, w: w, rng: rng}
		for k := range 1 + rng.IntN(4) {
			theirs := g.random("t" + strconv.Itoa(k))
			res, err := table.Rebase(t.Context(), table.RebaseInput{Txn: theirs, Read: w.read(), Head: w.head(), Committed: w.committed, Deletions: w.dv})
			if err != nil {
				t.Fatalf("iteration %d: Rebase(%v): %v", iter, theirs, err)
			}
			if res.Conflict != nil {
				continue
			}
			for _, nf := range res.NewDeletionFiles {
				w.dv.Put(nf.FragmentID, nf.File, nf.Rows)
			}
			next, err := table.Apply(t.Context(), w.head(), res.Txn, nil)
			if err != nil {
				t.Fatalf("iteration %d: Apply(rebased %v): %v", iter, res.Txn, err)
			}
			w.versions = append(w.versions, next)
			w.committed = append(w.committed, table.Committed{Version: next.Version(), Txn: res.Txn})
		}
		ours := g.random("ours")
		res, err := table.Rebase(t.Context(), table.RebaseInput{Txn: ours, Read: w.read(), Head: w.head(), Committed: w.committed, Deletions: w.dv})
		if err != nil {
			t.Fatalf("iteration %d: Rebase(%v): %v", iter, ours, err)
		}
		op, _ := table.OpOf(ours)
		if res.Conflict != nil {
			outcomes[op.String()+" "+res.Conflict.Resolution.String()]++
			continue
		}
		outcomes[op.String()+" ok"]++
		for _, nf := range res.NewDeletionFiles {
			w.dv.Put(nf.FragmentID, nf.File, nf.Rows)
		}
		next, err := table.Apply(t.Context(), w.head(), res.Txn, nil)
		if err != nil {
			t.Fatalf("iteration %d: Apply(rebased %v): %v", iter, res.Txn, err)
		}
		for hf := range w.head().Fragments() {
			nf, ok := next.Fragment(hf.ID())
			if !ok {
				continue
			}
			before, err := table.Deleted(t.Context(), w.dv, hf)
			if err != nil {
				t.Fatal(err)
			}
			after, err := table.Deleted(t.Context(), w.dv, nf)
			if err != nil {
				t.Fatal(err)
			}
			if !roaring.AndNot(before, after).IsEmpty() {
				t.Fatalf("iteration %d: %s brought back deleted rows %v of fragment %d", iter, op, roaring.AndNot(before, after).ToArray(), hf.ID())
			}
			// No field's base values move unless ours wrote that field.
			for _, fld := range cfTestFields() {
				if cfWrites(ours, hf.ID(), fld.GetId()) {
					continue
				}
				a, aok := hf.Locate(fld.GetId())
				b, bok := nf.Locate(fld.GetId())
				if aok != bok || a != b {
					t.Fatalf("iteration %d: %s moved field %d of fragment %d from %v to %v", iter, op, fld.GetId(), hf.ID(), a, b)
				}
			}
			if len(nf.Overlays()) < len(hf.Overlays()) {
				t.Fatalf("iteration %d: %s dropped overlays of fragment %d", iter, op, hf.ID())
			}
		}
		if d := ours.GetDelete(); d != nil {
			for _, p := range d.GetUpdatedFragments() {
				nf, ok := next.Fragment(p.GetId())
				if !ok {
					continue
				}
				want, _ := w.dv.DeletionVector(t.Context(), p.GetId(), p.GetDeletionFile())
				got, _ := table.Deleted(t.Context(), w.dv, nf)
				if !roaring.AndNot(want, got).IsEmpty() {
					t.Fatalf("iteration %d: rows %v that ours deletes survive in fragment %d", iter, roaring.AndNot(want, got).ToArray(), p.GetId())
				}
			}
		}
	}
	t.Logf("outcomes: %v", outcomes)
}

// cfWrites reports whether txn writes base values of field in fragment frag.
func cfWrites(txn *lancepb.Transaction, frag uint64, field int32) bool {
	if u := txn.GetUpdate(); u != nil && u.GetUpdateMode() == lancepb.Transaction_REWRITE_COLUMNS {
		return slices.Contains(u.GetFieldsModified(), uint32(field)) &&
			slices.ContainsFunc(u.GetUpdatedFragments(), func(f *lancepb.DataFragment) bool { return f.GetId() == frag })
	}
	for _, g := range txn.GetDataReplacement().GetReplacements() {
		if g.GetFragmentId() == frag && slices.Contains(g.GetNewFile().GetFields(), field) {
			return true
		}
	}
	return false
}
