package table

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"cellguard/proto/lancepb"
)

// StampedFields are the Manifest fields a writer fills in when it writes
// the manifest file, which Apply leaves unset: the commit's wall-clock
// time, the writing library, the `.txn` file name, byte offsets inside the
// file. Two writers that commit the same transaction on the same head
// differ only here (TestReplayLanceHistories shows Lance's own manifests
// equal Apply's apart from these).
var StampedFields = []string{
	"timestamp", "writer_version", "transaction_file", "transaction_section",
	"index_section", "version_aux_data",
}

// ManifestDiff compares a manifest a writer proposes (got) with the one
// the table model derives for the same commit (want, from Apply) and
// returns the names of the fields that differ, ignoring StampedFields.
// Fragments are compared one by one and named `fragments[id=N]`; a
// fragment present on one side only is named too. The result is sorted
// and empty when the manifests agree. It is a pure function.
func ManifestDiff(want, got *lancepb.Manifest) []string {
	var out []string
	wr, gr := want.ProtoReflect(), got.ProtoReflect()
	fields := wr.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		name := string(fd.Name())
		switch {
		case slices.Contains(StampedFields, name):
			continue
		case name == "fragments":
			out = append(out, fragmentDiff(want.GetFragments(), got.GetFragments())...)
			continue
		}
		if !fieldEqual(fd, wr, gr) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// fieldEqual reports whether field fd has the same value (and presence)
// in a and b.
func fieldEqual(fd protoreflect.FieldDescriptor, a, b protoreflect.Message) bool {
	if a.Has(fd) != b.Has(fd) {
		return false
	}
	if !a.Has(fd) {
		return true
	}
	// Compare through single-field messages so that lists, maps and
	// nested messages get proto.Equal's semantics.
	ca, cb := a.Type().New(), b.Type().New()
	ca.Set(fd, a.Get(fd))
	cb.Set(fd, b.Get(fd))
	return proto.Equal(ca.Interface(), cb.Interface())
}

// fragmentDiff names the fragments that differ between want and got, in
// order and content.
func fragmentDiff(want, got []*lancepb.DataFragment) []string {
	var out []string
	byID := func(fs []*lancepb.DataFragment) map[uint64]*lancepb.DataFragment {
		m := make(map[uint64]*lancepb.DataFragment, len(fs))
		for _, f := range fs {
			m[f.GetId()] = f
		}
		return m
	}
	wm, gm := byID(want), byID(got)
	for id, w := range wm {
		if g, ok := gm[id]; !ok || !proto.Equal(w, g) {
			out = append(out, fmt.Sprintf("fragments[id=%d]", id))
		}
	}
	for id := range gm {
		if _, ok := wm[id]; !ok {
			out = append(out, fmt.Sprintf("fragments[id=%d]", id))
		}
	}
	if len(out) == 0 && !slices.EqualFunc(want, got, func(a, b *lancepb.DataFragment) bool { return a.GetId() == b.GetId() }) {
		out = append(out, "fragments(order)")
	}
	return out
}

// ManifestMismatchError reports a proposed manifest that is not the one
// the table model derives; Fields names the differing fields.
type ManifestMismatchError struct {
	Version uint64
	Fields  []string
}

func (e *ManifestMismatchError) Error() string {
	return fmt.Sprintf("manifest for version %d differs from the committed state in: %s", e.Version, strings.Join(e.Fields, ", "))
}

// Unwrap makes the error match ErrInvalidTransaction.
func (e *ManifestMismatchError) Unwrap() error { return ErrInvalidTransaction }
