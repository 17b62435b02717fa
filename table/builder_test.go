package table

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"cellguard/proto/lancepb"
)

func btFrag(id uint64) *Fragment {
	return NewFragment(&lancepb.DataFragment{Id: id, PhysicalRows: 10,
		Files: []*lancepb.DataFile{{Path: fmt.Sprintf("f%d", id), Fields: []int32{0}}}})
}

func btManifest(t testing.TB, ids ...uint64) *Manifest {
	t.Helper()
	pb := &lancepb.Manifest{Version: 1, Fields: []*lancepb.Field{{Id: 0, ParentId: -1, Name: "x"}}}
	for _, id := range ids {
		pb.Fragments = append(pb.Fragments, btFrag(id).Proto())
	}
	m, err := FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func btOrder(m interface {
	Fragments(func(*Fragment) bool)
}) []uint64 {
	var ids []uint64
	m.Fragments(func(f *Fragment) bool {
		ids = append(ids, f.ID())
		return true
	})
	return ids
}

func btIDs(m *Manifest) []uint64 {
	var ids []uint64
	for f := range m.Fragments() {
		ids = append(ids, f.ID())
	}
	return ids
}

func TestBuilderEditsLeaveBaseUnchanged(t *testing.T) {
	base := btManifest(t, 0, 1, 2, 3)
	before, _ := proto.Marshal(base.Proto())

	b := base.Edit()
	b.Header().Tag = "new"
	if err := b.Remove(1); err != nil {
		t.Fatal(err)
	}
	f2 := proto.CloneOf(btFrag(2).Proto())
	f2.DeletionFile = &lancepb.DeletionFile{NumDeletedRows: 1}
	if err := b.Replace(NewFragment(f2)); err != nil {
		t.Fatal(err)
	}
	if err := b.Append(btFrag(9)); err != nil {
		t.Fatal(err)
	}
	next := b.Build()

	after, _ := proto.Marshal(base.Proto())
	if !slices.Equal(before, after) {
		t.Error("editing changed the base manifest")
	}
	if got := btIDs(base); !slices.Equal(got, []uint64{0, 1, 2, 3}) {
		t.Errorf("base order %v", got)
	}
	if got := btIDs(next); !slices.Equal(got, []uint64{0, 2, 3, 9}) {
		t.Errorf("new order %v", got)
	}
	if base.Header().GetTag() != "" || next.Header().GetTag() != "new" {
		t.Errorf("header not copied on write")
	}
	// Untouched fragments are shared, not copied.
	for _, id := range []uint64{0, 3} {
		a, _ := base.Fragment(id)
		b, _ := next.Fragment(id)
		if a != b {
			t.Errorf("fragment %d was copied", id)
		}
	}
	if f, _ := base.Fragment(2); f.DeletionFile() != nil {
		t.Error("replace leaked into the base")
	}
	// A second builder from the same base sees none of the first one's edits.
	if got := btIDs(base.Edit().Build()); !slices.Equal(got, []uint64{0, 1, 2, 3}) {
		t.Errorf("fresh builder order %v", got)
	}
	// Header() without changes shares the base header.
	if base.Edit().Build().Header() != base.Header() {
		t.Error("untouched header was copied")
	}
}

func TestBuilderErrors(t *testing.T) {
	base := btManifest(t, 0, 1, 2)
	for name, fn := range map[string]func(b *Builder) error{
		"append existing":      func(b *Builder) error { return b.Append(btFrag(1)) },
		"insert existing":      func(b *Builder) error { return b.Insert(btFrag(1)) },
		"replace missing":      func(b *Builder) error { return b.Replace(btFrag(7)) },
		"remove missing":       func(b *Builder) error { return b.Remove(7) },
		"splice missing old":   func(b *Builder) error { return b.Splice([]uint64{7}, nil) },
		"splice existing new":  func(b *Builder) error { return b.Splice([]uint64{0}, []*Fragment{btFrag(2)}) },
		"splice existing new2": func(b *Builder) error { return b.Splice(nil, []*Fragment{btFrag(2)}) },
	} {
		err := fn(base.Edit())
		if !errors.Is(err, ErrInvalidTransaction) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestBuilderSpliceOrder(t *testing.T) {
	for _, c := range []struct {
		name string
		ids  []uint64
		old  []uint64
		repl []uint64
		want []uint64
	}{
		{"contiguous middle", []uint64{0, 1, 2, 3, 4}, []uint64{1, 2}, []uint64{10, 11}, []uint64{0, 10, 11, 3, 4}},
		{"first", []uint64{0, 1, 2}, []uint64{0}, []uint64{7}, []uint64{7, 1, 2}},
		{"last", []uint64{0, 1, 2}, []uint64{2}, []uint64{7, 8}, []uint64{0, 1, 7, 8}},
		{"non-contiguous: at the first old one", []uint64{0, 1, 2, 3, 4}, []uint64{3, 1}, []uint64{9}, []uint64{0, 9, 2, 4}},
		{"all", []uint64{0, 1, 2}, []uint64{0, 1, 2}, []uint64{5}, []uint64{5}},
		{"removal only", []uint64{0, 1, 2}, []uint64{1}, nil, []uint64{0, 2}},
		{"no old: append", []uint64{0, 1}, nil, []uint64{4, 3}, []uint64{0, 1, 4, 3}},
	} {
		b := btManifest(t, c.ids...).Edit()
		var repl []*Fragment
		for _, id := range c.repl {
			repl = append(repl, btFrag(id))
		}
		if err := b.Splice(c.old, repl); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := btOrder(b); !slices.Equal(got, c.want) {
			t.Errorf("%s: order %v; want %v", c.name, got, c.want)
		}
		if got := btIDs(b.Build()); !slices.Equal(got, c.want) {
			t.Errorf("%s: built order %v; want %v", c.name, got, c.want)
		}
	}
}

// TestBuilderSpliceExhaustsGap splices repeatedly at the same place, until
// the sequence keys there run out and the builder renumbers.
func TestBuilderSpliceExhaustsGap(t *testing.T) {
	m := btManifest(t, 0, 1, 2)
	want := []uint64{0, 1, 2}
	next := uint64(100)
	for range 40 {
		b := m.Edit()
		// Replace the fragment right after 0 by two new ones.
		old := want[1]
		if err := b.Splice([]uint64{old}, []*Fragment{btFrag(next), btFrag(next + 1)}); err != nil {
			t.Fatal(err)
		}
		want = slices.Concat(want[:1], []uint64{next, next + 1}, want[2:])
		next += 2
		m = b.Build()
		if got := btIDs(m); !slices.Equal(got, want) {
			t.Fatalf("order %v; want %v", got, want)
		}
	}
}

func TestBuilderInsertByID(t *testing.T) {
	b := btManifest(t, 2, 5, 9).Edit()
	for _, id := range []uint64{7, 0, 12, 6, 3} {
		if err := b.Insert(btFrag(id)); err != nil {
			t.Fatal(err)
		}
	}
	if got := btOrder(b); !slices.Equal(got, []uint64{0, 2, 3, 5, 6, 7, 9, 12}) {
		t.Errorf("order %v", got)
	}
	// Many inserts into one gap, ascending and descending, force renumbering.
	b = btManifest(t, 0, 100000).Edit()
	for id := uint64(1); id < 300; id++ {
		if err := b.Insert(btFrag(id)); err != nil {
			t.Fatal(err)
		}
	}
	for id := uint64(99999); id > 99700; id-- {
		if err := b.Insert(btFrag(id)); err != nil {
			t.Fatal(err)
		}
	}
	got := btOrder(b)
	if !slices.IsSorted(got) || len(got) != 2+299+299 {
		t.Errorf("order not by id (%d fragments)", len(got))
	}
}

// TestBuilderInsertMatchesPlain checks Insert's shortcut for an append
// (after the largest id, when that fragment is last in scan order)
// against the plain path it skips (Floor, then seqAfter), on random
// edits: inserts above, between and below the ids, appends of any id at
// the end of the scan order (so the largest id is not always last),
// removals and splices. Each insert must pick the same sequence key.
func TestBuilderInsertMatchesPlain(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 50 {
		b := btManifest(t, 0, 1, 2).Edit()
		next := uint64(3)
		for range 200 {
			ids := btOrder(b)
			switch k := r.IntN(10); {
			case k < 5: // insert, mostly above every id
				id := next + uint64(r.IntN(3))
				if r.IntN(4) == 0 {
					id = uint64(r.IntN(int(next) + 2))
				}
				if _, dup := b.Fragment(id); dup {
					continue
				}
				next = max(next, id+1)
				ref := *b
				if err := insertPlain(&ref, btFrag(id)); err != nil {
					t.Fatal(err)
				}
				if err := b.Insert(btFrag(id)); err != nil {
					t.Fatal(err)
				}
				got, _ := b.frags.byID.Get(id)
				want, _ := ref.frags.byID.Get(id)
				if got.seq != want.seq || !slices.Equal(btOrder(b), btOrder(&ref)) {
					t.Fatalf("round %d: insert %d at seq %d, plain path %d", round, id, got.seq, want.seq)
				}
			case k < 7: // append at the end of the scan order, any new id
				id := uint64(r.IntN(int(next) + 2))
				if _, dup := b.Fragment(id); !dup {
					next = max(next, id+1)
					if err := b.Append(btFrag(id)); err != nil {
						t.Fatal(err)
					}
				}
			case k < 9 && len(ids) > 1:
				if err := b.Remove(ids[r.IntN(len(ids))]); err != nil {
					t.Fatal(err)
				}
			case len(ids) > 1:
				i := r.IntN(len(ids) - 1)
				if err := b.Splice(ids[i:i+2], []*Fragment{btFrag(next)}); err != nil {
					t.Fatal(err)
				}
				next++
			}
		}
	}
}

// insertPlain is Builder.Insert without its shortcut for appends.
func insertPlain(b *Builder, f *Fragment) error {
	id := f.ID()
	pid, hasPrev := b.frags.byID.Max()
	if hasPrev && id <= pid {
		if _, dup := b.frags.byID.Get(id); dup {
			return fmt.Errorf("fragment id %d already exists", id)
		}
		hasPrev = false
		if id > 0 {
			pid, hasPrev = b.frags.byID.Floor(id - 1)
		}
	}
	seq, ok := b.seqAfter(pid, hasPrev)
	if !ok {
		b.renumber()
		seq, _ = b.seqAfter(pid, hasPrev)
	}
	b.frags = b.frags.add(f, seq)
	return nil
}

// TestFragmentCounts checks the feature-flag counters against a full scan
// after random edits.
func TestFragmentCounts(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	m := btManifest(t)
	for step := range 400 {
		b := m.Edit()
		id := r.Uint64N(30)
		f := proto.CloneOf(btFrag(id).Proto())
		if r.IntN(2) == 0 {
			f.DeletionFile = &lancepb.DeletionFile{NumDeletedRows: 1}
		}
		if r.IntN(2) == 0 {
			f.RowIdSequence = &lancepb.DataFragment_InlineRowIds{InlineRowIds: []byte{1}}
		}
		if r.IntN(2) == 0 {
			f.Overlays = []*lancepb.DataOverlayFile{{}}
		}
		switch _, exists := b.Fragment(id); {
		case r.IntN(8) == 0:
			b.RemoveAll()
		case exists && r.IntN(2) == 0:
			_ = b.Remove(id)
		case exists:
			_ = b.Replace(NewFragment(f))
		case r.IntN(2) == 0:
			_ = b.Insert(NewFragment(f))
		default:
			_ = b.Append(NewFragment(f))
		}
		m = b.Build()
		var want fragmentCounts
		for f := range m.Fragments() {
			want = want.plus(countsOf(f), 1)
		}
		if m.frags.count != want {
			t.Fatalf("step %d: counts %+v; a scan says %+v", step, m.frags.count, want)
		}
	}
}

// TestShallowHeaderCopiesEveryField sets every field of a manifest
// header (and an unknown field) and checks that shallowHeader's copy is
// equal to it: a field added to lancepb.Manifest and not to shallowHeader
// fails here rather than vanish from the next version's header.
func TestShallowHeaderCopiesEveryField(t *testing.T) {
	h := &lancepb.Manifest{}
	m := h.ProtoReflect()
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		setAny(t, m, fields.Get(i))
	}
	m.SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 1))
	c := shallowHeader(h)
	if !proto.Equal(h, c) {
		t.Fatalf("shallow copy differs:\n got %v\nwant %v", c, h)
	}
	for i := range fields.Len() {
		if fd := fields.Get(i); !c.ProtoReflect().Has(fd) {
			t.Errorf("field %s not copied", fd.Name())
		}
	}
}

// setAny gives field fd of m some value that is not its default.
func setAny(t *testing.T, m protoreflect.Message, fd protoreflect.FieldDescriptor) {
	t.Helper()
	switch {
	case fd.IsMap():
		mp := m.Mutable(fd).Map()
		mp.Set(scalarValue(t, fd.MapKey()).MapKey(), mp.NewValue())
	case fd.IsList():
		l := m.Mutable(fd).List()
		l.Append(l.NewElement())
	case fd.Message() != nil:
		m.Mutable(fd)
	default:
		m.Set(fd, scalarValue(t, fd))
	}
}

func scalarValue(t *testing.T, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(1)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(7)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(7)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(7)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(7)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(7)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(7)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("x")
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{7})
	}
	t.Fatalf("field %s: kind %v not handled", fd.Name(), fd.Kind())
	return protoreflect.Value{}
}

// TestBuilderTopHeaderLeavesBaseAlone: setting the top-level fields of a
// built manifest's header, and then modifying its nested parts through
// Header, changes nothing in the base manifest.
func TestBuilderTopHeaderLeavesBaseAlone(t *testing.T) {
	pb := &lancepb.Manifest{Version: 1, Fields: []*lancepb.Field{{Id: 0, ParentId: -1, Name: "x"}},
		Config: map[string]string{"k": "v"}, DataFormat: &lancepb.Manifest_DataStorageFormat{FileFormat: "lance", Version: "2.0"}}
	base, err := FromProto(pb)
	if err != nil {
		t.Fatal(err)
	}
	want := proto.CloneOf(base.Header())
	b := base.Edit()
	b.fields().version = 2
	h := b.Header()
	h.Config["k"] = "changed"
	h.DataFormat.Version = "2.1"
	next := b.Build()
	if !proto.Equal(base.Header(), want) {
		t.Fatalf("base header changed: %v", base.Header())
	}
	if next.Version() != 2 || next.Header().GetConfig()["k"] != "changed" || next.Header().GetDataFormat().GetVersion() != "2.1" {
		t.Fatalf("built header: %v", next.Header())
	}
}
