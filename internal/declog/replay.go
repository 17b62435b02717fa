package declog

import (
	"context"
	"errors"
	"fmt"

	"cellguard/internal/subject"
	"cellguard/table"
)

// Versions serves the manifests of ds from the log, each rebuilt with
// Load, for a Restore being replayed. A version the log does not hold
// is an error wrapping table.ErrVersionNotFound.
func (l *Log) Versions(ds string) table.Versions { return logVersions{l: l, ds: ds} }

type logVersions struct {
	l  *Log
	ds string
}

// Manifest implements table.Versions.
func (v logVersions) Manifest(ctx context.Context, version uint64) (*table.Manifest, error) {
	m, _, err := v.l.Load(ctx, v.ds, version, v)
	if errors.Is(err, ErrNoVersion) || errors.Is(err, ErrNoDataset) {
		return nil, fmt.Errorf("%w: %v", table.ErrVersionNotFound, err)
	}
	return m, err
}

// Load rebuilds the manifest of ds at version (0: the latest) from the
// newest trusted checkpoint at or before it and the committed records
// after that. It returns the manifest and the sequence of its record.
// older serves Restore's earlier versions.
func (l *Log) Load(ctx context.Context, ds string, version uint64, older table.Versions) (*table.Manifest, uint64, error) {
	committed := l.sc.Dec(ds, subject.Committed)
	last, ok, err := l.Last(ctx, committed)
	if err != nil {
		return nil, 0, err
	}
	if !ok {
		return nil, 0, fmt.Errorf("declog: %s: %w", ds, ErrNoDataset)
	}
	if version == 0 {
		version = last.Version
	}
	if version > last.Version {
		return nil, 0, fmt.Errorf("declog: %s@%d (head is %d): %w", ds, version, last.Version, ErrNoVersion)
	}
	var m *table.Manifest
	start, seq, after := uint64(1), uint64(0), uint64(0)
	cp, ok, err := l.Checkpoint(ctx, ds, version)
	switch {
	case errors.Is(err, ErrUntrustedCheckpoint):
		// replay from the start
	case err != nil:
		return nil, 0, err
	case ok:
		m, start, seq, after = cp.Manifest, cp.DecSeq+1, cp.DecSeq, cp.Version
	}
	if m != nil && m.Version() == version {
		return m, seq, nil
	}
	for r, err := range l.Scan(ctx, committed, start, ScanOptions{To: last.Seq, After: after}) {
		if err != nil {
			return nil, 0, err
		}
		if m, _, err = Replay(ctx, m, r, older); err != nil {
			return nil, 0, err
		}
		seq = r.Seq
		if m.Version() >= version {
			break
		}
	}
	if m == nil || m.Version() != version {
		return nil, 0, fmt.Errorf("declog: %s@%d: log replay ended early: %w", ds, version, ErrNoVersion)
	}
	return m, seq, nil
}

// VersionSeq finds the sequence of the committed record of version v of
// ds: from the last record, a trusted checkpoint, or a headers-only scan.
func (l *Log) VersionSeq(ctx context.Context, ds string, v uint64) (uint64, error) {
	committed := l.sc.Dec(ds, subject.Committed)
	last, ok, err := l.Last(ctx, committed)
	if err != nil {
		return 0, err
	}
	if !ok || v == 0 || v > last.Version {
		return 0, fmt.Errorf("declog: %s@%d: %w", ds, v, ErrNoVersion)
	}
	if v == last.Version {
		return last.Seq, nil
	}
	start, after := uint64(1), uint64(0)
	if cp, ok, err := l.Checkpoint(ctx, ds, v); err == nil && ok {
		if cp.Version == v {
			return cp.DecSeq, nil
		}
		start, after = cp.DecSeq+1, cp.Version
	}
	for r, err := range l.Scan(ctx, committed, start, ScanOptions{HeadersOnly: true, To: last.Seq, After: after}) {
		if err != nil {
			return 0, err
		}
		if r.Version == v {
			return r.Seq, nil
		}
		if r.Version > v {
			break
		}
	}
	return 0, fmt.Errorf("declog: %s@%d: no committed record: %w", ds, v, ErrNoVersion)
}

// Find looks up the decision of transaction id on ds among the records
// with sequence ≥ from, up to the last one present when it starts. A hit
// is returned with its body.
func (l *Log) Find(ctx context.Context, ds, id string, from uint64) (Record, bool, error) {
	for r, err := range l.Scan(ctx, l.sc.DecOf(ds), from, ScanOptions{HeadersOnly: true}) {
		if err != nil {
			return Record{}, false, err
		}
		if r.TxnID == id {
			full, err := l.At(ctx, r.Seq)
			return full, err == nil, err
		}
	}
	return Record{}, false, nil
}
