package publish

import (
	"os"
	"path/filepath"
	"regexp"
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
// version, feature flags, storage format, schema, fragments,
// max_fragment_id, next_row_id, the inline transaction and its offset)
// must be equal; the commit timestamp may differ, and the transaction
// file is the publisher's own (TransactionFile), named as Lance names
// one.
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
				if want.GetTransactionFile() != table.TransactionFileName(lance.Transaction.GetReadVersion(), lance.Transaction.GetUuid()) {
					t.Errorf("v%d: Lance named its transaction file %q", v, want.GetTransactionFile())
				}
				want.TransactionFile = TransactionFile(lance.Transaction)
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

// TestTransactionFileIsOurOwn: a published version names a transaction
// file of its own, the same for every writer of the version, never the
// one a Lance client wrote before its call (and deletes when it believes
// that call failed), and in Lance's naming.
func TestTransactionFileIsOurOwn(t *testing.T) {
	txn := &lancepb.Transaction{ReadVersion: 7, Uuid: "25ed8674-e54d-4dcd-bd4c-cade24b90dce"}
	got := TransactionFile(txn)
	if got == table.TransactionFileName(7, txn.GetUuid()) {
		t.Fatalf("TransactionFile = %q: the client's own name", got)
	}
	if again := TransactionFile(proto.CloneOf(txn)); again != got {
		t.Errorf("TransactionFile not deterministic: %q, then %q", got, again)
	}
	if other := TransactionFile(&lancepb.Transaction{ReadVersion: 7, Uuid: "35ed8674-e54d-4dcd-bd4c-cade24b90dce"}); other == got {
		t.Errorf("two transactions name one file %q", got)
	}
	if !regexp.MustCompile(`^7-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\.txn$`).MatchString(got) {
		t.Errorf("TransactionFile = %q, want {read_version}-{uuid}.txn", got)
	}
}
