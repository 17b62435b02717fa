package namespace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/declog"
	"cellguard/internal/lancedbtest"
	"cellguard/internal/subject"
	"cellguard/producer"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// schemaOf returns the field ids by name of a snapshot's schema and the
// Arrow fields (float64, as LanceDB makes JS numbers) to write files with.
func schemaOf(s *producer.Snapshot) (map[string]int32, []arrow.Field) {
	ids := map[string]int32{}
	var fields []arrow.Field
	for _, f := range s.Manifest().Schema().Fields() {
		ids[f.GetName()] = f.GetId()
		fields = append(fields, arrow.Field{Name: f.GetName(), Type: arrow.PrimitiveTypes.Float64, Nullable: true})
	}
	return ids, fields
}

// sdkAppend is a Go SDK worker's append of one row (id, x) to ds, read at
// version rv, its data written as a real Lance file in the table.
func sdkAppend(t *testing.T, e *env, ds string, rv uint64, id, x float64) *producer.Txn {
	t.Helper()
	snap, err := e.pc.At(t.Context(), ds, rv)
	if err != nil {
		t.Fatal(err)
	}
	ids, fields := schemaOf(snap)
	df := writeLanceRecord(t, filepath.Join(e.root, ds+".lance"), fields, [][]float64{{id}, {x}}, []int32{ids["id"], ids["x"]})
	return snap.NewTxn().Append(&lancepb.DataFragment{Files: []*lancepb.DataFile{df}, PhysicalRows: 1})
}

// stageManifest writes what a Lance client stages for txn proposed as
// version v: the manifest table.Apply makes of txn on the current head,
// with txn inline, under `_versions/{u64::MAX − v}.manifest-{uuid}`, and
// returns the version/create request.
func stageManifest(t *testing.T, e *env, ds string, txn *lancepb.Transaction, v uint64) string {
	t.Helper()
	head, err := e.pc.Latest(t.Context(), ds)
	if err != nil {
		t.Fatal(err)
	}
	rebased := proto.CloneOf(txn)
	rebased.ReadVersion = head.Version()
	want, err := table.Apply(t.Context(), head.Manifest(), rebased, nil)
	if err != nil {
		t.Fatal(err)
	}
	mp := want.Proto()
	mp.Version = v
	b, err := table.WriteManifestFile(&table.ManifestFile{Manifest: mp, Transaction: txn})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.root, ds+".lance", "_versions", table.ManifestFileName(v, true)+"-"+uuid.NewString())
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`{"id":[%q],"version":%d,"manifest_path":%q,"manifest_size":%d,"naming_scheme":"V2"}`,
		ds, v, strings.TrimPrefix(path, "/"), len(b))
}

// records returns the decision log of ds.
func (e *env) records(t *testing.T, ds string) []declog.Record {
	t.Helper()
	var out []declog.Record
	for r, err := range e.log.Scan(t.Context(), e.log.Scheme().DecOf(ds), 1, declog.ScanOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// commitOnce makes the namespace's next version/create on ds wait, after
// its checks and before staging, for the worker's commit of txn: the
// version the client proposed is taken in between.
func commitOnce(t *testing.T, e *env, ds string, txn *producer.Txn) func() (uint64, error) {
	var once sync.Once
	var v uint64
	var err error
	e.ns.SetBeforeStage(func(ctx context.Context, table string) {
		if table == ds {
			once.Do(func() { v, err = e.pc.Commit(ctx, txn) })
		}
	})
	t.Cleanup(func() { e.ns.SetBeforeStage(nil) })
	return func() (uint64, error) {
		e.ns.SetBeforeStage(nil)
		return v, err
	}
}

// TestVersionMovedRetryCommits: a client proposes version 2; between the
// namespace's check and the committer's decision a Go SDK worker commits
// version 2. The committer does not commit the client's transaction as
// version 3 behind its back: it rejects the attempt VERSION_MOVED (409
// code 14, the client rebases). The same transaction proposed as version
// 3 then commits — the rejection decided the attempt, not the uuid — and
// a further retry of it (version 4) is answered from its decision: the
// uuid commits once.
func TestVersionMovedRetryCommits(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		e := newEnv(t, envOptions{})
		out := runOps(t, v, e, "r", nil, map[string]any{"op": "create", "rows": []map[string]any{{"id": 1, "x": 10}}})
		if out.Results[0].Version != 1 {
			t.Fatalf("create: %+v", out.Results)
		}
		client, err := sdkAppend(t, e, "r", 1, 2, 20).Proto()
		if err != nil {
			t.Fatal(err)
		}
		id := client.GetUuid()
		done := commitOnce(t, e, "r", sdkAppend(t, e, "r", 1, 3, 30))

		status, body := call(t, "POST", e.url+"/v1/table/r/version/create", stageManifest(t, e, "r", client, 2), nil)
		if v, err := done(); err != nil || v != 2 {
			t.Fatalf("the worker's commit in between: version %d, %v", v, err)
		}
		if status != 409 || body["code"].(float64) != 14 || !strings.Contains(body["error"].(string), "VERSION_MOVED") {
			t.Fatalf("version/create 2 after a worker took it: %d %v, want 409 code 14 VERSION_MOVED", status, body)
		}
		recs := e.records(t, "r")
		if last := recs[len(recs)-1]; last.TxnID != id+"@2" || last.Decision.GetReason() != cellguardpb.Reason_VERSION_MOVED {
			t.Fatalf("last record %q %v, want %s@2 VERSION_MOVED", last.TxnID, last.Decision.GetReason(), id)
		}

		status, body = call(t, "POST", e.url+"/v1/table/r/version/create", stageManifest(t, e, "r", client, 3), nil)
		if got := versionOf(body); status != 200 || got != 3 {
			t.Fatalf("the same transaction proposed as version 3: %d %v, want 200 version 3", status, body)
		}
		decided := e.decisions(t, "r")
		status, body = call(t, "POST", e.url+"/v1/table/r/version/create", stageManifest(t, e, "r", client, 4), nil)
		if got := versionOf(body); status != 200 || got != 3 {
			t.Errorf("a retry of the committed transaction: %d %v, want 200 version 3 (its decision)", status, body)
		}
		if n := e.decisions(t, "r"); n != decided {
			t.Errorf("the retry made %d decisions, want none", n-decided)
		}
		e.checkLog(t, "r", 3)
		var commits int
		for _, r := range e.records(t, "r") {
			if r.TxnID == id && r.Committed() {
				commits++
			}
		}
		if commits != 1 {
			t.Errorf("transaction %s committed %d times, want once", id, commits)
		}
	})
}

// TestAttemptOfCommittedTransaction: two namespace servers stage
// attempts of one transaction (a client retrying on another server after
// a lost answer). The other server's attempt commits first, while this
// server's is past its lookup; this server's attempt is then acked
// undecided by the committer (the uuid is decided), and the answer is
// the first attempt's decision: committed once.
func TestAttemptOfCommittedTransaction(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		e := newEnv(t, envOptions{})
		out := runOps(t, v, e, "s", nil, map[string]any{"op": "create", "rows": []map[string]any{{"id": 1, "x": 10}}})
		if out.Results[0].Version != 1 {
			t.Fatalf("create: %+v", out.Results)
		}
		client, err := sdkAppend(t, e, "s", 1, 2, 20).Proto()
		if err != nil {
			t.Fatal(err)
		}
		body, err := proto.Marshal(client)
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(e.pc.Conn())
		if err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		e.ns.SetBeforeStage(func(ctx context.Context, _ string) {
			once.Do(func() {
				m := nats.NewMsg(e.log.Scheme().Txn("s"))
				m.Data = body
				m.Header.Set(subject.HdrProposedVersion, "2")
				if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID("other-server-attempt")); err != nil {
					t.Errorf("stage the other attempt: %v", err)
					return
				}
				waitFor(t, "the other attempt's decision", func() bool {
					r, ok, err := e.log.Find(ctx, "s", client.GetUuid(), 1)
					return err == nil && ok && r.Committed()
				})
			})
		})
		t.Cleanup(func() { e.ns.SetBeforeStage(nil) })
		decided := e.decisions(t, "s")
		status, answer := call(t, "POST", e.url+"/v1/table/s/version/create", stageManifest(t, e, "s", client, 2), nil)
		if status != 200 || versionOf(answer) != 2 {
			t.Fatalf("this server's attempt: %d %v, want 200 version 2 (the other attempt's decision)", status, answer)
		}
		if n := e.decisions(t, "s"); n != decided+1 {
			t.Errorf("%d decisions for two attempts of one transaction, want 1", n-decided)
		}
		e.checkLog(t, "s", 2)
	})
}

// TestLanceDBVersionMoved: an unmodified LanceDB client appends through
// the namespace, and a Go SDK worker's append commits the version it
// proposed between the namespace's check and the committer's decision.
// The client gets 409 code 14, rebases on the worker's version in
// storage, proposes the next version with the same transaction, and
// commits: both rows are in the table once, and the log shows the moved
// attempt and the client's one commit.
func TestLanceDBVersionMoved(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		e := newEnv(t, envOptions{})
		out := runOps(t, v, e, "q", nil, map[string]any{"op": "create", "rows": []map[string]any{{"id": 1, "x": 10}}})
		if out.Results[0].Version != 1 {
			t.Fatalf("create: %+v", out.Results)
		}
		done := commitOnce(t, e, "q", sdkAppend(t, e, "q", 1, 3, 30))
		out = runOps(t, v, e, "q", nil, map[string]any{"op": "open"}, map[string]any{"op": "add", "rows": []map[string]any{{"id": 2, "x": 20}}})
		if v, err := done(); err != nil || v != 2 {
			t.Fatalf("the worker's commit in between: version %d, %v", v, err)
		}
		if len(out.Results) != 2 || out.Results[1].Error != "" || out.Results[1].Version != 3 {
			t.Fatalf("LanceDB add: %+v, want version 3", out.Results)
		}
		if got, want := js(t, out.Rows), js(t, []row{{"id": 1, "x": 10}, {"id": 2, "x": 20}, {"id": 3, "x": 30}}); got != want {
			t.Errorf("rows %s, want %s", got, want)
		}
		e.checkLog(t, "q", 3)
		recs := e.records(t, "q")
		last := recs[len(recs)-1]
		var moved []string
		for _, r := range recs {
			if r.Decision.GetReason() == cellguardpb.Reason_VERSION_MOVED {
				moved = append(moved, r.TxnID)
			}
		}
		if want := last.TxnID + "@2"; len(moved) != 1 || moved[0] != want {
			t.Errorf("VERSION_MOVED records %q, want [%s]", moved, want)
		}
		// One 409 is the moved attempt; more (refused before staging) only if
		// the client listed storage before the worker's version was in it.
		if n := testutil.ToFloat64(e.ns.Requests("version_create", 409)); n < 1 {
			t.Errorf("%v version/create answered 409, want the moved attempt's", n)
		}
	})
}

// versionOf reads the committed version from a version/create answer.
func versionOf(body map[string]any) uint64 {
	v, _ := body["version"].(map[string]any)
	f, _ := v["version"].(float64)
	return uint64(f)
}

// TestRefusedTransactionRetriedFromLaterVersion: a client's transaction is
// refused (MANIFEST_MISMATCH, final, under its uuid); the client then
// rebases the same transaction onto a later version and proposes it again,
// as LanceDB does after any error. The later read version puts the refusal
// before where the namespace looks for the uuid, and the committer acks
// the new attempt undecided (the uuid is decided). The answer is the
// refusal, at once, and the table's commit lock is free for the next
// writer: no version/create waits on a decision that will never come.
func TestRefusedTransactionRetriedFromLaterVersion(t *testing.T) {
	lancedbtest.Each(t, func(t *testing.T, v lancedbtest.Version) {
		e := newEnv(t, envOptions{})
		out := runOps(t, v, e, "q", nil, map[string]any{"op": "create", "rows": []map[string]any{{"id": 1, "x": 10}}})
		if out.Results[0].Version != 1 {
			t.Fatalf("create: %+v", out.Results)
		}
		client, err := sdkAppend(t, e, "q", 1, 2, 20).Proto()
		if err != nil {
			t.Fatal(err)
		}
		var req map[string]any
		if err := json.Unmarshal([]byte(stageManifest(t, e, "q", client, 2)), &req); err != nil {
			t.Fatal(err)
		}
		req = tamperManifest(t, req, func(f *table.ManifestFile) {
			frags := f.Manifest.GetFragments()
			frags[len(frags)-1].PhysicalRows++
		})
		tampered, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		status, body := call(t, "POST", e.url+"/v1/table/q/version/create", string(tampered), nil)
		if status != 400 || !strings.Contains(fmt.Sprint(body["error"]), "MANIFEST_MISMATCH") {
			t.Fatalf("the tampered proposal: %d %v, want 400 MANIFEST_MISMATCH", status, body)
		}

		if v, err := e.pc.Commit(t.Context(), sdkAppend(t, e, "q", 1, 3, 30)); err != nil || v != 2 {
			t.Fatalf("a worker's commit: version %d, %v", v, err)
		}
		client.ReadVersion = 2
		decided := e.decisions(t, "q")
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		status, body = callCtx(t, ctx, "POST", e.url+"/v1/table/q/version/create", stageManifest(t, e, "q", client, 3), nil)
		if status != 400 || !strings.Contains(fmt.Sprint(body["error"]), "MANIFEST_MISMATCH") {
			t.Fatalf("the same transaction rebased onto version 2: %d %v, want its refusal (400 MANIFEST_MISMATCH)", status, body)
		}
		if n := e.decisions(t, "q"); n != decided {
			t.Errorf("the retry made %d decisions, want none", n-decided)
		}
		if v, err := e.pc.Commit(ctx, sdkAppend(t, e, "q", 2, 4, 40)); err != nil || v != 3 {
			t.Fatalf("the next writer: version %d, %v", v, err)
		}
	})
}
