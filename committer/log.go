package committer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/retry"
)

// Errors of the decision log.
var (
	// ErrFenced reports an append refused because the dataset's log moved
	// past the sequence this committer expected: another committer (or an
	// earlier attempt of this one) appended first.
	ErrFenced = declog.ErrFenced
	// errAppend reports an append whose outcome is unknown (timeout, no
	// responders, leader change): the log must be re-read to find out.
	errAppend = declog.ErrAppend
)

// logRequestTimeout bounds each single request of a log read (last-record
// lookup, direct get, consumer creation). The callers' contexts are long
// (catchUp allows a minute for a whole tail scan; load has no deadline at
// all), but a request sent as the connection drops, or routed to a server
// that is shutting down (a killed stream leader), is never answered:
// passing the long context to it stalls the dataset for that whole time
// while its staged messages wait. Invariant: no single request of the
// decide loop waits longer than a few seconds; a lost one is retried.
const logRequestTimeout = 2 * time.Second

// logRetry is how log reads are retried: a few short attempts.
var logRetry = retry.Backoff{Initial: 20 * time.Millisecond, Max: time.Second}

// logAttempts bounds the attempts of one log read.
const logAttempts = 5

// useStreams sets the streams the committer works on and opens the
// decision log over them.
func (c *Committer) useStreams(txn, dec jetstream.Stream, obj jetstream.ObjectStore) {
	c.txn, c.dec, c.obj = txn, dec, obj
	c.atomicMin = c.cfg.AtomicBatchMin
	if c.atomicMin == 0 {
		var log jetstream.StreamConfig
		if info := dec.CachedInfo(); info != nil {
			log = info.Config
		}
		c.atomicMin = AtomicBatchMinFor(log)
	}
	c.dl = declog.New(c.js, c.sc, dec, obj, declog.Options{
		RequestTimeout: logRequestTimeout,
		MidBatch:       func(ds string) error { return c.step(StepMidBatch, ds) },
		FullAPI:        true, // the committer's role may: see declog's objects.go and pullBounded
		Reread: func(filter string, from uint64) {
			c.log.Warn("a replica's read of the decision log skipped records or disagreed with itself; read again at the stream leader",
				"filter", filter, "from", from)
			c.metrics.leaderRereads.Inc()
		},
	})
}

// openStreams creates or verifies the streams, opens the log and lists
// the checkpoints.
func (c *Committer) openStreams(ctx context.Context) error {
	txn, dec, obj, err := ensureStreams(ctx, c.js, c.cfg)
	if err != nil {
		return err
	}
	c.useStreams(txn, dec, obj)
	return c.loadCheckpointIndex(ctx)
}

// scanLog calls fn for each record on filter (DecOf(ds) or the committed
// subject) with sequence ≥ *from, up to the last record present when the
// scan begins, advancing *from past each record fn accepted. A failed
// read is retried from there, a few times. A record fn refuses as
// untrusted (it does not replay, its version does not follow, it is
// malformed) may come from a replica that lost records (a damaged block
// file: JetStream does not repair it): the scan is read again from *from
// at the stream leader, and fn's error is returned only if it refuses
// the leader's record too. fn's other errors are returned as they are.
func (c *Committer) scanLog(ctx context.Context, filter string, from *uint64, headersOnly bool, fn func(declog.Record) error) error {
	err := c.scanLogFrom(ctx, filter, from, declog.ScanOptions{HeadersOnly: headersOnly}, fn)
	if err == nil || !suspectRecord(err) || ctx.Err() != nil {
		return err
	}
	c.log.Warn("a record read from the decision log does not follow the ones before it; reading again at the stream leader",
		"filter", filter, "from", *from, "err", err)
	c.metrics.leaderRereads.Inc()
	return c.scanLogFrom(ctx, filter, from, declog.ScanOptions{HeadersOnly: headersOnly, AtLeader: true}, fn)
}

// suspectRecord reports whether err is a record's content refused as
// untrusted, which a replica that lost records would also cause.
func suspectRecord(err error) bool {
	return errors.Is(err, errReplay) || errors.Is(err, errUntrustedLog) || errors.Is(err, declog.ErrMalformedRecord)
}

// scanLogFrom is scanLog's read with opts, without the re-read at the
// leader.
func (c *Committer) scanLogFrom(ctx context.Context, filter string, from *uint64, opts declog.ScanOptions, fn func(declog.Record) error) error {
	var fnErr error
	return retry.Do(ctx, logAttempts, logRetry, func(ctx context.Context) error {
		for r, err := range c.dl.Scan(ctx, filter, *from, opts) {
			if err != nil {
				return err
			}
			if fnErr = fn(r); fnErr != nil {
				return fnErr
			}
			*from = r.Seq + 1
		}
		return nil
	}, func(err error) bool {
		return fnErr == nil && ctx.Err() == nil && !errors.Is(err, declog.ErrMalformedRecord)
	})
}

// record reads the record at seq, retrying lost requests; a purged
// record wraps jetstream.ErrMsgNotFound.
func (c *Committer) record(ctx context.Context, seq uint64) (declog.Record, error) {
	var r declog.Record
	err := retry.Do(ctx, logAttempts, logRetry, func(ctx context.Context) error {
		var err error
		r, err = c.dl.At(ctx, seq)
		return err
	}, retry.Unless(jetstream.ErrMsgNotFound, declog.ErrMalformedRecord))
	if err != nil {
		return declog.Record{}, fmt.Errorf("committer: %w", err)
	}
	return r, nil
}

// AtomicBatchMinFor is the smallest group worth an atomic batch on a
// decision log stream configured as log. On a single-replica file stream
// the server stages an atomic batch in a file store of its own, created
// and synced to disk per batch (milliseconds on a plain disk): it pays
// off from a few dozen decisions, against a chain of single appends of
// tens to hundreds of microseconds each. On a replicated or memory stream it stages the batch in
// memory and replicates the group in one round, while a chain pays a
// round per decision: every group goes atomic.
func AtomicBatchMinFor(log jetstream.StreamConfig) int {
	if log.Replicas > 1 || log.Storage == jetstream.MemoryStorage {
		return 2
	}
	return 32
}

// decRetain returns how many records per subject the decision log keeps
// (its MaxMsgsPerSubject as created or found), 0 for all.
func (c *Committer) decRetain() uint64 {
	if c.dec == nil {
		return 0
	}
	info := c.dec.CachedInfo()
	if info == nil || info.Config.MaxMsgsPerSubject <= 0 {
		return 0
	}
	return uint64(info.Config.MaxMsgsPerSubject)
}
