package namespace_test

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"cellguard/internal/lancedbtest"
	"cellguard/internal/namespace"
	"cellguard/proto/cellguardpb"
	"cellguard/table"
)

//go:embed testdata/lifecycle.mjs
var lifecycleJS string

type row = map[string]any

type lifecycleOut struct {
	Steps []struct {
		Op      string `json:"op"`
		Version uint64 `json:"version"`
	} `json:"steps"`
	Versions []uint64 `json:"versions"`
	At       map[string]struct {
		Count int   `json:"count"`
		Rows  []row `json:"rows"`
	} `json:"at"`
	Names []string `json:"names"`
}

// TestLanceDBLifecycle: create, add, update, delete and add a column with
// unmodified LanceDB through the namespace; every version reads back
// with the values each step left.
func TestLanceDBLifecycle(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		e := newEnv(t, envOptions{})
		var out lifecycleOut
		v.Run(t, lancedbtest.Prelude+lifecycleJS, map[string]any{"uri": e.url, "table": "t1"}, &out)
		t.Logf("steps %+v versions %v", out.Steps, out.Versions)
		for i, s := range out.Steps {
			if s.Version != uint64(i+1) {
				t.Errorf("step %s at version %d, want %d", s.Op, s.Version, i+1)
			}
		}
		want := map[uint64][]row{
			1: {{"id": 1, "x": 10}, {"id": 2, "x": 20}, {"id": 3, "x": 30}},
			2: {{"id": 1, "x": 10}, {"id": 2, "x": 20}, {"id": 3, "x": 30}, {"id": 4, "x": 40}, {"id": 5, "x": 50}},
			3: {{"id": 1, "x": 10}, {"id": 2, "x": 200}, {"id": 3, "x": 30}, {"id": 4, "x": 40}, {"id": 5, "x": 50}},
			4: {{"id": 1, "x": 10}, {"id": 2, "x": 200}, {"id": 4, "x": 40}, {"id": 5, "x": 50}},
			5: {{"id": 1, "x": 10, "y": 20}, {"id": 2, "x": 200, "y": 400}, {"id": 4, "x": 40, "y": 80}, {"id": 5, "x": 50, "y": 100}},
		}
		if len(out.Versions) != len(want) {
			t.Fatalf("versions %v, want 1..%d", out.Versions, len(want))
		}
		for v, rows := range want {
			got := out.At[fmt.Sprint(v)]
			if g, w := js(t, got.Rows), js(t, rows); g != w || got.Count != len(rows) {
				t.Errorf("version %d: count %d rows %s, want %s", v, got.Count, g, w)
			}
		}
		if len(out.Names) != 1 || out.Names[0] != "t1" {
			t.Errorf("tableNames %v, want [t1]", out.Names)
		}
		// Every version went through version/create and the committer.
		if n := testutil.ToFloat64(e.ns.Requests("version_create", 200)); n != 5 {
			t.Errorf("%v version/create answered 200, want 5", n)
		}
		e.checkLog(t, "t1", 5)
		// … and they are decisions like any other: counted by the committer
		// and delivered to event subscribers.
		if n := e.committedMetric(t, "t1"); n != 5 {
			t.Errorf("cellguard_committer_decisions_total{dataset=t1,committed} = %v, want 5", n)
		}
		e.checkEvents(t, "t1", 5)
	})
}

func js(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

//go:embed testdata/add.mjs
var addJS string

type addOut struct {
	Errors         []*string `json:"errors"`
	HandleCounts   []int     `json:"handleCounts"`
	HandleVersions []int     `json:"handleVersions"`
	Count          int       `json:"count"`
	Versions       []uint64  `json:"versions"`
	IDs            []int     `json:"ids"`
}

// TestLanceDBConcurrentWriters: two LanceDB writers append concurrently;
// each conflict is a 409 the client rebases on, both succeed, versions
// are contiguous and no row is lost.
func TestLanceDBConcurrentWriters(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		e := newEnv(t, envOptions{})
		var out addOut
		in := map[string]any{"uri": e.url, "table": "c", "create": true, "writers": [][]int{{1, 2, 3, 4}, {11, 12, 13, 14}}}
		v.Run(t, lancedbtest.Prelude+addJS, in, &out)
		for i, err := range out.Errors {
			if err != nil {
				t.Errorf("writer %d: %s", i, *err)
			}
		}
		if want := []int{0, 1, 2, 3, 4, 11, 12, 13, 14}; js(t, out.IDs) != js(t, want) || out.Count != len(want) {
			t.Errorf("rows %v (count %d), want %v", out.IDs, out.Count, want)
		}
		if len(out.Versions) != 9 {
			t.Errorf("versions %v, want 9", out.Versions)
		}
		e.checkLog(t, "c", 9)
		t.Logf("409 answers: %v", testutil.ToFloat64(e.ns.Requests("version_create", 409)))
		// Commits leave no consumer behind: the decision stream holds the
		// long-lived readers' (the publisher's, the committer's) and no more.
		// Reads that each made one, kept by the server for minutes, stopped
		// every write of a busy namespace at the server's limit.
		info, err := e.log.Stream().Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if n := info.State.Consumers; n > 3 {
			t.Errorf("%d consumers on the decision stream after 9 commits, want at most 3", n)
		} else {
			t.Logf("%d consumers on the decision stream after 9 commits", n)
		}
	})
}

// TestLanceDBLostAnswer: the namespace commits an append but its 200 is
// lost (the client sees a 500). The client retries the same transaction
// (same uuid, next version, having taken its own commit for a concurrent
// one) and gets the decision back: the rows are committed once.
//
// Observed (Lance 8): the client accepts the answer but keeps its own
// rebased manifest (the rows twice, at the version it proposed) as the
// handle's state; see docs/design.md. Storage and the log hold the rows
// once, and a fresh handle reads them once.
func TestLanceDBLostAnswer(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		e := newEnv(t, envOptions{})
		p := newProxy(t, e.url)
		var lost atomic.Int32
		p.onAnswer = func(status int, body []byte) (int, []byte) {
			if status == 200 && strings.Contains(string(body), `"version":2,`) && lost.Load() == 0 {
				lost.Add(1)
				return 500, []byte(`{"error":"lost","code":18}`)
			}
			return status, body
		}
		var out addOut
		in := map[string]any{"uri": p.url, "table": "l", "create": true, "writers": [][]int{{1}}, "timeoutMs": 60000}
		v.Run(t, lancedbtest.Prelude+addJS, in, &out)
		for _, a := range p.seen() {
			t.Logf("version/create v%v → %d %s", a.req["version"], a.status, a.body)
		}
		if out.Errors[0] != nil {
			t.Fatalf("writer: %s", *out.Errors[0])
		}
		if lost.Load() != 1 {
			t.Fatal("no answer was lost")
		}
		if want := []int{0, 1}; js(t, out.IDs) != js(t, want) {
			t.Errorf("rows %v, want %v (a row committed twice?)", out.IDs, want)
		}
		e.checkLog(t, "l", 2)
		t.Logf("the writer's handle believes: version %v, %v rows", out.HandleVersions, out.HandleCounts)
	})
}

// TestLanceDBTamperedManifest: the staged manifest is changed between
// staging and version/create. The namespace refuses it naming the
// differing fields; the refusal is staged and decided by the committer
// (a MANIFEST_MISMATCH record in the log, nothing committed), and the
// client's retries of the same transaction are answered from it.
func TestLanceDBTamperedManifest(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		e := newEnv(t, envOptions{})
		p := newProxy(t, e.url)
		var tampered atomic.Int32
		p.onCreate = func(req map[string]any) map[string]any {
			if v, _ := req["version"].(float64); v == 2 && tampered.Load() == 0 {
				tampered.Add(1)
				return tamperManifest(t, req, func(f *table.ManifestFile) {
					frags := f.Manifest.GetFragments()
					frags[len(frags)-1].PhysicalRows += 1000 // claims rows its file lacks
				})
			}
			return req
		}
		var out addOut
		in := map[string]any{"uri": p.url, "table": "m", "create": true, "writers": [][]int{{1}}, "timeoutMs": 15000}
		v.Run(t, lancedbtest.Prelude+addJS, in, &out)
		seen := p.seen()
		if tampered.Load() != 1 || len(seen) < 2 {
			t.Fatalf("tampered %d, %d version/create calls", tampered.Load(), len(seen))
		}
		first := seen[1]
		var body struct {
			Error  string `json:"error"`
			Code   int    `json:"code"`
			Detail string `json:"detail"`
		}
		if err := json.Unmarshal(first.body, &body); err != nil {
			t.Fatal(err)
		}
		t.Logf("refusal: %d %s; %d calls, client error %v", first.status, first.body, len(seen), out.Errors[0])
		if first.status != 400 || body.Code != 13 || !strings.Contains(body.Error, "MANIFEST_MISMATCH") ||
			!strings.Contains(body.Detail, "fragments[id=1]") || strings.Contains(body.Detail, "timestamp") {
			t.Errorf("refusal %d %s, want 400, code 13, MANIFEST_MISMATCH naming fragments[id=1] only", first.status, first.body)
		}
		for _, a := range seen[2:] {
			if a.status != first.status || !bytes.Equal(a.body, first.body) {
				t.Errorf("retry answered %d %s, want the first refusal", a.status, a.body)
			}
		}
		if out.Errors[0] == nil {
			t.Error("the add succeeded")
		}
		if n := testutil.ToFloat64(e.ns.Refusals("m", namespace.ReasonManifestMismatch)); n != 1 {
			t.Errorf("%v manifest mismatches counted, want 1 (retries are answered, not counted)", n)
		}
		if js(t, out.IDs) != js(t, []int{0}) {
			t.Errorf("rows %v, want [0]", out.IDs)
		}
		e.checkLog(t, "m", 1)
		// The refusal is a decision in the log, like any other, made once.
		var refusals []string
		for _, r := range e.records(t, "m") {
			if r.Decision.GetReason() == cellguardpb.Reason_MANIFEST_MISMATCH {
				refusals = append(refusals, r.TxnID+": "+r.Decision.GetMessage())
			}
		}
		if len(refusals) != 1 || !strings.Contains(refusals[0], "fragments[id=1]") {
			t.Errorf("MANIFEST_MISMATCH records %q, want one naming fragments[id=1]", refusals)
		}
		if n := e.decisionMetric(t, "m", "rejected", namespace.ReasonManifestMismatch); n != 1 {
			t.Errorf("cellguard_committer_decisions_total{dataset=m,rejected,MANIFEST_MISMATCH} = %v, want 1", n)
		}
		if r := e.rejectedEvent(t, "m", cellguardpb.Reason_MANIFEST_MISMATCH); !strings.Contains(r.Err.Message, "fragments[id=1]") {
			t.Errorf("events: rejection %v, want the differing fields named", r.Err)
		}
	})
}

// TestLanceDBCreateEmptyTable: createEmptyTable through the namespace
// makes a table in the client's storage version (LanceDB 0.31 writes 2.1,
// 0.39 2.2: the staged manifest says so and no data file tells it), which
// the committer records and replays; the client then adds to it.
func TestLanceDBCreateEmptyTable(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		e := newEnv(t, envOptions{})
		var out struct {
			Version int    `json:"v"`
			Count   int    `json:"count"`
			Err     string `json:"err"`
		}
		v.Run(t, lancedbtest.Prelude+`
const input = JSON.parse(await readStdin());
const db = await lancedb.connectNamespace("rest", { uri: input.uri });
const schema = new arrow.Schema([new arrow.Field("id", new arrow.Int64(), true)]);
const r = {};
try {
  const timeout = new Promise((_, rej) => setTimeout(() => rej(new Error("TIMEOUT")), 15000));
  const tbl = await Promise.race([db.createEmptyTable("e", schema), timeout]);
  r.v = Number(await tbl.version());
  await Promise.race([tbl.add([{ id: 1n }]), timeout]);
  r.count = await tbl.countRows();
} catch (e) { r.err = String(e.message ?? e); }
process.stdout.write(JSON.stringify(r));
process.exit(0);
`, map[string]any{"uri": e.url}, &out)
		if out.Err != "" || out.Version != 1 || out.Count != 1 {
			t.Fatalf("createEmptyTable and add: %+v", out)
		}
		want := map[string]string{"lance8": "2.1", "lance12": "2.2"}[v.Name]
		m, _, err := e.log.Load(t.Context(), "e", 1, e.log.Versions("e"))
		if err != nil {
			t.Fatal(err)
		}
		if got := m.DataFormat().GetVersion(); got != want {
			t.Errorf("version 1 replayed with storage version %q, want %q", got, want)
		}
		cfg, err := e.log.Config(t.Context(), "e")
		if err != nil || cfg.GetStorageVersion() != want {
			t.Errorf("recorded config %v, %v; want storage version %q", cfg, err, want)
		}
		e.checkLog(t, "e", 2)
	})
}
