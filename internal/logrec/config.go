package logrec

import (
	"encoding/base64"
	"fmt"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// DefaultStorageVersion is the data storage version of new datasets
// cellguard creates (`cellguard dataset create`): LanceDB 0.39's (Lance
// 12's) default. LanceDB 0.31 reads and appends to such tables too.
const DefaultStorageVersion = "2.2"

// A dataset's configuration (where it is published, which readers it
// serves) travels in two places:
//
//   - on the staged creating transaction, as the transaction property
//     ConfigProperty (base64 of a cellguardpb.DatasetConfig), because a
//     producer can only stage a Lance Transaction;
//   - on the dataset's first committed record, as Decision.dataset_config,
//     where the committer copies it when it commits the creation. That
//     record is the config's source of truth.
//
// The property stays in the committed transaction, so a replay sees the
// same bytes the committer saw.
const ConfigProperty = "cellguard.dataset_config"

// EncodeConfig returns the value of the ConfigProperty that records cfg.
func EncodeConfig(cfg *cellguardpb.DatasetConfig) (string, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("declog: encode dataset config: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// SetConfig records cfg on the creating transaction txn.
func SetConfig(txn *lancepb.Transaction, cfg *cellguardpb.DatasetConfig) error {
	s, err := EncodeConfig(cfg)
	if err != nil {
		return err
	}
	if txn.TransactionProperties == nil {
		txn.TransactionProperties = map[string]string{}
	}
	txn.TransactionProperties[ConfigProperty] = s
	return nil
}

// ConfigOf returns the configuration a creating transaction carries, nil
// if it carries none. A property that does not decode is an error.
func ConfigOf(txn *lancepb.Transaction) (*cellguardpb.DatasetConfig, error) {
	s, ok := txn.GetTransactionProperties()[ConfigProperty]
	if !ok {
		return nil, nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("declog: transaction property %s: %w: %v", ConfigProperty, ErrMalformedRecord, err)
	}
	cfg := &cellguardpb.DatasetConfig{}
	if err := proto.Unmarshal(b, cfg); err != nil {
		return nil, fmt.Errorf("declog: transaction property %s: %w: %v", ConfigProperty, ErrMalformedRecord, err)
	}
	return cfg, nil
}

// Create builds version 1 of a dataset from its creating transaction:
// table.CreateWith with the data storage version the transaction's
// configuration names (DatasetConfig.storage_version), so that a table
// created without data files has the version asked for, and one created
// with data files of another version is refused. A transaction naming
// none gets the table model's default (table.CreateOptions). The
// committer, every replay of the log and the namespace's check all create
// tables this way, from the transaction alone.
func Create(txn *lancepb.Transaction) (*table.Manifest, error) { return CreateAs(txn, "") }

// CreateAs is Create for a transaction whose configuration names no
// storage version, with empty the table's version when no data file tells
// it: the creating record's (Decision.dataset_config.storage_version) on
// a replay, subject.HdrStorageVersion when the committer decides.
func CreateAs(txn *lancepb.Transaction, empty string) (*table.Manifest, error) {
	cfg, err := ConfigOf(txn)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", table.ErrInvalidTransaction, err)
	}
	var opts table.CreateOptions
	if v := cfg.GetStorageVersion(); v != "" {
		opts.DataFormat = &lancepb.Manifest_DataStorageFormat{FileFormat: "lance", Version: v}
		opts.RequireFormat = true
	} else if empty != "" {
		opts.DataFormat = &lancepb.Manifest_DataStorageFormat{FileFormat: "lance", Version: empty}
	}
	return table.CreateWith(txn, opts)
}

// ValidStorageVersion reports whether v is a data storage version a
// dataset may have: 2.0, 2.1 or 2.2.
func ValidStorageVersion(v string) bool { return v == "2.0" || v == "2.1" || v == "2.2" }
