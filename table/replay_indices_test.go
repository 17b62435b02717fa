package table_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// The histories under testdata/lance-indices/<judge> were written by real
// LanceDB 0.31 (lance8) and 0.39 (lance12) with scripts/lance-fixtures/indices.mjs:
// btree, bitmap, label_list, FTS, IVF-PQ and IVF-HNSW-SQ indices through
// appends, deletes, updates, compaction with index merging, column changes,
// index replacement and drop, and restore.
const indexFixturesDir = "testdata/lance-indices"

type indexVersion struct {
	Version  uint64
	Label    string
	File     *table.ManifestFile
	Section  []byte // the index section's protobuf as Lance wrote it; nil if none
	Txn      *lancepb.Transaction
	Listed   []string // index names listIndices reported
	Rules    table.IndexRules
	judge    string
	fileName string
}

func indexHistories(t *testing.T) map[string][]indexVersion {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(indexFixturesDir, "*", "*", "history.json"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no index fixture histories under %s (%v)", indexFixturesDir, err)
	}
	out := map[string][]indexVersion{}
	for _, p := range paths {
		dir := filepath.Dir(p)
		judge := filepath.Base(filepath.Dir(dir))
		name := judge + "/" + filepath.Base(dir)
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var hj struct {
			Versions []struct {
				Version   uint64 `json:"version"`
				Operation string `json:"operation"`
				Manifest  string `json:"manifest"`
				Indices   []struct {
					Name string `json:"name"`
				} `json:"indices"`
			} `json:"versions"`
		}
		if err := json.Unmarshal(raw, &hj); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, v := range hj.Versions {
			path := filepath.Join(dir, v.Manifest)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := table.ReadManifestFile(b)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			var section []byte
			if off := f.Manifest.IndexSection; off != nil {
				n := binary.LittleEndian.Uint32(b[*off:])
				section = b[*off+4 : *off+4+uint64(n)]
			}
			txn := f.Transaction
			if txn == nil {
				txn = readTxnFixture(t, filepath.Join(dir, "_transactions", f.Manifest.GetTransactionFile()))
			}
			iv := indexVersion{Version: v.Version, Label: v.Operation, File: f, Section: section, Txn: txn, judge: judge, fileName: path}
			for _, ix := range v.Indices {
				iv.Listed = append(iv.Listed, ix.Name)
			}
			out[name] = append(out[name], iv)
		}
	}
	return out
}

// TestReplayIndexHistories replays every index fixture history from its
// first version with Apply (serving the built manifests to Restore) and
// checks each version's index section byte for byte against Lance's, and
// the rest of the manifest as TestReplayLanceHistories does.
func TestReplayIndexHistories(t *testing.T) {
	for name, h := range indexHistories(t) {
		t.Run(name, func(t *testing.T) {
			cur, err := table.FromFile(h[0].File)
			if err != nil {
				t.Fatal(err)
			}
			wantRules := table.IndexRulesLance8
			if h[0].judge == "lance12" {
				wantRules = table.IndexRulesLance12
			}
			if cur.IndexRules() != wantRules {
				t.Fatalf("rules %s, want %s", cur.IndexRules(), wantRules)
			}
			built := rpVersions{h[0].Version: cur}
			indexed := 0
			for _, v := range h[1:] {
				op, _ := table.OpOf(v.Txn)
				next, err := table.Apply(t.Context(), cur, v.Txn, built)
				if err != nil {
					t.Fatalf("v%d %s (%s): Apply: %v", v.Version, op, v.Label, err)
				}
				for _, d := range rpDiffs(next.Proto(), v.File.Manifest) {
					t.Errorf("v%d %s (%s): %s", v.Version, op, v.Label, d)
				}
				checkIndexSection(t, v, next, op)
				if len(next.Indices()) > 0 {
					indexed++
				}
				built[v.Version] = next
				cur = next
			}
			if indexed == 0 {
				t.Fatal("no version has an index")
			}
		})
	}
}

// TestReplayIndexEachStep applies each transaction to Lance's own manifest
// (and index section) of the version before.
func TestReplayIndexEachStep(t *testing.T) {
	for name, h := range indexHistories(t) {
		t.Run(name, func(t *testing.T) {
			lance := rpVersions{}
			for i, v := range h {
				m, err := table.FromFile(v.File)
				if err != nil {
					t.Fatal(err)
				}
				if i > 0 {
					op, _ := table.OpOf(v.Txn)
					next, err := table.Apply(t.Context(), lance[h[i-1].Version], v.Txn, lance)
					if err != nil {
						t.Fatalf("v%d (%s): Apply: %v", v.Version, v.Label, err)
					}
					checkIndexSection(t, v, next, op)
				}
				lance[v.Version] = m
			}
		})
	}
}

func checkIndexSection(t *testing.T, v indexVersion, got *table.Manifest, op table.Op) {
	t.Helper()
	var gotBytes []byte
	if s := got.IndexSection(); s != nil {
		var err error
		if gotBytes, err = (proto.MarshalOptions{Deterministic: true}).Marshal(s); err != nil {
			t.Fatal(err)
		}
	}
	if bytes.Equal(gotBytes, v.Section) {
		var names []string
		for _, ix := range got.Indices() {
			if !slices.Contains(names, ix.GetName()) {
				names = append(names, ix.GetName())
			}
		}
		slices.Sort(names)
		listed := slices.Clone(v.Listed)
		slices.Sort(listed)
		if !slices.Equal(names, listed) {
			t.Errorf("v%d %s (%s): index names %v, LanceDB listed %v", v.Version, op, v.Label, names, listed)
		}
		return
	}
	t.Errorf("v%d %s (%s): index section differs from Lance's (%d bytes, want %d)", v.Version, op, v.Label, len(gotBytes), len(v.Section))
	want := v.File.Indexes.GetIndices()
	gl := got.Indices()
	for i := range max(len(gl), len(want)) {
		var g, w *lancepb.IndexMetadata
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(want) {
			w = want[i]
		}
		gb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(g)
		wb, _ := proto.MarshalOptions{Deterministic: true}.Marshal(w)
		if !bytes.Equal(gb, wb) {
			t.Errorf("  entry %d:\n   got: %s\n  want: %s", i, idxText(g), idxText(w))
		}
	}
}

func idxText(ix *lancepb.IndexMetadata) string {
	if ix == nil {
		return "(none)"
	}
	c := proto.CloneOf(ix)
	c.IndexDetails = nil
	c.Files = nil
	s := rpText(c)
	if bm, err := table.DecodeBitmap(ix.GetFragmentBitmap()); err == nil && len(ix.GetFragmentBitmap()) > 0 {
		s += " bitmap=" + bm.String()
	}
	return s
}
