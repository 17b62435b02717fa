package data_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow"

	"cellguard/table/data"
)

// TestFileLayout checks what a file:// store leaves on disk: data files
// under data/ and Lance-named deletion files under _deletions/, nothing
// else (no sidecar metadata files).
func TestFileLayout(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "new", "dataset") // created on first write
	s, err := data.Open(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	frag, err := s.WriteFragment(ctx, testSchema(t), map[int32]arrow.Array{fY: int64Col(1, 2)})
	if err != nil {
		t.Fatal(err)
	}
	df, err := s.WriteDeletionFile(ctx, 3, 7, roaring.BitmapOf(1))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"data/" + frag.GetFiles()[0].GetPath():        true,
		"_deletions/3-7-" + itoa(df.GetId()) + ".bin": true,
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if !want[filepath.ToSlash(rel)] {
			t.Errorf("unexpected file %s", rel)
		}
		delete(want, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for f := range want {
		t.Errorf("missing file %s", f)
	}
	if p := frag.GetFiles()[0].GetPath(); !regexp.MustCompile(`^[0-9a-f]{32}\.lance$`).MatchString(p) {
		t.Errorf("data file path %q; want a random name ending in .lance", p)
	}
}
