package publish

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"cellguard/internal/declog"
	"cellguard/internal/retry"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// ErrForeignVersion reports a version in the dataset's location that
// cellguard did not publish: its transaction is not the one the decision
// log committed at that version, or the log has no such version. It is
// never overwritten; publishing of the dataset stops.
var ErrForeignVersion = errors.New("publish: a version in storage was not written by cellguard")

// errVersionThere is WriteVersion finding the version's manifest in
// storage before writing anything.
var errVersionThere = errors.New("publish: version in storage")

// Publisher publishes the committed versions of one dataset to its
// location, following the decision log. Create it with NewPublisher and
// call Run.
type Publisher struct {
	log     *declog.Log
	ds      string
	cfg     *cellguardpb.DatasetConfig
	loc     *Location
	logger  *slog.Logger
	metrics *Metrics
	backoff retry.Backoff
	now     func() time.Time

	published atomic.Uint64 // newest version known to be in storage
	head      atomic.Uint64 // newest version known in the log
	stopped   atomic.Pointer[error]
}

// PublisherOptions tunes a Publisher. The zero value is usable.
type PublisherOptions struct {
	Logger  *slog.Logger
	Metrics *Metrics      // nil: not exported
	Backoff retry.Backoff // pauses between attempts while the store fails
}

// NewPublisher returns the publisher of ds, whose configuration cfg (from
// declog.Log.Config) names the location loc was opened from. The caller
// keeps ownership of loc.
func NewPublisher(l *declog.Log, ds string, cfg *cellguardpb.DatasetConfig, loc *Location, opts PublisherOptions) *Publisher {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Backoff.Initial == 0 {
		opts.Backoff = retry.Backoff{Initial: 50 * time.Millisecond, Max: 5 * time.Second, Jitter: true}
	}
	return &Publisher{
		log: l, ds: ds, cfg: cfg, loc: loc, logger: opts.Logger.With("dataset", ds, "location", cfg.GetLocation()),
		metrics: opts.Metrics, backoff: opts.Backoff, now: time.Now,
	}
}

// Published returns the newest version this publisher knows is in
// storage.
func (p *Publisher) Published() uint64 { return p.published.Load() }

// Stopped returns why the dataset's publishing stopped for good
// (ErrForeignVersion, ErrUnpublishable, ErrDatasetDeleted), or nil while
// it runs.
func (p *Publisher) Stopped() error {
	if err := p.stopped.Load(); err != nil {
		return *err
	}
	return nil
}

// Run publishes every committed version after the newest one already in
// storage, then follows the log until ctx ends. A store that fails is
// retried without end (decisions keep flowing meanwhile: the committer
// never waits for publishing); a foreign version in storage stops the
// dataset's publishing with ErrForeignVersion. It returns ctx's error on
// cancellation.
func (p *Publisher) Run(ctx context.Context) error {
	err := p.run(ctx)
	switch {
	case errors.Is(err, ErrDatasetDeleted):
		p.logger.Info("dataset deleted; not publishing it", "err", err)
		p.stopped.Store(&err)
	case errors.Is(err, ErrForeignVersion) || errors.Is(err, ErrUnpublishable):
		p.logger.Error("publishing stopped", "err", err)
		p.metrics.stopped(p.ds)
		p.stopped.Store(&err)
	}
	return err
}

func (p *Publisher) run(ctx context.Context) error {
	if err := p.checkDeleted(ctx); err != nil {
		return err
	}
	var start uint64
	err := p.retrying(ctx, "resume", func(ctx context.Context) error {
		var err error
		start, err = p.resume(ctx)
		return err
	})
	if err != nil {
		return err
	}
	p.published.Store(start)
	var m *table.Manifest
	var seq uint64
	if start > 0 {
		if m, seq, err = p.log.Load(ctx, p.ds, start, p.log.Versions(p.ds)); err != nil {
			return err
		}
	}
	p.logger.Info("publishing", "from_version", start+1)
	committed := p.log.Scheme().Dec(p.ds, subject.Committed)
	for r, err := range p.log.Scan(ctx, committed, seq+1, declog.ScanOptions{Live: true}) {
		if err != nil {
			return err
		}
		next, txn, err := declog.Replay(ctx, m, r, p.log.Versions(p.ds))
		if err != nil {
			return err
		}
		p.head.Store(max(p.head.Load(), r.Version))
		if err := p.retrying(ctx, "publish", func(ctx context.Context) error {
			return p.Publish(ctx, next, txn)
		}); err != nil {
			return err
		}
		m = next
		p.published.Store(next.Version())
		p.observeLag(ctx)
	}
	return ctx.Err()
}

// checkDeleted fails with ErrDatasetDeleted when the dataset's log holds
// its tombstone: after `dataset delete --purge-data` a publisher that
// started anyway would publish the whole history again.
func (p *Publisher) checkDeleted(ctx context.Context) error {
	t, ok, err := p.log.Tombstone(ctx, p.ds)
	if err != nil {
		return err
	}
	if ok {
		return fmt.Errorf("%w: %s (tombstone at log sequence %d)", ErrDatasetDeleted, p.ds, t.Seq)
	}
	return nil
}

// retrying runs fn until it succeeds, ctx ends, or it fails for good.
func (p *Publisher) retrying(ctx context.Context, what string, fn func(context.Context) error) error {
	return retry.Do(ctx, math.MaxInt, p.backoff, func(ctx context.Context) error {
		err := fn(ctx)
		if err != nil && !errors.Is(err, ErrForeignVersion) && !errors.Is(err, ErrUnpublishable) && ctx.Err() == nil {
			p.logger.Warn("publish attempt failed; retrying", "step", what, "err", err)
			p.metrics.failed(p.ds)
			p.observeLag(ctx)
		}
		return err
	}, retry.Unless(ErrForeignVersion, ErrUnpublishable, context.Canceled, context.DeadlineExceeded))
}

// observeLag refreshes the lag metric: log head − published version.
func (p *Publisher) observeLag(ctx context.Context) {
	if last, ok, err := p.log.Last(ctx, p.log.Scheme().Dec(p.ds, subject.Committed)); err == nil && ok {
		p.head.Store(max(p.head.Load(), last.Version))
	}
	p.metrics.set(p.ds, p.published.Load(), p.head.Load())
}

// resume returns the newest version in storage, after checking that it is
// ours: its transaction is the one the log committed at that version.
// Versions are published in order and each manifest last, so every older
// version is there too.
func (p *Publisher) resume(ctx context.Context) (uint64, error) {
	latest, err := LatestVersion(ctx, p.loc)
	if err != nil || latest == 0 {
		return 0, err
	}
	f, err := ReadVersion(ctx, p.loc, latest)
	if err != nil {
		return 0, err
	}
	id := txnID(f)
	seq, err := p.log.VersionSeq(ctx, p.ds, latest)
	if errors.Is(err, declog.ErrNoVersion) {
		return 0, fmt.Errorf("%w: version %d (transaction %s) is in %s but not in the decision log", ErrForeignVersion, latest, id, p.loc.URL)
	}
	if err != nil {
		return 0, err
	}
	r, err := p.log.At(ctx, seq)
	if err != nil {
		return 0, err
	}
	if r.TxnID != id {
		return 0, fmt.Errorf("%w: version %d in %s has transaction %s, the log committed %s", ErrForeignVersion, latest, p.loc.URL, id, r.TxnID)
	}
	return latest, nil
}

// Publish lays version m, committed by txn, out in the location: the
// transaction file, then the manifest file, created only if absent (the
// commit point a Lance reader sees), then the best-effort version hint.
// Publishing a version that is already there with the same transaction
// succeeds without writing; with another transaction it fails with
// ErrForeignVersion and writes nothing.
func (p *Publisher) Publish(ctx context.Context, m *table.Manifest, txn *lancepb.Transaction) error {
	if _, err := WriteVersion(ctx, p.loc, p.ds, p.cfg.GetStorageVersion(), m, txn, p.now()); err != nil {
		return err
	}
	if err := writeHint(ctx, p.loc, m.Version()); err != nil {
		p.logger.Warn("write latest_version_hint.json", "version", m.Version(), "err", err)
	}
	return nil
}

// WriteVersion lays version m of dataset ds, committed by txn, out in
// loc as a Publisher does (without the version hint): the transaction
// file, then the manifest file, created only if absent. It returns the
// size of the manifest it wrote, or -1 when the version was already
// there with the same transaction (written by another writer of the
// same decision: the publisher, or a namespace answering its client);
// with another transaction it fails with ErrForeignVersion and writes
// nothing. m must be the log's manifest of the version (declog.Replay of
// its committed record) and storageVersion the dataset configuration's,
// so that every writer of a version writes the same manifest but for its
// timestamp.
func WriteVersion(ctx context.Context, loc *Location, ds, storageVersion string, m *table.Manifest, txn *lancepb.Transaction, now time.Time) (int64, error) {
	// Writers of one version in this process take turns: the second
	// finds the first's manifest and writes nothing.
	mu := &writing[versionShard(loc.URL, m.Version())]
	mu.Lock()
	defer mu.Unlock()
	f, err := ManifestFile(m, txn, storageVersion, now)
	if err != nil {
		return 0, err
	}
	tb, err := txnBytes(txn)
	if err != nil {
		return 0, fmt.Errorf("%w: encode transaction: %v", ErrUnpublishable, err)
	}
	mb, err := encode(f)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrUnpublishable, err)
	}
	tkey := transactionsDir + f.Manifest.GetTransactionFile()
	mkey := versionsDir + table.ManifestFileName(m.Version(), true)
	// Another writer of the same decision usually got there first: then
	// nothing is written (each write is synced to disk).
	if there, xerr := loc.Bucket.Exists(ctx, mkey); xerr == nil && there {
		err = errVersionThere
	} else {
		// The transaction file first, then the manifest (the commit
		// point a reader sees).
		var terr error
		if terr, err = loc.CreatePairIfAbsent(ctx, tkey, tb, mkey, mb); terr != nil && !IsExists(terr) {
			return 0, fmt.Errorf("publish %s@%d: write %s: %w", ds, m.Version(), tkey, terr)
		}
	}
	if IsExists(err) || errors.Is(err, errVersionThere) {
		f, rerr := ReadVersion(ctx, loc, m.Version())
		if rerr != nil {
			return 0, rerr
		}
		id := txnID(f)
		if id != txn.GetUuid() {
			return 0, fmt.Errorf("%w: version %d in %s has transaction %s, the log committed %s", ErrForeignVersion, m.Version(), loc.URL, id, txn.GetUuid())
		}
		return -1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("publish %s@%d: write %s: %w", ds, m.Version(), mkey, err)
	}
	return int64(len(mb)), nil
}

// writing orders the writers of one version in this process (a
// namespace answering its client and the publisher, both acting on one
// decision): sharded by location and version.
var writing [64]sync.Mutex

func versionShard(url string, v uint64) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(url))
	return int((uint64(h.Sum32()) + v) % uint64(len(writing)))
}
