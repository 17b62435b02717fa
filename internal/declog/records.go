package declog

import (
	"context"

	"cellguard/internal/logrec"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// The record types and their encoding live in internal/logrec, below the
// decision core and this package; these names are theirs.
type (
	// Record is one decision read from the log (logrec.Record).
	Record = logrec.Record
	// Encoded is a decision with the body the log stores for it.
	Encoded = logrec.Encoded
	// Checkpoint is a trusted manifest snapshot.
	Checkpoint = logrec.Checkpoint
	// LogState is the part of a committer's state a checkpoint carries.
	LogState = logrec.LogState
)

// Transaction properties a creating transaction carries.
const (
	ConfigProperty = logrec.ConfigProperty
	AdoptProperty  = logrec.AdoptProperty
)

// Encode encodes d once, for AppendEncoded (logrec.Encode).
func Encode(d *cellguardpb.Decision) (Encoded, error) { return logrec.Encode(d) }

// EncodeLanded encodes d with a landed transaction (logrec.EncodeLanded).
func EncodeLanded(d *cellguardpb.Decision, t table.Landed) (Encoded, error) {
	return logrec.EncodeLanded(d, t)
}

// EncodeConfig returns the value of the ConfigProperty that records cfg.
func EncodeConfig(cfg *cellguardpb.DatasetConfig) (string, error) { return logrec.EncodeConfig(cfg) }

// SetConfig records cfg on the creating transaction txn.
func SetConfig(txn *lancepb.Transaction, cfg *cellguardpb.DatasetConfig) error {
	return logrec.SetConfig(txn, cfg)
}

// ConfigOf returns the configuration a creating transaction carries.
func ConfigOf(txn *lancepb.Transaction) (*cellguardpb.DatasetConfig, error) {
	return logrec.ConfigOf(txn)
}

// SetAdoption records on txn that it adopts the Lance manifest m.
func SetAdoption(txn *lancepb.Transaction, m *lancepb.Manifest, indices *lancepb.IndexSection) error {
	return logrec.SetAdoption(txn, m, indices)
}

// AdoptionOf returns the manifest and index section an adopting transaction carries.
func AdoptionOf(txn *lancepb.Transaction) (*table.Manifest, []byte, []byte, bool, error) {
	return logrec.AdoptionOf(txn)
}

// Replay applies the committed record r to m, the manifest of the
// version before it (logrec.Replay).
func Replay(ctx context.Context, m *table.Manifest, r Record, older table.Versions) (*table.Manifest, *lancepb.Transaction, error) {
	return logrec.Replay(ctx, m, r, older)
}

// Create builds version 1 of a dataset from its creating transaction (logrec.Create).
func Create(txn *lancepb.Transaction) (*table.Manifest, error) { return logrec.Create(txn) }

// CreateAs is Create with the table's version when nothing else names one (logrec.CreateAs).
func CreateAs(txn *lancepb.Transaction, empty string) (*table.Manifest, error) {
	return logrec.CreateAs(txn, empty)
}

// ValidStorageVersion reports whether v is a data storage version (logrec.ValidStorageVersion).
func ValidStorageVersion(v string) bool { return logrec.ValidStorageVersion(v) }
