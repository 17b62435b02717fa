package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"cellguard/internal/declog"
	"cellguard/internal/lancedbtest"
	"cellguard/internal/namespace"
	"cellguard/internal/natstest"
	"cellguard/internal/subject"
)

// TestServeLanceNamespace runs `serve --lance-root R --lance-namespace
// 127.0.0.1:0 --namespace-tokens F` and drives it with unmodified
// LanceDB: a worker token creates and appends, a reader token reads, an
// admin token drops the table (through the embedded server's admin
// user). The tokens never appear in serve's output.
func TestServeLanceNamespace(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, judge lancedbtest.Version) {
		dir := t.TempDir()
		tokens := filepath.Join(dir, "tokens")
		if err := os.WriteFile(tokens, []byte("worker wtok-secret-1 *\nreader rtok-secret-2 *\nadmin atok-secret-3 *\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, out := process(t, "serve", "--data-dir", filepath.Join(dir, "data"), "--nats-port", "-1", "--http", "",
			"--log-level", "debug", "--lance-root", filepath.Join(dir, "lance"),
			"--lance-namespace", "127.0.0.1:0", "--namespace-tokens", tokens)
		var addr string
		deadline := time.Now().Add(2 * time.Minute)
		for addr == "" {
			for _, line := range strings.Split(out.String(), "\n") {
				if i := strings.Index(line, "addr="); i >= 0 && strings.Contains(line, "lance namespace listening") {
					addr = strings.Fields(line[i+5:])[0]
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("serve did not report the namespace address:\n%s", out)
			}
			time.Sleep(20 * time.Millisecond)
		}
		const script = `
	const input = JSON.parse(await readStdin());
	const conn = (tok) => lancedb.connectNamespace("rest", { uri: input.uri, headers: { Authorization: "Bearer " + tok } });
	const w = await (await conn("wtok-secret-1")).createTable("events", [{ id: 1 }]);
	await w.add([{ id: 2 }]);
	const r = await (await conn("rtok-secret-2")).openTable("events");
	const ids = (await r.query().toArray()).map((x) => Number(x.id)).sort();
	let denied = null;
	try { await (await conn("wrong")).openTable("events"); } catch (e) { denied = String(e.message); }
	const version = Number(await r.version());
	const admin = await conn("atok-secret-3");
	await admin.dropTable("events");
	const names = await admin.tableNames();
	process.stdout.write(JSON.stringify({ ids, version, denied, names }));
	`
		var res struct {
			IDs     []int    `json:"ids"`
			Version int      `json:"version"`
			Denied  *string  `json:"denied"`
			Names   []string `json:"names"`
		}
		judge.Run(t, lancedbtest.Prelude+script, map[string]any{"uri": "http://" + addr}, &res)
		if len(res.IDs) != 2 || res.IDs[0] != 1 || res.IDs[1] != 2 || res.Version != 2 {
			t.Errorf("read %+v, want ids [1 2] at version 2", res)
		}
		if res.Names == nil || len(res.Names) != 0 {
			t.Errorf("tables after the admin's drop: %v, want none", res.Names)
		}
		if res.Denied == nil || !strings.Contains(*res.Denied, "Unauthenticated") {
			t.Errorf("wrong token: %v", res.Denied)
		}
		if s := out.String(); strings.Contains(s, "secret") {
			t.Errorf("serve logged a token:\n%s", s)
		}
	})
}

// TestServeLanceNamespaceFlags: the namespace needs a lance root and
// publishing; tokens need the namespace; a bad tokens file is refused.
func TestServeLanceNamespaceFlags(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("owner tok *\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"serve", "--data-dir", filepath.Join(dir, "data"), "--nats-port", "-1", "--http", ""}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--lance-namespace", "127.0.0.1:0"}, "needs --lance-root"},
		{[]string{"--lance-namespace", "127.0.0.1:0", "--lance-root", dir, "--publish=false"}, "needs --publish"},
		{[]string{"--namespace-tokens", bad}, "need --lance-namespace"},
		{[]string{"--namespace-admin-creds", bad}, "need --lance-namespace"},
		{[]string{"--lance-namespace", "127.0.0.1:0", "--lance-root", dir, "--namespace-tokens", bad}, "bad tokens file"},
	} {
		var b bytes.Buffer
		err := runCLI(t, &b, append(base, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error with %q", c.args, err, c.want)
		}
	}
}

// TestNamespaceDropRoles: against the shipped role model, the namespace
// drops a created table only as an admin NATS user. With a worker's
// credentials as --namespace-admin-creds, NATS refuses the tombstone and
// the drop is answered 500 code 18 naming the admin connection, nothing
// written; with the admin's, the table is dropped.
func TestNamespaceDropRoles(t *testing.T) {
	roles := natstest.RunWithAccounts(t, "../../deploy/nats/accounts.conf")
	runCommitter(t, roles)
	dir := t.TempDir()
	if _, err := cliOut(t, roles, "admin", "dataset", "create", "orders", "--schema", "id:int64", "--location", filepath.Join(dir, "orders.lance")); err != nil {
		t.Fatal(err)
	}
	tokens, err := namespace.ParseTokens([]byte("admin atok *\n"))
	if err != nil {
		t.Fatal(err)
	}
	cf := connFlags{url: roles.Server.ClientURL()}
	serveNS := func(adminCreds string) string {
		workerCreds := roles.Keys["worker"].SeedFile
		conns, err := connectNamespace(namespaceFlags{creds: &workerCreds, adminCreds: &adminCreds}, cf, namespaceCreds{})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer conns.close()
			_ = runNamespace(ctx, ln, dir, tokens, conns, "", prometheus.NewRegistry(), tailLogger())
		}()
		t.Cleanup(func() {
			cancel()
			<-done
		})
		return "http://" + ln.Addr().String()
	}
	drop := func(url string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), "POST", url+"/v1/table/orders/drop", strings.NewReader(`{"id":["orders"]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer atok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	_, ajs := natstest.Connect(t, roles.Server.ClientURL(), roles.Auth(t, "admin"))
	l, err := declog.Open(t.Context(), ajs, subject.Scheme{}, declog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if status, body := drop(serveNS(roles.Keys["worker"].SeedFile)); status != 500 || !strings.Contains(body, `"code":18`) || !strings.Contains(body, "admin NATS connection") {
		t.Errorf("drop with a worker as the admin connection: %d %s, want 500 code 18 naming the admin connection", status, body)
	}
	if _, ok, err := l.Tombstone(t.Context(), "orders"); err != nil || ok {
		t.Fatalf("tombstone after the refused drop: %v %v", ok, err)
	}
	if status, body := drop(serveNS(roles.Keys["admin"].SeedFile)); status != 200 {
		t.Fatalf("drop as the admin: %d %s", status, body)
	}
	if _, ok, err := l.Tombstone(t.Context(), "orders"); err != nil || !ok {
		t.Errorf("no tombstone after the admin's drop: %v %v", ok, err)
	}
}

// TestServeRefusesBadFlagsBeforeStarting: a bad committer flag is a
// usage error, reported before the embedded server starts: no data
// directory (with its credentials) is left behind, and a bad flag is
// named even when the NATS URL given is unreachable.
func TestServeRefusesBadFlagsBeforeStarting(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--data-dir", data, "--nats-port", "-1", "--http", "", "--deletion-policy", "bogus"}, "bogus"},
		{[]string{"--data-dir", data, "--nats-port", "-1", "--http", "", "--memory-limit", "lots"}, "--memory-limit"},
		{[]string{"--nats-url", "nats://127.0.0.1:1", "--http", "", "--batch", "-1"}, "BatchSize"},
	} {
		var b bytes.Buffer
		err := runCLI(t, &b, append([]string{"serve"}, c.args...)...)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %v: %v, want a usage error naming %q", c.args, err, c.want)
		}
		if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("serve %v left %s behind (%v)", c.args, data, err)
		}
	}
}

// TestNamespaceExposureWarning: serve says when the namespace listens
// beyond loopback, and loudest when it also has no tokens.
func TestNamespaceExposureWarning(t *testing.T) {
	cases := []struct {
		addr  string
		auth  bool
		scope string
		warn  string // in the warning; "" for none
	}{
		{"127.0.0.1:1", true, "loopback", ""},
		{"[::1]:1", false, "loopback", "without authentication (no --namespace-tokens), on loopback only"},
		{"0.0.0.0:1", false, "all interfaces", "without authentication on all interfaces"},
		{"[::]:1", false, "all interfaces", "without authentication on all interfaces"},
		{"10.1.2.3:1", false, "non-loopback address 10.1.2.3", "without authentication on non-loopback address 10.1.2.3"},
		{"0.0.0.0:1", true, "all interfaces", "listens on all interfaces over plain HTTP"},
	}
	for _, c := range cases {
		a, err := net.ResolveTCPAddr("tcp", c.addr)
		if err != nil {
			t.Fatal(err)
		}
		scope := listenScope(a)
		if scope != c.scope {
			t.Errorf("listenScope(%s) = %q; want %q", c.addr, scope, c.scope)
		}
		w := namespaceWarning(scope, c.auth)
		if (c.warn == "") != (w == "") || !strings.Contains(w, c.warn) {
			t.Errorf("namespaceWarning(%q, auth %v) = %q; want it to say %q", scope, c.auth, w, c.warn)
		}
	}
}
