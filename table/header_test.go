package table

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
)

// TestHeaderMatchesPlain checks versions that share their header and keep
// their own top-level fields (header.go) against the plain way: a full
// header message per version, cloned from the last and modified in place.
// Random chains of builders set top-level fields through fields() and any
// field through Header(), interleaved, starting from headers with every
// field set or only some; every version's Header, Proto, AppendEncoding,
// Version and MaxFragmentID must equal the plain header's, and no version
// may change once built.
func TestHeaderMatchesPlain(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 12))
			start := randomHeader(t, rng)
			m, err := FromProto(proto.CloneOf(start))
			if err != nil {
				t.Fatal(err)
			}
			plain := proto.CloneOf(start)
			type version struct {
				m    *Manifest
				want *lancepb.Manifest
			}
			var built []version
			checkHeader(t, "start", m, plain)
			for step := range 12 {
				b := m.Edit()
				for range rng.IntN(5) {
					editTop(rng, b, plain)
				}
				m = b.Build()
				built = append(built, version{m, proto.CloneOf(plain)})
				checkHeader(t, fmt.Sprintf("step %d", step), m, plain)
				if rng.IntN(4) == 0 { // the builder used again after Build leaves m alone
					editTop(rng, b, proto.CloneOf(plain))
				}
			}
			for i, v := range built {
				checkHeader(t, fmt.Sprintf("version %d at the end", i), v.m, v.want)
			}
		})
	}
}

// randomHeader returns a header with every field set (and an unknown
// field), or with a random part of them.
func randomHeader(t *testing.T, rng *rand.Rand) *lancepb.Manifest {
	h := &lancepb.Manifest{}
	r := h.ProtoReflect()
	fields := r.Descriptor().Fields()
	all := rng.IntN(3) == 0
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Name() == "fields" || fd.Name() == "fragments" || !all && rng.IntN(2) == 0 {
			continue
		}
		setAny(t, r, fd)
	}
	if all || rng.IntN(3) == 0 {
		r.SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 999, protowire.VarintType), 1))
	}
	return h
}

// editTop makes one random change to b and the same change to plain.
func editTop(rng *rand.Rand, b *Builder, plain *lancepb.Manifest) {
	switch rng.IntN(9) {
	case 0:
		v := rng.Uint64N(100)
		b.fields().version, plain.Version = v, v
	case 1:
		tag := []string{"", "a", "b"}[rng.IntN(3)]
		b.fields().tag, plain.Tag = tag, tag
	case 2:
		id := rng.Uint32N(50)
		b.fields().setMaxID(id)
		plain.MaxFragmentId = proto.Uint32(id)
	case 3:
		r, w := rng.Uint64N(200), rng.Uint64N(200)
		f := b.fields()
		f.reader, f.writer = r, w
		plain.ReaderFeatureFlags, plain.WriterFeatureFlags = r, w
	case 4:
		n := rng.Uint64N(1000)
		b.fields().nextRowID, plain.NextRowId = n, n
	case 5: // what Apply's finish does
		b.fields().unstamped = true
		plain.Timestamp, plain.WriterVersion = nil, nil
		plain.TransactionFile, plain.TransactionSection = "", nil
		plain.IndexSection, plain.VersionAuxData = nil, 0
	case 6: // a top-level field through the full header
		b.Header().Tag = "via header"
		plain.Tag = "via header"
	case 7: // stamps through the full header
		b.Header().TransactionFile = "t.txn"
		b.Header().VersionAuxData = 3
		plain.TransactionFile, plain.VersionAuxData = "t.txn", 3
	case 8: // a nested field
		b.Header().Config = map[string]string{"k": fmt.Sprint(rng.IntN(3))}
		plain.Config = map[string]string{"k": b.Header().Config["k"]}
		b.Header().MaxFragmentId = nil
		plain.MaxFragmentId = nil
	}
}

func checkHeader(t *testing.T, what string, m *Manifest, want *lancepb.Manifest) {
	t.Helper()
	if got := m.Header(); !proto.Equal(got, want) {
		t.Fatalf("%s: Header() = %v; want %v", what, got, want)
	}
	if got := m.Proto(); !proto.Equal(got, want) { // no fields, no fragments
		t.Fatalf("%s: Proto() = %v; want %v", what, got, want)
	}
	enc, err := m.AppendEncoding(nil)
	if err != nil {
		t.Fatal(err)
	}
	wantEnc, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if string(enc) != string(wantEnc) {
		t.Fatalf("%s: AppendEncoding = %x; want %x", what, enc, wantEnc)
	}
	if m.Version() != want.GetVersion() {
		t.Fatalf("%s: Version() = %d; want %d", what, m.Version(), want.GetVersion())
	}
	if id, ok := m.MaxFragmentID(); ok != (want.MaxFragmentId != nil) || id != want.GetMaxFragmentId() {
		t.Fatalf("%s: MaxFragmentID() = %d, %v; want %v", what, id, ok, want.MaxFragmentId)
	}
}

// TestHeaderSharedByVersions checks that an applied Append does not copy
// its head's header: the new version's Header is assembled from the
// shared one, and the head's is untouched.
func TestHeaderSharedByVersions(t *testing.T) {
	base := btManifest(t, 0, 1)
	b := base.Edit()
	b.fields().version = 2
	next := b.Build()
	if next.header != base.header {
		t.Fatal("a version that changes top-level fields only copied the header")
	}
	if base.Header() != base.header || base.Version() != 1 || next.Version() != 2 || next.Header().GetVersion() != 2 {
		t.Fatalf("versions %d and %d (headers say %d and %d)", base.Version(), next.Version(), base.Header().GetVersion(), next.Header().GetVersion())
	}
}

// TestHeaderSharedByTables checks that tables whose headers are equal
// hold one header message, that a table changing its header gets a new
// one without touching the others', and that the next table making the
// same change shares that new one.
func TestHeaderSharedByTables(t *testing.T) {
	a, b := btManifest(t, 0, 1), btManifest(t, 7)
	if a.header != b.header {
		t.Fatal("two tables with equal headers hold a header each")
	}
	withConfig := func(m *Manifest, v string) *Manifest {
		e := m.Edit()
		e.Header().Config = map[string]string{"k": v}
		return e.Build()
	}
	a2 := withConfig(a, "1")
	if a2.header == b.header || len(b.Header().GetConfig()) != 0 || len(a.Header().GetConfig()) != 0 {
		t.Fatalf("a config change reached the tables sharing the header: %v, %v", a.Header().GetConfig(), b.Header().GetConfig())
	}
	if b2 := withConfig(b, "1"); b2.header != a2.header {
		t.Fatal("the same config change on two tables left two headers")
	}
	if c2 := withConfig(btManifest(t, 3), "2"); c2.header == a2.header || c2.Header().GetConfig()["k"] != "2" {
		t.Fatalf("a different config shares a header: %v", c2.Header().GetConfig())
	}
}
