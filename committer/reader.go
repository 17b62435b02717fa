package committer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/table"
)

// Reader reads datasets from the decision log and the checkpoints without
// deciding anything: the same loading code a starting committer runs.
type Reader struct {
	c *Committer
}

// DatasetInfo summarizes one dataset's decision log.
type DatasetInfo struct {
	Name     string
	Head     uint64 // committed versions = the head version
	Rejected uint64 // rejected decisions
}

// NewReader opens the streams of the deployment with the given prefix.
func NewReader(ctx context.Context, nc *nats.Conn, prefix string) (*Reader, error) {
	c, err := New(nc, Config{Prefix: prefix, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	if c.txn, err = c.js.Stream(ctx, c.sc.TxnStream()); err != nil {
		return nil, fmt.Errorf("committer: open %s: %w", c.sc.TxnStream(), err)
	}
	if c.dec, err = c.js.Stream(ctx, c.sc.DecStream()); err != nil {
		return nil, fmt.Errorf("committer: open %s: %w", c.sc.DecStream(), err)
	}
	c.obj, err = c.js.ObjectStore(ctx, c.sc.CheckpointBucket())
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("committer: open checkpoints: %w", err)
	}
	if c.obj != nil {
		if err := c.loadCheckpointIndex(ctx); err != nil {
			return nil, err
		}
	}
	return &Reader{c: c}, nil
}

// Datasets lists the datasets that have decisions, by name.
func (r *Reader) Datasets(ctx context.Context) ([]DatasetInfo, error) {
	info, err := r.c.dec.Info(ctx, jetstream.WithSubjectFilter(r.c.sc.DecAll()))
	if err != nil {
		return nil, err
	}
	byName := map[string]*DatasetInfo{}
	for subj, n := range info.State.Subjects {
		ds, o, err := r.c.sc.ParseDec(subj)
		if err != nil {
			continue
		}
		d := byName[ds]
		if d == nil {
			d = &DatasetInfo{Name: ds}
			byName[ds] = d
		}
		if o == subject.Committed {
			d.Head = n
		} else {
			d.Rejected = n
		}
	}
	out := make([]DatasetInfo, 0, len(byName))
	for _, d := range byName {
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Head loads the head manifest of ds (nil if it has none) from the latest
// checkpoint and the log tail.
func (r *Reader) Head(ctx context.Context, ds string) (*table.Manifest, error) {
	st := newState(ds, limits{window: 1, maxTxnBytes: 1}, nil)
	st.older = &logHistory{c: r.c, st: st}
	if err := r.c.loadState(ctx, st); err != nil {
		return nil, err
	}
	return st.head, nil
}

// Log calls fn for every decision of ds with log sequence ≥ from, in order.
func (r *Reader) Log(ctx context.Context, ds string, from uint64, fn func(seq uint64, rec *cellguardpb.Decision) error) error {
	_, err := r.c.scanLog(ctx, ds, r.c.sc.DecOf(ds), max(from, 1), false, func(lr logRecord) error {
		return fn(lr.seq, lr.rec)
	})
	return err
}
