package namespace_test

import (
	"context"
	_ "embed"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"cellguard/internal/lancedbtest"
	"cellguard/internal/namespace"
	"cellguard/table"
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
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		tokens, err := namespace.ParseTokens([]byte(dropTokens))
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, envOptions{tokens: tokens, admin: true})
		var out dropOut
		in := map[string]any{"uri": e.url, "table": "d", "writer": bearer("wtok"), "admin": bearer("atok")}
		v.Run(t, lancedbtest.Prelude+dropJS, in, &out)
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
	})
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

// TestDroppedTable: after an admin drops a created table over HTTP (a
// reader's or worker's drop is 403 code 15), every route answers as for
// a dropped table — reads "not found" (404 code 4), declare and
// version/create 409 code 19 naming DATASET_DELETED, refused before
// anything is staged — on this server and on a fresh one that never saw
// the drop; table/list omits it and still lists the other table.
func TestDroppedTable(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		tokens, err := namespace.ParseTokens([]byte(dropTokens + "reader rtok *\n"))
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, envOptions{tokens: tokens, admin: true})
		for _, ds := range []string{"gone", "kept"} {
			out := runOps(t, v, e, ds, bearer("wtok"), map[string]any{"op": "create", "rows": []map[string]any{{"id": 1}}})
			if out.Results[0].Version != 1 {
				t.Fatalf("create %s: %+v", ds, out.Results)
			}
		}
		for _, tok := range []string{"rtok", "wtok"} {
			if status, body := call(t, "POST", e.url+"/v1/table/gone/drop", `{"id":["gone"]}`, bearer(tok)); status != 403 || body["code"].(float64) != 15 {
				t.Errorf("drop with %s: %d %v, want 403 code 15", tok, status, body)
			}
		}
		status, body := call(t, "POST", e.url+"/v1/table/gone/drop", `{"id":["gone"]}`, bearer("atok"))
		if status != 200 || body["location"] != filepath.Join(e.root, "gone.lance") {
			t.Fatalf("admin's drop: %d %v", status, body)
		}
		records := e.decisions(t, "gone")
		if records != 2 {
			t.Errorf("%d records of gone, want the commit and the tombstone", records)
		}

		// A second server on the same log has no memory of the drop.
		fresh, err := namespace.New(namespace.Config{Log: e.log, JetStream: e.js, LanceRoot: e.root, Tokens: tokens})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(fresh.Close)
		hs := httptest.NewServer(fresh)
		t.Cleanup(hs.Close)

		manifest := strings.TrimPrefix(e.root, "/") + "/gone.lance/_versions/" + table.ManifestFileName(2, true) + "-x"
		cases := []struct {
			path, body   string
			status, code int
		}{
			{"/v1/table/gone/describe", `{"id":["gone"]}`, 404, 4},
			{"/v1/table/gone/exists", `{"id":["gone"]}`, 404, 4},
			{"/v1/table/gone/version/list", `null`, 404, 4},
			{"/v1/table/gone/version/describe", `{"id":["gone"],"version":1}`, 404, 4},
			{"/v1/table/gone/drop", `{"id":["gone"]}`, 404, 4},
			{"/v1/table/gone/declare", `{"id":["gone"]}`, 409, 19},
			{"/v1/table/gone/version/create", `{"id":["gone"],"version":2,"manifest_path":"` + manifest + `","naming_scheme":"V2"}`, 409, 19},
		}
		for _, url := range []string{e.url, hs.URL} {
			for _, c := range cases {
				status, body := call(t, "POST", url+c.path, c.body, bearer("atok"))
				if status != c.status || body == nil || int(body["code"].(float64)) != c.code {
					t.Errorf("%s: %d %v, want %d code %d", c.path, status, body, c.status, c.code)
				} else if c.code == 19 && !strings.Contains(body["error"].(string), namespace.ReasonDatasetDeleted) {
					t.Errorf("%s: %v, want DATASET_DELETED named", c.path, body)
				}
			}
			status, body := call(t, "GET", url+"/v1/namespace/%24/table/list", "", bearer("rtok"))
			if status != 200 || js(t, body["tables"]) != `["kept"]` {
				t.Errorf("table/list: %d %v, want [kept]", status, body)
			}
		}
		// Without an admin connection a created table is not dropped.
		if status, body := call(t, "POST", hs.URL+"/v1/table/kept/drop", `{"id":["kept"]}`, bearer("atok")); status != 406 || body["code"].(float64) != 0 {
			t.Errorf("drop on a server without an admin connection: %d %v, want 406 code 0", status, body)
		}
		if _, ok, err := e.log.Tombstone(t.Context(), "kept"); err != nil || ok {
			t.Errorf("kept has a tombstone (%v, %v)", ok, err)
		}
		if n := e.decisions(t, "gone"); n != records {
			t.Errorf("%d records of gone after the refused requests, want %d: something was staged", n, records)
		}
	})
}

// TestDropBusyTable: a drop waits for a version/create in progress on
// the table (it holds the table's commit lock); if it still runs after
// Config.DropWait the drop answers 409 code 19 and drops nothing. Once
// the commit is done, the drop succeeds.
func TestDropBusyTable(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		tokens, err := namespace.ParseTokens([]byte(dropTokens))
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, envOptions{tokens: tokens, admin: true, dropWait: 200 * time.Millisecond})
		out := runOps(t, v, e, "b", bearer("wtok"), map[string]any{"op": "create", "rows": []map[string]any{{"id": 1, "x": 10}}})
		if out.Results[0].Version != 1 {
			t.Fatalf("create: %+v", out.Results)
		}
		txn, err := sdkAppend(t, e, "b", 1, 2, 20).Proto()
		if err != nil {
			t.Fatal(err)
		}
		req := stageManifest(t, e, "b", txn, 2)
		entered, release := make(chan struct{}), make(chan struct{})
		e.ns.SetBeforeStage(func(ctx context.Context, ds string) {
			close(entered)
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
		t.Cleanup(func() { e.ns.SetBeforeStage(nil) })
		committed := make(chan int, 1)
		go func() {
			hr, err := http.NewRequest("POST", e.url+"/v1/table/b/version/create", strings.NewReader(req))
			if err != nil {
				committed <- 0
				return
			}
			hr.Header.Set("Authorization", "Bearer wtok")
			resp, err := http.DefaultClient.Do(hr)
			if err != nil {
				committed <- 0
				return
			}
			resp.Body.Close()
			committed <- resp.StatusCode
		}()
		<-entered

		status, body := call(t, "POST", e.url+"/v1/table/b/drop", `{"id":["b"]}`, bearer("atok"))
		if status != 409 || body["code"].(float64) != 19 || !strings.Contains(body["error"].(string), "busy") {
			t.Errorf("drop during a version/create: %d %v, want 409 code 19 busy", status, body)
		}
		if _, ok, err := e.log.Tombstone(t.Context(), "b"); err != nil || ok {
			t.Fatalf("a busy drop wrote a tombstone (%v, %v)", ok, err)
		}
		close(release)
		if status := <-committed; status != 200 {
			t.Fatalf("the version/create the drop waited for: %d", status)
		}
		e.ns.SetBeforeStage(nil)
		if status, body := call(t, "POST", e.url+"/v1/table/b/drop", `{"id":["b"]}`, bearer("atok")); status != 200 {
			t.Fatalf("drop once the commit is done: %d %v", status, body)
		}
		if ts, ok, err := e.log.Tombstone(t.Context(), "b"); err != nil || !ok || ts.Decision.GetHeadVersion() != 2 {
			t.Errorf("tombstone %v %v %v, want one at head version 2", ts.Decision, ok, err)
		}
	})
}
