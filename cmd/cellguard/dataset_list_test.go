package main

import (
	"errors"
	"strings"
	"testing"

	"cellguard/internal/natstest"
	lancepub "cellguard/internal/publish"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// TestDatasetListShowsOnlyCreatedDatasets: a transaction staged to a name
// never created is rejected (UNKNOWN_DATASET), which puts a rejected
// record for that name in the log; `dataset list` (also with --all) still
// does not show the name, `dataset show` and `dataset delete` say there
// is no such dataset, and the name can still be created.
func TestDatasetListShowsOnlyCreatedDatasets(t *testing.T) {
	roles := natstest.RunWithAccounts(t, "../../deploy/nats/accounts.conf")
	runCommitter(t, roles)
	if _, err := cliOut(t, roles, "admin", "dataset", "create", "orders", "--schema", "id:int64"); err != nil {
		t.Fatal(err)
	}
	_, wjs := natstest.Connect(t, roles.Server.ClientURL(), roles.Auth(t, "worker"))
	stageTxn(t, wjs, "ghost", &lancepb.Transaction{Uuid: newUUID(), ReadVersion: 1, Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{
		Fragments: []*lancepb.DataFragment{fragmentOf("data/ghost.lance", lancepub.DefaultStorageVersion)},
	}}})
	waitRecords(t, roles, "ghost", 1)
	if got := decisions(t, roles.Connect(t, "reader"), "ghost"); got[0].GetReason() != cellguardpb.Reason_UNKNOWN_DATASET {
		t.Fatalf("the transaction to ghost was decided %v; want rejected UNKNOWN_DATASET", got[0])
	}
	for _, args := range [][]string{{"dataset", "list"}, {"dataset", "list", "--all"}} {
		out, err := cliOut(t, roles, "reader", args...)
		if err != nil || !strings.Contains(out, "orders") || strings.Contains(out, "ghost") {
			t.Errorf("%v = %v; want orders and not ghost:\n%s", args, err, out)
		}
	}
	out, err := cliOut(t, roles, "reader", "dataset", "show", "ghost")
	if !errors.Is(err, errNoSuchDataset) {
		t.Errorf("dataset show ghost = %v; want errNoSuchDataset:\n%s", err, out)
	}
	// Nor can it be deleted: a tombstone would keep the name from ever
	// being created.
	if out, err := cliOut(t, roles, "admin", "dataset", "delete", "ghost", "--force"); !errors.Is(err, errNoSuchDataset) {
		t.Errorf("dataset delete ghost = %v; want errNoSuchDataset:\n%s", err, out)
	}
	if out, err := cliOut(t, roles, "admin", "dataset", "create", "ghost", "--schema", "id:int64"); err != nil {
		t.Errorf("dataset create ghost = %v:\n%s", err, out)
	}
}

// TestDatasetLogReadsTheStrayLog: a message staged on a literal wildcard
// subject is rejected into the reserved stray log, which `dataset log`
// reads as `events tail` does (it refused the reserved name before).
func TestDatasetLogReadsTheStrayLog(t *testing.T) {
	roles := natstest.RunWithAccounts(t, "../../deploy/nats/accounts.conf")
	runCommitter(t, roles)
	_, wjs := natstest.Connect(t, roles.Server.ClientURL(), roles.Auth(t, "worker"))
	if _, err := wjs.Publish(t.Context(), "cg.txn.*", []byte("staged on a wildcard")); err != nil {
		t.Fatal(err)
	}
	waitRecords(t, roles, subject.StrayDataset, 1)
	out, err := cliOut(t, roles, "reader", "dataset", "log", subject.StrayDataset)
	if err != nil || !strings.Contains(out, "INVALID_DATASET_NAME") {
		t.Errorf("dataset log %s = %v; want the stray rejection:\n%s", subject.StrayDataset, err, out)
	}
	if _, err := cliOut(t, roles, "reader", "dataset", "show", subject.StrayDataset); err == nil {
		t.Errorf("dataset show %s: want the reserved name refused", subject.StrayDataset)
	}
}
