package declog

import (
	"context"
	"fmt"

	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// Config returns the configuration recorded on the first committed record
// of ds: an empty config (not published, default readers) for a dataset
// created without one, and ErrNoDataset when ds has no committed record.
func (l *Log) Config(ctx context.Context, ds string) (*cellguardpb.DatasetConfig, error) {
	for r, err := range l.Scan(ctx, l.sc.Dec(ds, subject.Committed), 1, ScanOptions{}) {
		if err != nil {
			return nil, err
		}
		if cfg := r.Decision.GetDatasetConfig(); cfg != nil {
			return cfg, nil
		}
		return &cellguardpb.DatasetConfig{}, nil
	}
	return nil, fmt.Errorf("declog: %s: %w", ds, ErrNoDataset)
}
