package committer

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/table"
)

// Reader reads datasets from the decision log and the checkpoints without
// deciding anything, through the same decision-log package a starting
// committer loads with.
type Reader struct {
	sc subject.Scheme
	dl *declog.Log
}

// DatasetInfo summarizes one dataset's decision log.
type DatasetInfo struct {
	Name     string
	Head     uint64 // the head version
	Rejected uint64 // rejected decisions
	Deleted  bool   // the log holds the dataset's tombstone
}

// NewReader opens the decision log of the deployment with the given prefix.
func NewReader(ctx context.Context, nc *nats.Conn, prefix string) (*Reader, error) {
	sc, err := subject.NewScheme(prefix)
	if err != nil {
		return nil, fmt.Errorf("committer: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("committer: %w", err)
	}
	dl, err := declog.Open(ctx, js, sc, declog.Options{RequestTimeout: logRequestTimeout})
	if err != nil {
		return nil, fmt.Errorf("committer: %w", err)
	}
	return &Reader{sc: sc, dl: dl}, nil
}

// Datasets lists the datasets of the log, by name: the names with a
// committed record. A transaction staged to a name never created is
// rejected (UNKNOWN_DATASET) and leaves rejected records only, so such a
// name is not listed. One request counts every decision subject's records.
func (r *Reader) Datasets(ctx context.Context) ([]DatasetInfo, error) {
	info, err := r.dl.Stream().Info(ctx, jetstream.WithSubjectFilter(r.sc.DecAll()))
	if err != nil {
		return nil, err
	}
	byName := map[string]*DatasetInfo{}
	for subj, n := range info.State.Subjects {
		ds, o, err := r.sc.ParseDec(subj)
		if err != nil {
			continue
		}
		d := byName[ds]
		if d == nil {
			d = &DatasetInfo{Name: ds}
			byName[ds] = d
		}
		switch o {
		case subject.Committed:
			d.Head = n
		case subject.Rejected:
			d.Rejected = n
		case subject.Deleted:
			d.Deleted = true
		}
	}
	out := make([]DatasetInfo, 0, len(byName))
	for _, d := range byName {
		if d.Head == 0 {
			continue // never created: rejections only
		}
		// The head is the last committed version: the count of committed
		// records, unless the dataset was adopted at a later Lance version.
		last, ok, err := r.dl.Last(ctx, r.sc.Dec(d.Name, subject.Committed))
		if err != nil {
			return nil, err
		}
		if ok {
			d.Head = last.Version
		}
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Head loads the head manifest of ds (nil if it has none) from the latest
// trusted checkpoint and the log tail.
func (r *Reader) Head(ctx context.Context, ds string) (*table.Manifest, error) {
	m, _, err := r.dl.Load(ctx, ds, 0, r.dl.Versions(ds))
	if errors.Is(err, declog.ErrNoDataset) {
		return nil, nil
	}
	return m, err
}

// Log calls fn for every decision of ds with log sequence ≥ from, in order.
func (r *Reader) Log(ctx context.Context, ds string, from uint64, fn func(seq uint64, rec *cellguardpb.Decision) error) error {
	for rec, err := range r.dl.Scan(ctx, r.sc.DecOf(ds), from, declog.ScanOptions{}) {
		if err != nil {
			return err
		}
		if err := fn(rec.Seq, rec.Decision); err != nil {
			return err
		}
	}
	return nil
}
