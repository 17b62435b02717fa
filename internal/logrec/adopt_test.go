package logrec_test

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"cellguard/internal/logrec"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// TestReplayAdoption: an adoption record starts a dataset at the adopted
// version, only as its first record, and the next record follows it.
func TestReplayAdoption(t *testing.T) {
	ctx := t.Context()
	five := uint32(0)
	adopted := &lancepb.Manifest{Fields: schema, Fragments: []*lancepb.DataFragment{fragment("a.lance")}, Version: 5, MaxFragmentId: &five}
	raw, err := proto.Marshal(adopted)
	if err != nil {
		t.Fatal(err)
	}
	txn := &lancepb.Transaction{Uuid: "00000000-0000-4000-8000-000000000005",
		Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{Schema: schema}}}
	if err := logrec.SetAdoption(txn, adopted, nil); err != nil {
		t.Fatal(err)
	}
	if m, _, _, ok, err := logrec.AdoptionOf(txn); !ok || err != nil || m.Version() != 5 {
		t.Fatalf("AdoptionOf = %v, %v, %v", m, ok, err)
	}
	tb, _ := proto.Marshal(txn)
	rec := func(v uint64, d *cellguardpb.Decision) logrec.Record {
		return logrec.Record{Seq: v, Dataset: "ds", Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED, Version: v, Decision: d}
	}
	adoption := rec(5, &cellguardpb.Decision{Dataset: "ds", TxnUuid: txn.Uuid, Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED,
		Version: 5, Transaction: tb, AdoptedManifest: raw})
	m, got, err := logrec.Replay(ctx, nil, adoption, nil)
	if err != nil || m.Version() != 5 || got.GetUuid() != txn.Uuid {
		t.Fatalf("Replay(adoption) = %v, %v, %v", m, got, err)
	}
	next := committed(t, "ds", 6)
	m6, _, err := logrec.Replay(ctx, m, rec(6, next), nil)
	if err != nil || m6.Version() != 6 || m6.NumFragments() != 2 {
		t.Fatalf("Replay(version 6 after adoption) = %v, %v", m6, err)
	}
	if _, _, err := logrec.Replay(ctx, m, adoption, nil); !errors.Is(err, logrec.ErrMalformedRecord) {
		t.Errorf("adoption as a later record: %v, want ErrMalformedRecord", err)
	}
	adoption.Version = 4
	if _, _, err := logrec.Replay(ctx, nil, adoption, nil); err == nil {
		t.Error("adoption recording another version than its manifest: no error")
	}
	bad := &lancepb.Transaction{TransactionProperties: map[string]string{logrec.AdoptProperty: "not base64!"}}
	if _, _, _, ok, err := logrec.AdoptionOf(bad); !ok || !errors.Is(err, logrec.ErrMalformedRecord) {
		t.Errorf("AdoptionOf(undecodable) = %v, %v", ok, err)
	}
}

// TestConfigProperty: a configuration round-trips through a creating
// transaction; a property that does not decode is an error.
func TestConfigProperty(t *testing.T) {
	txn := &lancepb.Transaction{}
	cfg := &cellguardpb.DatasetConfig{Location: "s3://b/t.lance", Readers: cellguardpb.Readers_READERS_LANCE8, StorageVersion: "2.1"}
	if err := logrec.SetConfig(txn, cfg); err != nil {
		t.Fatal(err)
	}
	got, err := logrec.ConfigOf(txn)
	if err != nil || !proto.Equal(got, cfg) {
		t.Errorf("ConfigOf = %v, %v; want %v", got, err, cfg)
	}
	if got, err := logrec.ConfigOf(&lancepb.Transaction{}); got != nil || err != nil {
		t.Errorf("ConfigOf(no property) = %v, %v", got, err)
	}
	txn.TransactionProperties[logrec.ConfigProperty] = "AAAA%%%"
	if _, err := logrec.ConfigOf(txn); !errors.Is(err, logrec.ErrMalformedRecord) {
		t.Errorf("ConfigOf(undecodable) = %v", err)
	}
}

// TestCreateStorageVersion: a creating transaction's configuration names
// the new table's data storage version; data files of another version
// refuse the creation; without one the table takes its files' version,
// else the table model's default.
func TestCreateStorageVersion(t *testing.T) {
	schema := []*lancepb.Field{{Id: 0, Name: "id", LogicalType: "int64", Type: lancepb.Field_LEAF}}
	file := func(minor uint32) *lancepb.DataFragment {
		return &lancepb.DataFragment{PhysicalRows: 1, Files: []*lancepb.DataFile{{Path: "a.lance", Fields: []int32{0}, ColumnIndices: []int32{0}, FileMajorVersion: 2, FileMinorVersion: minor}}}
	}
	create := func(version string, frags ...*lancepb.DataFragment) *lancepb.Transaction {
		txn := &lancepb.Transaction{Uuid: "u", Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{Schema: schema, Fragments: frags}}}
		if version != "" {
			if err := logrec.SetConfig(txn, &cellguardpb.DatasetConfig{StorageVersion: version}); err != nil {
				t.Fatal(err)
			}
		}
		return txn
	}
	for _, tc := range []struct {
		name string
		txn  *lancepb.Transaction
		want string // "" : refused
	}{
		{"empty, 2.2", create("2.2"), "2.2"},
		{"empty, 2.0", create("2.0"), "2.0"},
		{"empty, no version", create(""), "2.1"},
		{"2.2 files, 2.2", create("2.2", file(2)), "2.2"},
		{"2.2 files, no version", create("", file(2)), "2.2"},
		{"2.1 files, 2.2", create("2.2", file(1)), ""},
		{"2.2 files, 2.1", create("2.1", file(2)), ""},
	} {
		m, err := logrec.Create(tc.txn)
		if tc.want != "" {
			// CreateAs's version applies only when neither the
			// configuration nor a data file tells one.
			other, err := logrec.CreateAs(tc.txn, "2.0")
			want := tc.want
			if tc.name == "empty, no version" {
				want = "2.0"
			}
			if err != nil || other.DataFormat().GetVersion() != want {
				t.Errorf("%s: CreateAs 2.0: %v, %v; want %q", tc.name, other, err, want)
			}
		}
		switch {
		case tc.want == "" && !errors.Is(err, table.ErrInvalidTransaction):
			t.Errorf("%s: %v, want ErrInvalidTransaction", tc.name, err)
		case tc.want != "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && m.DataFormat().GetVersion() != tc.want:
			t.Errorf("%s: storage version %q, want %q", tc.name, m.DataFormat().GetVersion(), tc.want)
		}
	}
}
