package logrec

import (
	"encoding/base64"
	"fmt"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// DefaultStorageVersion is the data storage version of tables cellguard
// creates: LanceDB 0.31's default.
const DefaultStorageVersion = "2.1"

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
