package namespace_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"cellguard/internal/lancedbtest"
	"cellguard/internal/namespace"
)

const tokensFile = `
# role token datasets
worker wtok-a a
worker wtok-all *
reader rtok *
`

func TestParseTokens(t *testing.T) {
	if _, err := namespace.ParseTokens([]byte(tokensFile)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "owner x *", "worker x", "worker x a.b", "worker x *\nreader x *"} {
		if _, err := namespace.ParseTokens([]byte(bad)); !errors.Is(err, namespace.ErrTokens) {
			t.Errorf("ParseTokens(%q) = %v, want ErrTokens", bad, err)
		}
	}
	_, err := namespace.ParseTokens([]byte("worker s3cret-token *\nworker s3cret-token a"))
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %v must not show the token", err)
	}
}

// TestLanceDBAuth: LanceDB's headers carry the token. A worker commits to
// its tables, a reader reads but cannot commit (403, code 15, answered at
// once on every retry), no token is 401 (code 16); nothing is staged for
// a refused request.
func TestLanceDBAuth(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		tokens, err := namespace.ParseTokens([]byte(tokensFile))
		if err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, envOptions{tokens: tokens})
		rows := []map[string]any{{"id": 1}}

		out := runOps(t, v, e, "a", bearer("wtok-a"), map[string]any{"op": "create", "rows": rows}, map[string]any{"op": "add", "rows": rows})
		if out.Results[1].Version != 2 {
			t.Fatalf("worker: %+v", out.Results)
		}
		out = runOps(t, v, e, "b", bearer("wtok-a"), map[string]any{"op": "create", "rows": rows})
		if !strings.Contains(out.Results[0].Error, "403") && !strings.Contains(strings.ToLower(out.Results[0].Error), "permission") {
			t.Errorf("worker of a creating b: %+v", out.Results)
		}
		out = runOps(t, v, e, "a", map[string]string{"x-api-key": "rtok"}, map[string]any{"op": "open"}, map[string]any{"op": "add", "rows": rows})
		if out.Results[0].Error != "" || out.Results[1].Error == "" {
			t.Errorf("reader: %+v", out.Results)
		}
		if js(t, out.Rows) != js(t, []row{{"id": 1}, {"id": 1}}) {
			t.Errorf("reader read %s", js(t, out.Rows))
		}
		out = runOps(t, v, e, "a", nil, map[string]any{"op": "open"})
		if out.Results[0].Error == "" {
			t.Errorf("no token: %+v", out.Results)
		}
		t.Logf("errors seen by LanceDB: no token %q", out.Results[0].Error)
		if n := testutil.ToFloat64(e.ns.Requests("version_create", 403)); n < 1 {
			t.Errorf("reader's commits answered 403 %v times", n)
		}
		if n := testutil.ToFloat64(e.ns.Requests("table_describe", 401)); n < 1 {
			t.Errorf("describe without token answered 401 %v times", n)
		}
		e.checkLog(t, "a", 2)
		if n := e.decisions(t, "b"); n != 0 {
			t.Errorf("%d decisions on b", n)
		}
		status, body := call(t, "POST", e.url+"/v1/table/a/version/list", "null", bearer("nope"))
		if status != 401 || body["code"].(float64) != 16 {
			t.Errorf("unknown token: %d %v", status, body)
		}
	})
}

// TestAuthorizationHeader: the Bearer scheme is matched in any case (RFC
// 7235); another scheme is 401 saying so, not "no credentials"; a reader
// dropping a table is told that drop needs admin.
func TestAuthorizationHeader(t *testing.T) {
	tokens, err := namespace.ParseTokens([]byte(tokensFile + "admin atok *\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envOptions{tokens: tokens})
	list := e.url + "/v1/namespace/%24/table/list?delimiter=%24"
	cases := []struct {
		name   string
		hdr    map[string]string
		status int
		msg    string // in the error, when refused
	}{
		{"Bearer", map[string]string{"Authorization": "Bearer rtok"}, 200, ""},
		{"bearer", map[string]string{"Authorization": "bearer rtok"}, 200, ""},
		{"BEARER", map[string]string{"Authorization": "BEARER  rtok"}, 200, ""},
		{"x-api-key", map[string]string{"x-api-key": "rtok"}, 200, ""},
		{"Basic and x-api-key", map[string]string{"Authorization": "Basic eDp5", "x-api-key": "rtok"}, 200, ""},
		{"none", nil, 401, "no credentials"},
		{"Basic", map[string]string{"Authorization": "Basic eDp5"}, 401, `scheme "Basic" is not supported`},
		{"empty bearer", map[string]string{"Authorization": "Bearer "}, 401, "empty bearer token"},
		{"unknown", map[string]string{"Authorization": "bearer nope"}, 401, "unknown token"},
	}
	for _, c := range cases {
		status, body := call(t, "GET", list, "", c.hdr)
		if status != c.status {
			t.Errorf("%s: %d %v, want %d", c.name, status, body, c.status)
			continue
		}
		if c.msg != "" && (body["code"].(float64) != 16 || !strings.Contains(body["error"].(string), c.msg)) {
			t.Errorf("%s: %v, want code 16 with %q", c.name, body, c.msg)
		}
	}
	status, body := call(t, "POST", e.url+"/v1/table/a/drop", `{"id":["a"]}`, bearer("rtok"))
	if status != 403 || !strings.Contains(body["error"].(string), "needs admin") {
		t.Errorf("reader's drop: %d %v, want 403 saying it needs admin", status, body)
	}
}
