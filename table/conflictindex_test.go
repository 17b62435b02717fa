package table_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// ciSupported are the operation kinds the random generator builds.
var ciSupported = []table.Op{
	table.OpAppend, table.OpDelete, table.OpOverwrite, table.OpCreateIndex, table.OpRewrite, table.OpMerge,
	table.OpRestore, table.OpReserveFragments, table.OpUpdate, table.OpProject, table.OpUpdateConfig,
	table.OpDataReplacement, table.OpUpdateBases, table.OpDataOverlay,
}

// ciGen builds random transactions of every supported kind over a few
// fragments, fields, config keys, index names and base paths, so that
// random pairs meet every rule of the matrix with both overlapping and
// disjoint contents.
type ciGen struct {
	t   testing.TB
	rng *rand.Rand
	n   int // fragments 1..n
	dv  table.MemDeletions
	ids uint64
}

func (g *ciGen) frags() []uint64 {
	var out []uint64
	for id := uint64(1); id <= uint64(g.n); id++ {
		if g.rng.IntN(3) == 0 {
			out = append(out, id)
		}
	}
	return out
}

func (g *ciGen) fields() []int32 {
	var out []int32
	for _, f := range []int32{cfX, cfY, cfS, cfSA} {
		if g.rng.IntN(3) == 0 {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		out = []int32{[]int32{cfX, cfY, cfSA}[g.rng.IntN(3)]}
	}
	return out
}

func (g *ciGen) key() string { return []string{"k", "j"}[g.rng.IntN(2)] }

// deleted returns a post-image of fragment id deleting a random row, with
// its deletion vector registered.
func (g *ciGen) deleted(id uint64) *lancepb.DataFragment {
	g.ids++
	row := uint32(g.rng.IntN(10))
	df := cfDel(id, 1, 1000+g.ids, 1)
	g.dv.Put(id, df, roaring.BitmapOf(row))
	return cfWithDeletion(cfBaseFrag(id), df)
}

func (g *ciGen) txn(op table.Op) *lancepb.Transaction {
	t, r := g.t, g.rng
	var x *lancepb.Transaction
	switch op {
	case table.OpDelete:
		var posts []*lancepb.DataFragment
		for _, id := range g.frags() {
			posts = append(posts, g.deleted(id))
		}
		x = cfDeleteTxn(posts, g.frags()...)
	case table.OpUpdate:
		u := &lancepb.Transaction_Update{UpdateMode: lancepb.Transaction_UpdateMode(r.IntN(2)), RemovedFragmentIds: g.frags()}
		for _, id := range g.frags() {
			if u.UpdateMode == lancepb.Transaction_REWRITE_COLUMNS {
				u.UpdatedFragments = append(u.UpdatedFragments, cfBaseFrag(id))
			} else {
				u.UpdatedFragments = append(u.UpdatedFragments, g.deleted(id))
			}
		}
		for _, f := range g.fields() {
			u.FieldsModified = append(u.FieldsModified, uint32(f))
		}
		if r.IntN(2) == 0 {
			u.NewFragments = []*lancepb.DataFragment{cfFragment(0, 1, cfDataFile("moved.lance", cfID, cfX, cfY))}
		}
		if r.IntN(4) == 0 {
			u.InsertedRows = []byte{1}
		}
		x = cfTx("update", u)
	case table.OpOverwrite:
		var cfg map[string]string
		if r.IntN(2) == 0 {
			cfg = map[string]string{g.key(): "v"}
		}
		x = cfOverwrite(cfg)
	case table.OpCreateIndex:
		var bm []byte
		if r.IntN(4) != 0 {
			var ids []uint32
			for _, id := range g.frags() {
				ids = append(ids, uint32(id))
			}
			bm = cfBitmapBytes(t, ids...)
		}
		name := []string{"idx_a", "idx_b", "__lance_frag_reuse"}[r.IntN(3)]
		idx := cfIndex(name, byte(r.IntN(3)), g.fields(), bm)
		var removed []*lancepb.IndexMetadata
		if r.IntN(3) == 0 {
			removed = append(removed, cfIndex([]string{"idx_a", "idx_b"}[r.IntN(2)], byte(r.IntN(3)), g.fields(), nil))
		}
		x = cfCreateIndex([]*lancepb.IndexMetadata{idx}, removed...)
	case table.OpRewrite:
		x = cfRewrite(g.frags()...)
	case table.OpMerge:
		x = cfMerge(r.IntN(2) == 0)
	case table.OpProject:
		x = cfProject(r.IntN(2) == 0, append([]int32{cfID}, g.fields()...)...)
	case table.OpUpdateConfig:
		uc := &lancepb.Transaction_UpdateConfig{}
		switch r.IntN(4) {
		case 0:
			uc.ConfigUpdates = &lancepb.Transaction_UpdateMap{UpdateEntries: cfEntries(g.key(), "v")}
		case 1:
			uc.ConfigUpdates = &lancepb.Transaction_UpdateMap{UpdateEntries: cfEntries(g.key(), "<delete>")}
		case 2:
			uc.SchemaMetadataUpdates = &lancepb.Transaction_UpdateMap{UpdateEntries: cfEntries("m", "v")}
		case 3:
			uc.FieldMetadataUpdates = map[int32]*lancepb.Transaction_UpdateMap{cfX: {UpdateEntries: cfEntries("m", "v")}}
		}
		x = cfConfig(uc)
	case table.OpDataReplacement:
		dr := &lancepb.Transaction_DataReplacement{}
		for _, id := range g.frags() {
			dr.Replacements = append(dr.Replacements, &lancepb.Transaction_DataReplacementGroup{FragmentId: id, NewFile: cfDataFile("repl.lance", g.fields()...)})
		}
		x = cfTx("replace", dr)
	case table.OpUpdateBases:
		id := uint32(1 + r.IntN(2))
		x = cfBases(&lancepb.BasePath{Id: id, Path: fmt.Sprintf("s3://b%d", id)})
	case table.OpDataOverlay:
		do := &lancepb.Transaction_DataOverlay{}
		for _, id := range g.frags() {
			do.Groups = append(do.Groups, &lancepb.Transaction_DataOverlayGroup{FragmentId: id, Overlays: []*lancepb.DataOverlayFile{cfOverlay(t, g.fields(), uint32(r.IntN(10)))}})
		}
		x = cfTx("overlay", do)
	default:
		x = cfRepresentative(t, op, uint64(1+r.IntN(g.n)))
	}
	g.ids++
	x.Uuid = fmt.Sprintf("%s-%d", op, g.ids)
	return x
}

func (g *ciGen) any() *lancepb.Transaction {
	return g.txn(ciSupported[g.rng.IntN(len(ciSupported))])
}

// TestConflictIndexScope checks the claim the index rests on, pair by
// pair: a committed transaction the index does not name for ours is
// Compatible with it (CheckConflict, without error).
func TestConflictIndexScope(t *testing.T) {
	g := &ciGen{t: t, rng: rand.New(rand.NewPCG(1, 2)), n: 4, dv: table.MemDeletions{}}
	skipped := map[[2]table.Op]int{}
	for range 40000 {
		ours, theirs := g.any(), g.any()
		x := table.NewConflictIndex()
		x.Add(2, theirs)
		got, ok := x.Candidates(ours, 1, 2, nil)
		if !ok {
			t.Fatalf("Candidates(%v) does not cover version 2", ours)
		}
		if len(got) > 0 {
			continue
		}
		oursOp, _ := table.OpOf(ours)
		theirsOp, _ := table.OpOf(theirs)
		skipped[[2]table.Op{oursOp, theirsOp}]++
		c, err := table.CheckConflict(ours, theirs)
		if err != nil || c.Resolution != table.Compatible {
			t.Fatalf("index skips theirs, but CheckConflict = %s (%s), %v\nours:   %v\ntheirs: %v", c.Resolution, c.Reason, err, ours, theirs)
		}
	}
	// The index must skip something for every kind of ours but Merge and
	// Project, or it is no index.
	for _, op := range ciSupported {
		n := 0
		for k, c := range skipped {
			if k[0] == op {
				n += c
			}
		}
		if n == 0 && op != table.OpMerge && op != table.OpProject {
			t.Errorf("the index never skips a committed transaction for ours = %s", op)
		}
	}
}

// TestConflictIndexRebase checks Rebase with the index's candidates
// against Rebase over every committed transaction, on random histories:
// the same transaction, conflict, deletion files or error.
func TestConflictIndexRebase(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var decided, conflicts, skippedVersions int
	for round := range 600 {
		w := cfNewWorld(t, cfBaseFrag(1), cfBaseFrag(2), cfBaseFrag(3), cfBaseFrag(4), cfBaseFrag(5), cfBaseFrag(6))
		g := &ciGen{t: t, rng: rng, n: 6, dv: w.dv, ids: uint64(round) << 20}
		x := table.NewConflictIndex()
		for range 1 + rng.IntN(12) {
			theirs := g.any()
			if rng.IntN(2) == 0 { // mostly harmless traffic, as in real tables
				theirs = g.txn([]table.Op{table.OpAppend, table.OpDelete, table.OpDataOverlay}[rng.IntN(3)])
			}
			theirs.ReadVersion = w.head().Version()
			next, err := table.Apply(t.Context(), w.head(), theirs, ciVersions(w.versions))
			if err != nil {
				continue // not applicable here; try another
			}
			w.versions = append(w.versions, next)
			w.committed = append(w.committed, table.Committed{Version: next.Version(), Txn: theirs})
			x.Add(next.Version(), theirs)
		}
		ours := g.any()
		full, fullErr := table.Rebase(t.Context(), table.RebaseInput{Txn: ours, Read: w.read(), Head: w.head(), Committed: w.committed, Deletions: w.dv})

		cands, ok := x.Candidates(ours, 1, w.head().Version(), nil)
		if !ok && len(w.committed) > 0 {
			t.Fatalf("index does not cover versions 2..%d", w.head().Version())
		}
		var sparse []table.Committed
		for _, c := range w.committed {
			if slices.Contains(cands, c.Version) {
				sparse = append(sparse, c)
			}
		}
		skippedVersions += len(w.committed) - len(sparse)
		in := table.RebaseInput{Txn: proto.CloneOf(ours), Read: w.read(), Head: w.head(), Committed: sparse, Deletions: w.dv, Indexed: true, InPlace: true}
		got, gotErr := table.Rebase(t.Context(), in)

		if fmt.Sprint(fullErr) != fmt.Sprint(gotErr) {
			t.Fatalf("round %d: errors differ: full %v, indexed %v\nours: %v", round, fullErr, gotErr, ours)
		}
		if !proto.Equal(full.Txn, got.Txn) || !reflect.DeepEqual(full.Conflict, got.Conflict) || !sameNewFiles(full.NewDeletionFiles, got.NewDeletionFiles) {
			t.Fatalf("round %d: results differ:\nfull    %v %+v %v\nindexed %v %+v %v\nours: %v", round, full.Txn, full.Conflict, full.NewDeletionFiles, got.Txn, got.Conflict, got.NewDeletionFiles, ours)
		}
		switch {
		case fullErr == nil && full.Conflict == nil:
			decided++
		case full.Conflict != nil:
			conflicts++
		}
	}
	t.Logf("rebased %d, conflicts %d, committed versions skipped by the index %d", decided, conflicts, skippedVersions)
	if decided < 50 || conflicts < 50 || skippedVersions < 500 {
		t.Errorf("the random histories exercise too little: rebased %d, conflicts %d, skipped %d", decided, conflicts, skippedVersions)
	}
}

// ciVersions serves a world's manifests (versions[i] is version i+1).
type ciVersions []*table.Manifest

func (vs ciVersions) Manifest(_ context.Context, v uint64) (*table.Manifest, error) {
	if v == 0 || v > uint64(len(vs)) {
		return nil, table.ErrVersionNotFound
	}
	return vs[v-1], nil
}

func sameNewFiles(a, b []table.NewDeletionFile) bool {
	return slices.EqualFunc(a, b, func(x, y table.NewDeletionFile) bool {
		return x.FragmentID == y.FragmentID && proto.Equal(x.File, y.File) && x.Rows.Equals(y.Rows)
	})
}

func TestConflictIndexRange(t *testing.T) {
	appendAt := func(rv uint64) *lancepb.Transaction {
		x := cfRepresentative(t, table.OpAppend, 0)
		x.ReadVersion = rv
		return x
	}
	x := table.NewConflictIndex()
	if _, ok := x.Candidates(appendAt(1), 1, 2, nil); ok {
		t.Fatal("an empty index covers version 2")
	}
	if got, ok := x.Candidates(appendAt(1), 1, 1, nil); !ok || len(got) != 0 {
		t.Fatalf("Candidates over no versions = %v, %v", got, ok)
	}
	for v := uint64(2); v <= 6; v++ {
		txn := cfDeleteTxn(nil, v)
		if v == 4 {
			txn = cfOverwrite(nil)
		}
		x.Add(v, txn)
	}
	ours := cfDeleteTxn(nil, 5)
	check := func(after, upTo uint64, want []uint64, wantOK bool) {
		t.Helper()
		got, ok := x.Candidates(ours, after, upTo, nil)
		if ok != wantOK || !slices.Equal(got, want) {
			t.Errorf("Candidates(after %d, up to %d) = %v, %v; want %v, %v", after, upTo, got, ok, want, wantOK)
		}
	}
	check(1, 6, []uint64{4, 5}, true)
	check(4, 6, []uint64{5}, true)
	check(0, 6, nil, false) // version 1 is unknown
	check(1, 7, nil, false)
	x.Forget(2) // the oldest
	check(1, 6, nil, false)
	check(2, 6, []uint64{4, 5}, true)
	x.Forget(5) // 5 and after
	check(2, 4, []uint64{4}, true)
	check(2, 5, nil, false)
	x.Add(5, cfDeleteTxn(nil, 5))
	check(2, 5, []uint64{4, 5}, true)
	x.Add(9, cfDeleteTxn(nil, 5)) // a gap: start again from 9
	check(2, 5, nil, false)
	check(8, 9, []uint64{9}, true)
	if x.Len() != 1 {
		t.Errorf("Len = %d after a restart; want 1", x.Len())
	}
	x.Forget(9)
	if x.Len() != 0 {
		t.Errorf("Len = %d after forgetting everything", x.Len())
	}
}

// TestWithReadVersion checks that setting the read version in the encoded
// transaction decodes to the transaction with that read version, for
// random transactions of every kind, with unknown fields, repeated and
// mistyped read_version fields; and that malformed bytes are an error.
func TestWithReadVersion(t *testing.T) {
	g := &ciGen{t: t, rng: rand.New(rand.NewPCG(9, 10)), n: 4, dv: table.MemDeletions{}}
	for i := range 2000 {
		txn := g.any()
		txn.ReadVersion = g.rng.Uint64N(1 << uint(g.rng.IntN(64)))
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(txn)
		if err != nil {
			t.Fatal(err)
		}
		switch g.rng.IntN(4) {
		case 0: // an unknown field
			b = protowire.AppendVarint(protowire.AppendTag(b, 999, protowire.VarintType), 5)
		case 1: // read_version twice: the last one counts
			b = protowire.AppendVarint(protowire.AppendTag(b, 1, protowire.VarintType), txn.ReadVersion+1)
		case 2: // read_version as bytes: kept as an unknown field
			b = protowire.AppendBytes(protowire.AppendTag(b, 1, protowire.BytesType), []byte("x"))
		}
		rv := g.rng.Uint64N(1 << uint(g.rng.IntN(64)))
		want := &lancepb.Transaction{}
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatal(err)
		}
		want.ReadVersion = rv
		out, err := table.WithReadVersion(b, rv)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		got := &lancepb.Transaction{}
		if err := proto.Unmarshal(out, got); err != nil {
			t.Fatalf("case %d: the result does not decode: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("case %d: got %v; want %v", i, got, want)
		}
	}
	for _, bad := range [][]byte{{0x08}, {0x0a, 0x05, 1}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}} {
		if _, err := table.WithReadVersion(bad, 3); !errors.Is(err, table.ErrMalformed) {
			t.Errorf("WithReadVersion(%x) = %v; want ErrMalformed", bad, err)
		}
	}
}
