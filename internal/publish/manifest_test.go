package publish

import (
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// TestManifestFileMatchesLance builds, for every version of every history
// real LanceDB 0.31 wrote (table/testdata/lance), the manifest file the
// publisher would write — from the table model's Apply of Lance's
// transaction to Lance's previous version — and compares it with Lance's
// own manifest file of that version: every manifest field (writer
// version, feature flags, transaction file name, storage format, schema,
// fragments, max_fragment_id, next_row_id, the inline transaction and its
// offset) must be equal; only the commit timestamp may differ.
func TestManifestFileMatchesLance(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("..", "..", "table", "testdata", "lance", "*", "_versions"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, vdir := range dirs {
		name := filepath.Base(filepath.Dir(vdir))
		t.Run(name, func(t *testing.T) {
			files := readVersions(t, vdir)
			compared := 0
			for v := uint64(2); files[v] != nil; v++ {
				prev, lance := files[v-1], files[v]
				if prev == nil || lance.Transaction == nil || lance.Indexes != nil || prev.Indexes != nil {
					continue // index sections are not published by cellguard
				}
				base, err := table.FromProto(prev.Manifest)
				if err != nil {
					t.Fatal(err)
				}
				m, err := table.Apply(t.Context(), base, lance.Transaction, nil)
				if err != nil {
					continue // Restore needs older versions; the table tests cover Apply
				}
				f, err := ManifestFile(m, lance.Transaction, "", lance.Manifest.GetTimestamp().AsTime())
				if err != nil {
					t.Fatalf("v%d: %v", v, err)
				}
				b, err := encode(f)
				if err != nil {
					t.Fatal(err)
				}
				ours, err := table.ReadManifestFile(b)
				if err != nil {
					t.Fatal(err)
				}
				want := proto.CloneOf(lance.Manifest)
				got := proto.CloneOf(ours.Manifest)
				if !proto.Equal(got, want) {
					t.Errorf("v%d: our manifest differs from Lance's\nours:  %s\nlance: %s", v, short(got), short(want))
				}
				if !proto.Equal(ours.Transaction, lance.Transaction) {
					t.Errorf("v%d: inline transaction differs", v)
				}
				compared++
			}
			if compared == 0 {
				t.Skipf("no version of %s without an index section to compare", name)
			}
			t.Logf("%d versions compared", compared)
		})
	}
}

func readVersions(t *testing.T, dir string) map[uint64]*table.ManifestFile {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]*table.ManifestFile{}
	for _, e := range ents {
		v, ok := table.ParseManifestFileName(e.Name())
		if !ok {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		f, err := table.ReadManifestFile(b)
		if err != nil {
			t.Fatal(err)
		}
		out[v] = f
	}
	return out
}

// short renders a manifest without its schema and fragments.
func short(m *lancepb.Manifest) string {
	m = proto.CloneOf(m)
	m.Fields, m.Fragments = nil, nil
	return prototext.Format(m)
}
