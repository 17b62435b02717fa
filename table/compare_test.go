package table_test

import (
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// TestManifestDiffLanceHistories: every manifest real Lance wrote equals
// Apply of its transaction on Lance's previous manifest under
// ManifestDiff, so the stamped fields are exactly what a writer adds.
func TestManifestDiffLanceHistories(t *testing.T) {
	checked := 0
	for _, name := range historyNames(t) {
		h := loadHistory(t, name)
		lance := rpVersions{}
		for i, v := range h.Versions {
			m, err := table.FromProto(v.Manifest)
			if err != nil {
				t.Fatal(err)
			}
			lance[v.Version] = m
			if i == 0 {
				continue
			}
			next, err := table.Apply(t.Context(), lance[h.Versions[i-1].Version], v.Txn, lance)
			if err != nil {
				t.Fatalf("%s v%d: Apply: %v", name, v.Version, err)
			}
			if d := table.ManifestDiff(next.Proto(), v.Manifest); len(d) > 0 {
				t.Errorf("%s v%d (%s): differs in %v", name, v.Version, v.Label, d)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no versions compared")
	}
}

// TestManifestDiffNamesFields tampers with one field at a time.
func TestManifestDiffNamesFields(t *testing.T) {
	h := loadHistory(t, historyNames(t)[0])
	base := h.Versions[len(h.Versions)-1].Manifest
	if len(base.GetFragments()) == 0 {
		t.Fatal("fixture has no fragments")
	}
	firstID := base.GetFragments()[0].GetId()
	cases := []struct {
		name   string
		tamper func(m *lancepb.Manifest)
		want   []string
	}{
		{"stamped fields only", func(m *lancepb.Manifest) {
			m.Timestamp = timestamppb.New(m.GetTimestamp().AsTime().Add(1e9))
			m.WriterVersion = &lancepb.Manifest_WriterVersion{Library: "other", Version: "9"}
			m.TransactionFile = "x.txn"
			m.VersionAuxData = 7
		}, nil},
		{"version", func(m *lancepb.Manifest) { m.Version++ }, []string{"version"}},
		{"rows", func(m *lancepb.Manifest) { m.Fragments[0].PhysicalRows++ }, []string{fragName(firstID)}},
		{"dropped fragment", func(m *lancepb.Manifest) { m.Fragments = m.Fragments[1:] }, []string{fragName(firstID)}},
		{"extra fragment", func(m *lancepb.Manifest) {
			f := proto.CloneOf(m.Fragments[0])
			f.Id = 999
			m.Fragments = append(m.Fragments, f)
		}, []string{"fragments[id=999]"}},
		{"schema and next row id", func(m *lancepb.Manifest) {
			m.Fields[0].Name += "_x"
			m.NextRowId += 5
		}, []string{"fields", "next_row_id"}},
		{"config", func(m *lancepb.Manifest) { m.Config = map[string]string{"k": "v"} }, []string{"config"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := proto.CloneOf(base)
			c.tamper(got)
			if d := table.ManifestDiff(base, got); !slices.Equal(d, c.want) {
				t.Errorf("ManifestDiff = %v, want %v", d, c.want)
			}
		})
	}
}

func fragName(id uint64) string { return fmt.Sprintf("fragments[id=%d]", id) }
