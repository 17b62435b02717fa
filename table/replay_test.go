package table_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// TestReplayLanceHistories replays every fixture history written by real
// Lance: it starts from Lance's manifest of the first version, applies each
// later version's transaction with Apply to the manifest Apply built for
// the version before (serving those built manifests to Restore), and
// compares the result with Lance's own manifest of that version.
//
// Compared: the version, the fragments in order (ids, data files with
// fields, column indices, file versions, sizes and bases, deletion files,
// physical rows, overlays, row id sequences, created-at and last-updated
// version sequences), the schema and schema metadata, max_fragment_id, the
// reader and writer feature flags, config, table metadata, next_row_id, the
// data storage format, base paths, tag and branch: everything in the
// Manifest message except the fields below.
//
// Deliberately not compared, because Apply leaves them to the committer
// that writes the manifest file (Apply clears them):
//   - timestamp: the commit's wall-clock time;
//   - writer_version: the library that wrote the file;
//   - transaction_file: the name of the `.txn` file written beside it;
//   - transaction_section and index_section: byte offsets inside the
//     manifest file;
//   - version_aux_data: a file offset, never inherited.
func TestReplayLanceHistories(t *testing.T) {
	for _, name := range historyNames(t) {
		t.Run(name, func(t *testing.T) {
			h := loadHistory(t, name)
			first := h.Versions[0]
			cur, err := table.FromProto(first.Manifest)
			if err != nil {
				t.Fatalf("FromProto(v%d): %v", first.Version, err)
			}
			built := rpVersions{first.Version: cur}
			for _, v := range h.Versions[1:] {
				op, _ := table.OpOf(v.Txn)
				next, err := table.Apply(t.Context(), cur, v.Txn, built)
				if err != nil {
					t.Fatalf("v%d %s (%s): Apply: %v", v.Version, op, v.Label, err)
				}
				if diffs := rpDiffs(next.Proto(), v.Manifest); len(diffs) > 0 {
					t.Errorf("v%d %s (%s) differs from Lance's manifest:", v.Version, op, v.Label)
					for _, d := range diffs {
						t.Errorf("  %s", d)
					}
				}
				built[v.Version] = next
				cur = next
			}
			t.Logf("%d versions replayed", len(h.Versions)-1)
		})
	}
}

// TestReplayEachStep applies each fixture transaction to Lance's own
// manifest of the version before (rather than to Apply's), so that one
// difference cannot hide or cause the next.
func TestReplayEachStep(t *testing.T) {
	for _, name := range historyNames(t) {
		t.Run(name, func(t *testing.T) {
			h := loadHistory(t, name)
			lance := rpVersions{}
			for i, v := range h.Versions {
				m, err := table.FromProto(v.Manifest)
				if err != nil {
					t.Fatalf("FromProto(v%d): %v", v.Version, err)
				}
				if i > 0 {
					prev := lance[h.Versions[i-1].Version]
					next, err := table.Apply(t.Context(), prev, v.Txn, lance)
					if err != nil {
						t.Fatalf("v%d (%s): Apply: %v", v.Version, v.Label, err)
					}
					for _, d := range rpDiffs(next.Proto(), v.Manifest) {
						t.Errorf("v%d (%s): %s", v.Version, v.Label, d)
					}
				}
				lance[v.Version] = m
			}
		})
	}
}

// TestReplayCreate checks Create against the first version of every
// history. Whether a table has stable row ids is a write parameter, not
// part of the transaction, so it is taken from Lance's manifest.
func TestReplayCreate(t *testing.T) {
	for _, name := range historyNames(t) {
		h := loadHistory(t, name)
		first := h.Versions[0]
		opts := table.CreateOptions{StableRowIDs: first.Manifest.GetReaderFeatureFlags()&table.FlagStableRowIDs != 0}
		m, err := table.CreateWith(first.Txn, opts)
		if err != nil {
			t.Fatalf("%s: CreateWith: %v", name, err)
		}
		for _, d := range rpDiffs(m.Proto(), first.Manifest) {
			t.Errorf("%s v1: %s", name, d)
		}
		if !opts.StableRowIDs {
			viaApply, err := table.Apply(t.Context(), nil, first.Txn, nil)
			if err != nil {
				t.Fatalf("%s: Apply(nil, …): %v", name, err)
			}
			if !proto.Equal(viaApply.Proto(), m.Proto()) {
				t.Errorf("%s: Apply(nil, txn) differs from Create(txn)", name)
			}
		}
	}
}

// rpVersions serves manifests by version, for Restore.
type rpVersions map[uint64]*table.Manifest

func (b rpVersions) Manifest(_ context.Context, v uint64) (*table.Manifest, error) {
	m, ok := b[v]
	if !ok {
		return nil, &table.Error{Op: "test versions", Err: table.ErrVersionNotFound, Msg: fmt.Sprint("no version ", v)}
	}
	return m, nil
}

// rpComparable returns a copy of m without the fields the replay does not
// compare (see TestReplayLanceHistories).
func rpComparable(m *lancepb.Manifest) *lancepb.Manifest {
	c := proto.CloneOf(m)
	c.Timestamp, c.WriterVersion = nil, nil
	c.TransactionFile, c.TransactionSection = "", nil
	c.IndexSection, c.VersionAuxData = nil, 0
	return c
}

// rpDiffs describes how got differs from want, field by field.
func rpDiffs(got, want *lancepb.Manifest) []string {
	got, want = rpComparable(got), rpComparable(want)
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	if got.GetVersion() != want.GetVersion() {
		add("version %d, want %d", got.GetVersion(), want.GetVersion())
	}
	gi, wi := rpFragmentIDs(got), rpFragmentIDs(want)
	if !slices.Equal(gi, wi) {
		add("fragment ids %v, want %v", gi, wi)
	}
	for i := range min(len(got.GetFragments()), len(want.GetFragments())) {
		g, w := got.GetFragments()[i], want.GetFragments()[i]
		if !proto.Equal(g, w) {
			add("fragment %d (position %d):\n got: %s\nwant: %s", w.GetId(), i, rpText(g), rpText(w))
		}
	}
	if !slices.EqualFunc(got.GetFields(), want.GetFields(), func(x, y *lancepb.Field) bool { return proto.Equal(x, y) }) {
		add("schema:\n got: %v\nwant: %v", rpTexts(got.GetFields()), rpTexts(want.GetFields()))
	}
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"max_fragment_id", rpOptU32(got.MaxFragmentId), rpOptU32(want.MaxFragmentId)},
		{"reader_feature_flags", got.GetReaderFeatureFlags(), want.GetReaderFeatureFlags()},
		{"writer_feature_flags", got.GetWriterFeatureFlags(), want.GetWriterFeatureFlags()},
		{"next_row_id", got.GetNextRowId(), want.GetNextRowId()},
		{"tag", got.GetTag(), want.GetTag()},
		{"branch", got.GetBranch(), want.GetBranch()},
	} {
		if f.got != f.want {
			add("%s %v, want %v", f.name, f.got, f.want)
		}
	}
	for _, f := range []struct {
		name      string
		got, want proto.Message
	}{
		{"data_format", got.GetDataFormat(), want.GetDataFormat()},
	} {
		if !proto.Equal(f.got, f.want) {
			add("%s %s, want %s", f.name, rpText(f.got), rpText(f.want))
		}
	}
	if !rpMapsEqual(got.GetConfig(), want.GetConfig()) {
		add("config %v, want %v", got.GetConfig(), want.GetConfig())
	}
	if !rpMapsEqual(got.GetTableMetadata(), want.GetTableMetadata()) {
		add("table_metadata %v, want %v", got.GetTableMetadata(), want.GetTableMetadata())
	}
	if len(out) == 0 && !proto.Equal(got, want) {
		// Whatever the fields above miss (schema metadata, base paths, …).
		add("manifest:\n got: %s\nwant: %s", rpText(rpWithoutFragments(got)), rpText(rpWithoutFragments(want)))
	}
	return out
}

func rpFragmentIDs(m *lancepb.Manifest) []uint64 {
	var ids []uint64
	for _, f := range m.GetFragments() {
		ids = append(ids, f.GetId())
	}
	return ids
}

func rpWithoutFragments(m *lancepb.Manifest) *lancepb.Manifest {
	c := proto.CloneOf(m)
	c.Fragments = nil
	return c
}

func rpOptU32(p *uint32) string {
	if p == nil {
		return "absent"
	}
	return fmt.Sprint(*p)
}

func rpMapsEqual[V comparable](a, b map[string]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func rpText(m proto.Message) string {
	return prototext.MarshalOptions{}.Format(m)
}

func rpTexts[M proto.Message](ms []M) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = rpText(m)
	}
	return out
}
