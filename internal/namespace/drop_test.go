package namespace_test

import (
	_ "embed"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"cellguard/internal/lancedbtest"
	"cellguard/internal/namespace"
)

//go:embed testdata/drop.mjs
var dropJS string

type dropOut struct {
	Before     []string `json:"before"`
	WorkerDrop *string  `json:"workerDrop"`
	AdminDrop  *string  `json:"adminDrop"`
	After      []string `json:"after"`
	Open       *string  `json:"open"`
	Recreate   *string  `json:"recreate"`
	DropAgain  *string  `json:"dropAgain"`
}

const dropTokens = "worker wtok *\nadmin atok *\n"

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

// TestLanceDBDropTable: LanceDB creates a table, adds rows and drops it
// through the namespace. A worker's drop is refused (403); an admin's
// writes the table's tombstone and deletes its Lance directory. After
// that the table is gone for LanceDB (tableNames, openTable) and its
// name cannot be created again.
func TestLanceDBDropTable(t *testing.T) {
	tokens, err := namespace.ParseTokens([]byte(dropTokens))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{tokens: tokens, admin: true})
	var out dropOut
	in := map[string]any{"uri": e.url, "table": "d", "writer": bearer("wtok"), "admin": bearer("atok")}
	lancedbtest.Run(t, lancedbtest.Prelude+dropJS, in, &out)
	t.Logf("LanceDB saw: %s", js(t, out))
	if js(t, out.Before) != `["d"]` {
		t.Errorf("tableNames before the drop: %v", out.Before)
	}
	if out.WorkerDrop == nil {
		t.Error("a worker dropped the table")
	} else if n := testutil.ToFloat64(e.ns.Requests("table_drop", 403)); n != 1 {
		t.Errorf("worker's drop: %q, table_drop answered 403 %v times, want 1", *out.WorkerDrop, n)
	}
	if out.AdminDrop != nil {
		t.Fatalf("admin's drop failed: %s", *out.AdminDrop)
	}
	if len(out.After) != 0 {
		t.Errorf("tableNames after the drop: %v, want none", out.After)
	}
	if out.Open == nil || !strings.Contains(strings.ToLower(*out.Open), "not found") {
		t.Errorf("openTable after the drop: %v, want a not-found error", out.Open)
	}
	if out.Recreate == nil || !strings.Contains(*out.Recreate, namespace.ReasonDatasetDeleted) {
		t.Errorf("createTable of the dropped name: %v, want a DATASET_DELETED refusal", out.Recreate)
	}
	if out.DropAgain == nil || !strings.Contains(strings.ToLower(*out.DropAgain), "not found") {
		t.Errorf("dropping it again: %v, want a not-found error", out.DropAgain)
	}
	ts, ok, err := e.log.Tombstone(t.Context(), "d")
	if err != nil || !ok {
		t.Fatalf("no tombstone in the log: %v %v", ok, err)
	}
	if ts.Decision.GetHeadVersion() != 2 || !strings.Contains(ts.Decision.GetMessage(), "Lance REST namespace") {
		t.Errorf("tombstone %v, want head version 2 and the namespace's note", ts.Decision)
	}
	if n := e.decisions(t, "d"); n != 3 {
		t.Errorf("%d records of d, want 3 (two commits and the tombstone): nothing staged after the drop", n)
	}
	if files := filesUnder(t, filepath.Join(e.root, "d.lance")); len(files) != 0 {
		t.Errorf("files left in the dropped table's directory: %v", files)
	}
}

// filesUnder lists the regular files under dir (none if it is gone).
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, strings.TrimPrefix(p, dir))
		}
		return nil
	})
	if err != nil && !errorsIsNotExist(err) {
		t.Fatal(err)
	}
	return files
}

func errorsIsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
