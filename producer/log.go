package producer

// log.go reads the decision log (CG_DEC) and the checkpoint store
// (CG_CHECKPOINTS) through internal/declog: the source of truth for every
// manifest.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/retry"
	"cellguard/internal/subject"
	"cellguard/table"
)

// decisionLog returns the deployment's decision log.
func (c *Client) decisionLog(ctx context.Context) (*declog.Log, error) {
	if _, _, err := c.streams(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dl, nil
}

// lastRecordAtLeader returns the last record on filter, or ok=false,
// answered by the stream leader: for reads that must include every record
// appended before them.
func (c *Client) lastRecordAtLeader(ctx context.Context, filter string) (declog.Record, bool, error) {
	dl, err := c.decisionLog(ctx)
	if err != nil {
		return declog.Record{}, false, err
	}
	var r declog.Record
	var ok bool
	err = readRetry(ctx, func(ctx context.Context) error {
		var err error
		r, ok, err = dl.LastAtLeader(ctx, filter)
		return err
	})
	if err != nil {
		return declog.Record{}, false, fmt.Errorf("producer: %w", err)
	}
	return r, ok, nil
}

// record reads the record at seq, with its body.
func (c *Client) record(ctx context.Context, seq uint64) (declog.Record, error) {
	dl, err := c.decisionLog(ctx)
	if err != nil {
		return declog.Record{}, err
	}
	var r declog.Record
	err = readRetry(ctx, func(ctx context.Context) error {
		var err error
		r, err = dl.At(ctx, seq)
		return err
	})
	if err != nil {
		return declog.Record{}, fmt.Errorf("producer: %w", err)
	}
	return r, nil
}

// load rebuilds the manifest of ds at version (0: the latest) from the
// newest trusted checkpoint at or before it and the committed records
// after that. It returns the manifest and the sequence of its record.
func (c *Client) load(ctx context.Context, ds string, version uint64, older table.Versions) (*table.Manifest, uint64, error) {
	dl, err := c.decisionLog(ctx)
	if err != nil {
		return nil, 0, err
	}
	var m *table.Manifest
	var seq uint64
	err = readRetry(ctx, func(ctx context.Context) error {
		var err error
		m, seq, err = dl.Load(ctx, ds, version, older)
		return err
	})
	if err != nil {
		return nil, 0, logError(err)
	}
	return m, seq, nil
}

// versionSeq finds the log sequence of the committed record of version v.
func (c *Client) versionSeq(ctx context.Context, ds string, v uint64) (uint64, error) {
	if f := c.follower(ds); f != nil {
		if seq, ok := f.seqOf(v); ok {
			return seq, nil
		}
	}
	dl, err := c.decisionLog(ctx)
	if err != nil {
		return 0, err
	}
	seq, err := dl.VersionSeq(ctx, ds, v)
	if err != nil {
		return 0, logError(err)
	}
	return seq, nil
}

// readRequestTimeout bounds each request of a log read: a request lost
// with a stream leader or a dropped connection fails after this instead
// of holding the call until its deadline, and is retried.
const readRequestTimeout = 2 * time.Second

// readRetry retries a log read a few times on errors that may pass (a
// lost request, a leader election); answers such as "no such dataset",
// "no such record" or a malformed record are returned at once.
func readRetry(ctx context.Context, fn func(context.Context) error) error {
	b := retry.Backoff{Initial: 50 * time.Millisecond, Max: time.Second, Jitter: true}
	return retry.Do(ctx, 5, b, fn, func(err error) bool {
		return ctx.Err() == nil && retry.Unless(declog.ErrNoDataset, declog.ErrNoVersion, declog.ErrMalformedRecord,
			declog.ErrUntrustedCheckpoint, jetstream.ErrMsgNotFound)(err)
	})
}

// logError maps the decision log's errors to the producer's.
func logError(err error) error {
	switch {
	case errors.Is(err, declog.ErrNoDataset):
		return fmt.Errorf("producer: %w: %w", ErrDatasetNotFound, err)
	case errors.Is(err, declog.ErrNoVersion):
		return fmt.Errorf("producer: %w: %w", ErrVersionNotFound, err)
	}
	return fmt.Errorf("producer: %w", err)
}

// findDecision searches the log of ds for the decision of txn id, read at
// readVersion. A transaction read at v is decided after version v exists,
// so the search starts at v's committed record and ends at the last
// record present when it begins.
func (c *Client) findDecision(ctx context.Context, ds, id string, readVersion uint64) (declog.Record, bool, error) {
	dl, err := c.decisionLog(ctx)
	if err != nil {
		return declog.Record{}, false, err
	}
	start := uint64(1)
	if readVersion > 0 {
		seq, err := c.versionSeq(ctx, ds, readVersion)
		switch {
		case errors.Is(err, ErrVersionNotFound):
			// A read version the log does not have: search it all.
		case err != nil:
			return declog.Record{}, false, err
		default:
			start = seq
		}
	}
	r, ok, err := dl.Find(ctx, ds, id, start)
	if err != nil {
		return declog.Record{}, false, fmt.Errorf("producer: %w", err)
	}
	return r, ok, nil
}

// follower returns the running follower of ds, if any.
func (c *Client) follower(ds string) *follower {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.followers[ds]
}

// committedOf is the subject of ds's committed records.
func (c *Client) committedOf(ds string) string { return c.sc.Dec(ds, subject.Committed) }
