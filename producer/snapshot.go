package producer

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"cellguard/internal/subject"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// Snapshot is one committed version of a dataset: what a worker reads and
// what its transaction is computed from. It is immutable.
type Snapshot struct {
	dataset string
	m       *table.Manifest
	seq     uint64
}

// Dataset returns the dataset name.
func (s *Snapshot) Dataset() string { return s.dataset }

// Version returns the version number.
func (s *Snapshot) Version() uint64 { return s.m.Version() }

// Indices returns the index segments of the snapshot's version, in the
// order of its index section (table.Manifest.Indices). Callers must not
// modify them.
func (s *Snapshot) Indices() []*lancepb.IndexMetadata { return s.m.Indices() }

// Manifest returns the manifest of the version.
func (s *Snapshot) Manifest() *table.Manifest { return s.m }

// Seq returns the CG_DEC sequence of the committed record that created
// the version; the events package starts following there.
func (s *Snapshot) Seq() uint64 { return s.seq }

// NewTxn starts a transaction read at this version, with a fresh uuid.
func (s *Snapshot) NewTxn() *Txn {
	return &Txn{dataset: s.dataset, snap: s, pb: &lancepb.Transaction{ReadVersion: s.Version(), Uuid: uuid.NewString()}}
}

// Latest returns the latest committed version of ds: every version
// committed before the call is included (the last record is read from the
// decision log's leader, never a replica that may be behind), and never a
// version older than one this client's Commit or Outcome returned — a
// leader cut off from its quorum may not know it yet, and Latest then
// waits, bounded by ctx. A dataset with no version gives
// ErrDatasetNotFound.
func (c *Client) Latest(ctx context.Context, ds string) (_ *Snapshot, err error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	ctx, done := c.guard(ctx, ds)
	defer func() { err = done(err) }()
	f, err := c.follow(ctx, ds)
	if err != nil {
		return nil, err
	}
	last, ok, err := c.lastRecordAtLeader(ctx, c.sc.DecOf(ds))
	if err != nil {
		return nil, err
	}
	target := c.knownSeq(ds) // never older than what this client was told
	if ok {
		target = max(target, last.Seq)
	}
	if target > 0 {
		if err := f.waitSeen(ctx, target); err != nil {
			return nil, fmt.Errorf("producer: latest %s: %w", ds, err)
		}
	}
	return f.snapshot()
}

// At returns version v of ds. Recent versions come from memory; older
// ones are rebuilt from the newest checkpoint at or before v and the
// decision log. A version the dataset does not have gives
// ErrVersionNotFound.
func (c *Client) At(ctx context.Context, ds string, v uint64) (_ *Snapshot, err error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	ctx, done := c.guard(ctx, ds)
	defer func() { err = done(err) }()
	f, err := c.follow(ctx, ds)
	if err != nil {
		return nil, err
	}
	if v == 0 {
		return nil, fmt.Errorf("producer: %s@0: %w", ds, ErrVersionNotFound)
	}
	if e, ok := f.cached(v); ok {
		return &Snapshot{dataset: ds, m: e.m, seq: e.seq}, nil
	}
	if v > f.headVersion() {
		if _, err := c.Latest(ctx, ds); err != nil {
			return nil, err
		}
		if e, ok := f.cached(v); ok {
			return &Snapshot{dataset: ds, m: e.m, seq: e.seq}, nil
		}
		if v > f.headVersion() {
			return nil, fmt.Errorf("producer: %s@%d (head is %d): %w", ds, v, f.headVersion(), ErrVersionNotFound)
		}
	}
	m, seq, err := c.load(ctx, ds, v, f)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.old = snapEntry{m: m, seq: seq}
	f.mu.Unlock()
	return &Snapshot{dataset: ds, m: m, seq: seq}, nil
}

// Versions returns a table.Versions that serves the manifests of ds, for
// table.Apply on a Restore.
func (c *Client) Versions(ds string) table.Versions {
	return versionsFunc(func(ctx context.Context, v uint64) (*table.Manifest, error) {
		s, err := c.At(ctx, ds, v)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", table.ErrVersionNotFound, err)
		}
		return s.Manifest(), nil
	})
}

type versionsFunc func(context.Context, uint64) (*table.Manifest, error)

func (f versionsFunc) Manifest(ctx context.Context, v uint64) (*table.Manifest, error) {
	return f(ctx, v)
}

// validDataset checks a dataset name.
func validDataset(ds string) error {
	if err := subject.Validate(ds); err != nil {
		return fmt.Errorf("producer: %w", err)
	}
	return nil
}
