package table_test

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/table"
)

// Every manifest LanceDB wrote in the fixtures encodes through
// AppendEncoding exactly as a deterministic Marshal of its Proto.
func TestFixtureManifestsAppendEncoding(t *testing.T) {
	for _, p := range fixtureFiles(t, "_versions/*.manifest") {
		m, err := table.FromProto(readManifestFixture(t, p).Manifest)
		if err != nil {
			t.Fatal(err)
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(m.Proto())
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.AppendEncoding(nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: AppendEncoding differs from Marshal(Proto()) (%v)", p, err)
		}
	}
}
