package logrec

import (
	"encoding/base64"
	"fmt"

	"google.golang.org/protobuf/proto"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// Adoption starts a dataset's log at the latest version N of a Lance
// table that someone else wrote. It is staged as a creating Overwrite
// (read_version 0) whose uuid is the uuid of the transaction Lance
// committed at N, carrying the manifest of N in the transaction property
// AdoptProperty (base64 of a lance Manifest). The committer commits it as
// the dataset's first record: version N, with Decision.adopted_manifest
// holding the manifest bytes. Replay accepts an adopted manifest only as
// a dataset's first record, and the next commit is N+1.
const AdoptProperty = "cellguard.adopt_manifest"

// AdoptIndicesProperty carries the adopted version's index section
// (base64 of a lance IndexSection) beside AdoptProperty; absent when the
// version has no index. The committed record keeps it as
// Decision.adopted_index_section.
const AdoptIndicesProperty = "cellguard.adopt_indices"

// SetAdoption records the manifest of the adopted version and its index
// section (nil: none) on txn.
func SetAdoption(txn *lancepb.Transaction, m *lancepb.Manifest, indices *lancepb.IndexSection) error {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return fmt.Errorf("declog: encode adopted manifest: %w", err)
	}
	if txn.TransactionProperties == nil {
		txn.TransactionProperties = map[string]string{}
	}
	txn.TransactionProperties[AdoptProperty] = base64.StdEncoding.EncodeToString(b)
	delete(txn.TransactionProperties, AdoptIndicesProperty)
	if len(indices.GetIndices()) > 0 {
		ib, err := proto.MarshalOptions{Deterministic: true}.Marshal(indices)
		if err != nil {
			return fmt.Errorf("declog: encode adopted index section: %w", err)
		}
		txn.TransactionProperties[AdoptIndicesProperty] = base64.StdEncoding.EncodeToString(ib)
	}
	return nil
}

// AdoptionOf returns the adopted manifest a staged transaction carries
// (with its index section) and the bytes of both (rawIndices nil when it
// has none); ok is false when txn is not an adoption.
func AdoptionOf(txn *lancepb.Transaction) (m *table.Manifest, raw, rawIndices []byte, ok bool, err error) {
	s, ok := txn.GetTransactionProperties()[AdoptProperty]
	if !ok {
		return nil, nil, nil, false, nil
	}
	raw, err = base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, nil, nil, true, fmt.Errorf("declog: transaction property %s: %w: %v", AdoptProperty, ErrMalformedRecord, err)
	}
	if si, has := txn.GetTransactionProperties()[AdoptIndicesProperty]; has {
		if rawIndices, err = base64.StdEncoding.DecodeString(si); err != nil {
			return nil, nil, nil, true, fmt.Errorf("declog: transaction property %s: %w: %v", AdoptIndicesProperty, ErrMalformedRecord, err)
		}
	}
	m, err = adopted(raw, rawIndices)
	return m, raw, rawIndices, true, err
}

// adopted decodes an adopted manifest and its index section (nil: none)
// and checks it names a version.
func adopted(raw, rawIndices []byte) (*table.Manifest, error) {
	pb := &lancepb.Manifest{}
	if err := proto.Unmarshal(raw, pb); err != nil {
		return nil, fmt.Errorf("declog: adopted manifest: %w: %v", ErrMalformedRecord, err)
	}
	if pb.GetVersion() == 0 {
		return nil, fmt.Errorf("declog: adopted manifest: %w: version 0", ErrMalformedRecord)
	}
	m, err := table.FromProto(pb)
	if err != nil {
		return nil, fmt.Errorf("declog: adopted manifest: %w", err)
	}
	if rawIndices == nil {
		return m, nil
	}
	s := &lancepb.IndexSection{}
	if err := proto.Unmarshal(rawIndices, s); err != nil {
		return nil, fmt.Errorf("declog: adopted index section: %w: %v", ErrMalformedRecord, err)
	}
	if m, err = m.WithIndices(s, m.IndexRules()); err != nil {
		return nil, fmt.Errorf("declog: adopted index section: %w: %v", ErrMalformedRecord, err)
	}
	return m, nil
}
