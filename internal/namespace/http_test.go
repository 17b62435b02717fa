package namespace_test

import (
	"cellguard/internal/lancedbtest"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// call sends a request to the namespace and decodes its JSON answer.
func call(t *testing.T, method, url, body string, hdr map[string]string) (int, map[string]any) {
	t.Helper()
	return callCtx(t, t.Context(), method, url, body, hdr)
}

// callCtx is call bounded by ctx.
func callCtx(t *testing.T, ctx context.Context, method, url, body string, hdr map[string]string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s %s: answer is not JSON: %s", method, url, b)
		}
	}
	return resp.StatusCode, out
}

// TestErrors: refused requests get the spec's error body and status, and
// nothing is staged for them.
func TestErrors(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		e := newEnv(t, envOptions{})
		out := runOps(t, v, e, "t", nil, map[string]any{"op": "create", "rows": []map[string]any{{"id": 1}}})
		if out.Results[0].Version != 1 {
			t.Fatalf("create: %+v", out.Results)
		}
		before := e.decisions(t, "t")
		loc := strings.TrimPrefix(e.root, "/") + "/t.lance/_versions/"
		big := `{"id":["t"],"pad":"` + strings.Repeat("x", 2<<20) + `"}`
		cases := []struct {
			name, method, path, body string
			status, code             int
		}{
			{"malformed JSON", "POST", "/v1/table/t/version/create", `{"version":`, 400, 13},
			{"body and path ids differ", "POST", "/v1/table/t/describe", `{"id":["u"]}`, 400, 13},
			{"bad table name", "POST", "/v1/table/a.b/describe", `{}`, 400, 13},
			{"nested namespace", "POST", "/v1/table/ns%24t/describe", `{}`, 404, 1},
			{"unknown table", "POST", "/v1/table/nope/describe", `{"id":["nope"]}`, 404, 4},
			{"unknown table versions", "POST", "/v1/table/nope/version/list", `null`, 404, 4},
			{"version far in the future", "POST", "/v1/table/t/version/describe", `{"id":["t"],"version":99}`, 404, 11},
			{"version 0", "POST", "/v1/table/t/version/describe", `{"id":["t"],"version":0}`, 404, 11},
			{"create far in the future", "POST", "/v1/table/t/version/create",
				`{"id":["t"],"version":50,"manifest_path":"` + loc + `18446744073709551565.manifest-x","naming_scheme":"V2"}`, 400, 13},
			{"create a taken version", "POST", "/v1/table/t/version/create",
				`{"id":["t"],"version":1,"manifest_path":"` + loc + `18446744073709551614.manifest-x","naming_scheme":"V2"}`, 400, 13},
			{"manifest outside the table", "POST", "/v1/table/t/version/create",
				`{"id":["t"],"version":2,"manifest_path":"etc/passwd","naming_scheme":"V2"}`, 400, 13},
			{"manifest of another version", "POST", "/v1/table/t/version/create",
				`{"id":["t"],"version":2,"manifest_path":"` + loc + `18446744073709551614.manifest-x","naming_scheme":"V2"}`, 400, 13},
			{"V1 naming", "POST", "/v1/table/t/version/create",
				`{"id":["t"],"version":2,"manifest_path":"` + loc + `2.manifest-x","naming_scheme":"V1"}`, 406, 0},
			{"declare an existing table", "POST", "/v1/table/t/declare", `{"id":["t"]}`, 409, 5},
			{"drop a created table without tokens", "POST", "/v1/table/t/drop", `{"id":["t"]}`, 403, 15},
			{"body over the limit", "POST", "/v1/table/t/describe", big, 413, 13},
			{"unknown route", "GET", "/v2/whatever", ``, 404, 0},
			{"negative limit in the body", "POST", "/v1/table/t/version/list", `{"id":["t"],"limit":-1}`, 400, 13},
			{"negative limit in the query", "POST", "/v1/table/t/version/list?limit=-1", `null`, 400, 13},
			{"page_token not ours in the body", "POST", "/v1/table/t/version/list", `{"id":["t"],"page_token":"abc"}`, 400, 13},
			{"page_token not ours in the query", "POST", "/v1/table/t/version/list?page_token=abc", ``, 400, 13},
			{"limit not a number", "POST", "/v1/table/t/version/list", `{"id":["t"],"limit":"x"}`, 400, 13},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				status, body := call(t, c.method, e.url+c.path, c.body, nil)
				if status != c.status || body == nil || int(body["code"].(float64)) != c.code || body["error"] == "" {
					t.Errorf("%s %s: %d %v, want %d with code %d", c.method, c.path, status, body, c.status, c.code)
				}
			})
		}
		for _, ds := range []string{"nope", "u"} {
			if _, err := os.Stat(filepath.Join(e.root, ds+".lance")); !os.IsNotExist(err) {
				t.Errorf("a read of unknown table %s created its directory (%v)", ds, err)
			}
		}
		if after := e.decisions(t, "t"); after != before {
			t.Errorf("decision log moved from %d to %d records: something was staged", before, after)
		}
	})
}

// decisions counts the decision records of ds.
func (e *env) decisions(t *testing.T, ds string) uint64 {
	t.Helper()
	info, err := e.log.Stream().Info(t.Context(), jetstream.WithSubjectFilter(e.log.Scheme().DecOf(ds)))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

// TestDeclareCreatesNothing: declaring a table names its location but
// creates nothing in storage, so a declaration that is dropped (or never
// committed) leaves no empty directory behind.
func TestDeclareCreatesNothing(t *testing.T) {
	e := newEnv(t, envOptions{})
	dir := filepath.Join(e.root, "d.lance")
	status, body := call(t, "POST", e.url+"/v1/table/d/declare", `{"id":["d"]}`, nil)
	if status != 200 || body["location"] != dir {
		t.Fatalf("declare: %d %v, want 200 at %s", status, body, dir)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("declare created %s (%v)", dir, err)
	}
	if status, body := call(t, "POST", e.url+"/v1/table/d/describe", `{"id":["d"]}`, nil); status != 200 || body["is_only_declared"] != true {
		t.Errorf("describe of the declared table: %d %v", status, body)
	}
	if status, body := call(t, "POST", e.url+"/v1/table/d/drop", `{"id":["d"]}`, nil); status != 200 {
		t.Errorf("drop of the declared table: %d %v", status, body)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("after the drop, %s is there (%v)", dir, err)
	}
}

// TestNATSOutageIsUnavailable: while NATS is down, a request that needs
// the decision log is 503 code 17 (retry later), not 500 code 18; when
// NATS is back, it is answered again.
func TestNATSOutageIsUnavailable(t *testing.T) {
	e := newEnv(t, envOptions{})
	if status, body := call(t, "POST", e.url+"/v1/table/o/describe", `{"id":["o"]}`, nil); status != 404 {
		t.Fatalf("describe before the outage: %d %v, want 404", status, body)
	}
	e.nats.Stop()
	status, body := call(t, "POST", e.url+"/v1/table/o/describe", `{"id":["o"]}`, nil)
	if status != 503 || body == nil || body["code"].(float64) != 17 {
		t.Errorf("describe during the outage: %d %v, want 503 code 17", status, body)
	}
	e.nats.Restart(t)
	waitFor(t, "describe after the outage", func() bool {
		status, _ := call(t, "POST", e.url+"/v1/table/o/describe", `{"id":["o"]}`, nil)
		return status == 404
	})
}
