package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"cellguard/committer"
	"cellguard/internal/natsperm"
	"cellguard/internal/natstest"
	lancepub "cellguard/internal/publish"
	"cellguard/producer"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// runCommitter runs a committer as the committer role until stop.
func runCommitter(t *testing.T, roles *natstest.Roles) (stop func()) {
	t.Helper()
	cm, err := committer.New(roles.Connect(t, "committer"), committer.Config{DiscoverEvery: 20 * time.Millisecond, TakeoverOnStart: true, Logger: tailLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cm.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(time.Minute)
	for !cm.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("committer not ready")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return stop
}

// cliOut runs the CLI as role and returns what it printed.
func cliOut(t *testing.T, roles *natstest.Roles, role string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out syncBuffer
	err := run(ctx, append(args, "--nats-url", roles.Server.ClientURL(), "--creds", roles.Keys[role].SeedFile), &out, &out)
	if ctx.Err() != nil {
		t.Fatalf("cellguard %s as %s ran out its deadline: %v", strings.Join(args, " "), role, err)
	}
	return out.String(), err
}

// TestDatasetDelete runs `dataset delete` against the shipped role model
// with a committer and a publisher: refused to worker and reader (typed,
// at once), refused without --force to the admin while a transaction is
// staged and while the last decision is recent, then done; afterwards
// every transaction is rejected with DATASET_DELETED (also after a
// committer restart), list hides the dataset, the published directory
// stays until --purge-data removes it.
func TestDatasetDelete(t *testing.T) {
	roles := natstest.RunWithAccounts(t, "../../deploy/nats/accounts.conf")
	stopCommitter := runCommitter(t, roles)
	pubCtx, stopPub := context.WithCancel(context.Background())
	t.Cleanup(startPublishing(pubCtx, roles.Connect(t, "committer"), "cg", prometheus.NewRegistry(), tailLogger()))
	t.Cleanup(stopPub)
	loc := filepath.Join(t.TempDir(), "orders.lance")
	if _, err := cliOut(t, roles, "admin", "dataset", "create", "orders", "--schema", "id:int64", "--location", loc); err != nil {
		t.Fatal(err)
	}
	waitFile(t, filepath.Join(loc, "_versions"))

	// A transaction staged while no committer decides it.
	stopCommitter()
	_, wjs := natstest.Connect(t, roles.Server.ClientURL(), roles.Auth(t, "worker"))
	txn := &lancepb.Transaction{Uuid: newUUID(), ReadVersion: 1, Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{
		Fragments: []*lancepb.DataFragment{fragmentOf("data/staged.lance", lancepub.DefaultStorageVersion)},
	}}}
	body, err := proto.Marshal(txn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wjs.Publish(t.Context(), "cg.txn.orders", body, jetstream.WithMsgID(txn.GetUuid())); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"worker", "reader", "committer"} {
		if _, err := cliOut(t, roles, role, "dataset", "delete", "orders", "--force"); !errors.Is(err, natsperm.ErrPermission) {
			t.Errorf("dataset delete --force as %s = %v; want ErrPermission", role, err)
		}
	}
	for _, args := range [][]string{{}, {"--quiet", "0"}} {
		out, err := cliOut(t, roles, "admin", append([]string{"dataset", "delete", "orders"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "1 undecided staged message") {
			t.Fatalf("dataset delete %v with a staged transaction = %v (%s); want refused naming it", args, err, out)
		}
	}

	stopCommitter = runCommitter(t, roles)
	waitRecords(t, roles, "orders", 2) // the staged transaction is decided
	if _, err := cliOut(t, roles, "admin", "dataset", "delete", "orders"); err == nil || !strings.Contains(err.Error(), "being staged to") {
		t.Fatalf("dataset delete right after a decision = %v; want refused (quiet period)", err)
	}
	out, err := cliOut(t, roles, "admin", "dataset", "delete", "orders", "--quiet", "0")
	if err != nil || !strings.Contains(out, "dataset orders deleted at head v2") || !strings.Contains(out, "left in place") {
		t.Fatalf("dataset delete --quiet 0 = %v:\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(loc, "_versions")); err != nil {
		t.Errorf("the published directory was not left in place: %v", err)
	}

	pc, err := producer.New(roles.Connect(t, "worker"), producer.Config{Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	commitDeleted(t, pc, "orders")
	for _, c := range []struct {
		args []string
		want bool
	}{{[]string{"dataset", "list"}, false}, {[]string{"dataset", "list", "--all"}, true}} {
		out, err := cliOut(t, roles, "reader", c.args...)
		if err != nil || strings.Contains(out, "orders") != c.want || c.want && !strings.Contains(out, "deleted") {
			t.Errorf("%v: %v\n%s", c.args, err, out)
		}
	}
	for _, verb := range []string{"log", "show"} {
		if out, err := cliOut(t, roles, "reader", "dataset", verb, "orders"); err != nil || !strings.Contains(out, "DELETED at head v2") {
			t.Errorf("dataset %s of a deleted dataset: %v\n%s", verb, err, out)
		}
	}

	stopCommitter()
	runCommitter(t, roles) // a restarted committer loads the tombstone from the log
	commitDeleted(t, pc, "orders")

	out, err = cliOut(t, roles, "admin", "dataset", "delete", "orders", "--purge-data")
	if err != nil || !strings.Contains(out, "already deleted") || !strings.Contains(out, "purged") {
		t.Fatalf("dataset delete --purge-data of a deleted dataset = %v:\n%s", err, out)
	}
	if _, err := os.Stat(loc); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after --purge-data: stat %s = %v; want gone", loc, err)
	}
	out, err = cliOut(t, roles, "reader", "dataset", "show", "orders")
	if err != nil || !strings.Contains(out, "DELETED at head v2") || !strings.Contains(out, "published: no longer (the dataset is deleted") || strings.Contains(out, "lag") {
		t.Errorf("dataset show of a purged dataset = %v:\n%s\nwant it deleted, with no published version or lag", err, out)
	}
	if _, err := cliOut(t, roles, "admin", "dataset", "delete", "nosuch", "--force"); !errors.Is(err, errNoSuchDataset) {
		t.Errorf("dataset delete nosuch = %v; want errNoSuchDataset", err)
	}
}

// commitDeleted commits a transaction and a creation to the deleted ds
// and checks both are rejected with the SDK's typed error.
func commitDeleted(t *testing.T, pc *producer.Client, ds string) {
	t.Helper()
	snap, err := pc.Latest(t.Context(), ds)
	if err != nil {
		t.Fatal(err)
	}
	for _, txn := range []*producer.Txn{snap.NewTxn().Append(fragmentOf("data/"+newUUID()+".lance", lancepub.DefaultStorageVersion)), producer.Create(ds, idSchema, fragment("data/"+newUUID()+".lance"))} {
		_, err := pc.Commit(t.Context(), txn)
		var rej *producer.RejectedError
		if !errors.Is(err, producer.ErrDatasetDeleted) || !errors.As(err, &rej) || rej.Reason != cellguardpb.Reason_DATASET_DELETED {
			t.Errorf("Commit %s to deleted %s = %v; want DATASET_DELETED", txn, ds, err)
		}
	}
}

var idSchema = []*lancepb.Field{{Id: 0, Name: "id", ParentId: -1, LogicalType: "int64"}}

// waitRecords waits until ds's log holds n records.
func waitRecords(t *testing.T, roles *natstest.Roles, ds string, n int) {
	t.Helper()
	nc := roles.Connect(t, "reader")
	deadline := time.Now().Add(time.Minute)
	for len(decisions(t, nc, ds)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: fewer than %d records", ds, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitFile waits until path exists.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
