package logrec

import (
	"context"
	"fmt"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// Replay applies the committed record r to m, the manifest of the
// version before it (nil before the first), and checks that the result
// is the version r records. It returns the new manifest and the
// transaction r committed; ctx bounds reads of older (only a Restore needs
// them). It is the one place a reader turns a record
// into a manifest; the committer decides with the same table.Apply.
func Replay(ctx context.Context, m *table.Manifest, r Record, older table.Versions) (*table.Manifest, *lancepb.Transaction, error) {
	var have uint64
	if m != nil {
		have = m.Version()
	}
	if raw := r.Decision.GetAdoptedManifest(); raw != nil {
		return replayAdoption(m, r, raw)
	}
	if !r.Committed() || r.Version != have+1 {
		return nil, nil, fmt.Errorf("declog: log of %s: record %d has version %d, want %d", r.Dataset, r.Seq, r.Version, have+1)
	}
	txn, err := r.Txn()
	if err != nil {
		return nil, nil, err
	}
	var next *table.Manifest
	if m == nil {
		next, err = CreateAs(txn, r.Decision.GetDatasetConfig().GetStorageVersion())
	} else {
		next, err = table.Apply(ctx, m, txn, older)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("declog: log of %s: apply version %d: %w", r.Dataset, r.Version, err)
	}
	if next.Version() != r.Version {
		return nil, nil, fmt.Errorf("declog: log of %s: applying record %d made version %d, want %d", r.Dataset, r.Seq, next.Version(), r.Version)
	}
	return next, txn, nil
}

// replayAdoption starts a dataset from the manifest an adoption record
// carries; only a dataset's first record may carry one.
func replayAdoption(m *table.Manifest, r Record, raw []byte) (*table.Manifest, *lancepb.Transaction, error) {
	if m != nil || !r.Committed() {
		return nil, nil, fmt.Errorf("declog: log of %s: record %d: %w: an adoption that is not the dataset's first committed record", r.Dataset, r.Seq, ErrMalformedRecord)
	}
	next, err := adopted(raw, r.Decision.GetAdoptedIndexSection())
	if err != nil {
		return nil, nil, err
	}
	if next.Version() != r.Version {
		return nil, nil, fmt.Errorf("declog: log of %s: record %d adopts version %d but records %d", r.Dataset, r.Seq, next.Version(), r.Version)
	}
	txn, err := r.Txn()
	if err != nil {
		return nil, nil, err
	}
	return next, txn, nil
}
