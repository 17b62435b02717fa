// Package drop deletes a dataset: it appends the dataset's tombstone to
// the decision log (see declog.AppendTombstone), after which the
// committer rejects every transaction of the dataset with
// DATASET_DELETED and no publisher publishes it again. It is what
// `cellguard dataset delete` runs, and what a Lance REST namespace calls
// to drop a table:
//
//	res, err := drop.Dataset(ctx, js, log, "orders", drop.Options{Force: true, PurgeData: true})
//
// # What "being staged to" means
//
// Unless Options.Force is set, Dataset refuses (a *BusyError matching
// ErrBusy) a dataset that, when it checks,
//
//   - has undecided staged messages: CG_TXN holds at least one message
//     on the dataset's staging subject (<prefix>.txn.<dataset>, or
//     <prefix>.txn.<partition>.<dataset> where the stream partitions
//     them). A message stays in CG_TXN until the committer has appended
//     its decision and acknowledged it, so this counts every staged,
//     delivered-but-undecided and in-flight transaction; or
//   - has recent staging activity: the dataset's last decision-log record
//     was appended less than Options.Quiet ago (default one minute).
//
// The tombstone is appended fenced on the last record Dataset read. A
// decision that lands between the check and the append makes the append
// fail; without Force that is activity, and Dataset refuses; with Force
// it re-reads and tries again. A transaction staged after the check is
// harmless either way: it is decided after the tombstone, and rejected.
//
// # What stays
//
// The decision log cannot be purged (CG_DEC denies deletes: it is the
// source of truth), so the dataset's history stays readable (`dataset
// log`, `dataset show`, the producer's At) and its name stays taken: a
// creating transaction of a deleted name is rejected with
// DATASET_DELETED. Checkpoints stay too. The published Lance directory
// stays unless Options.PurgeData is set, in which case every object under
// it is deleted after the tombstone is in the log (a publisher that was
// still writing a lagging version may leave files behind: running
// Dataset again with PurgeData on the deleted dataset removes them).
package drop

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/natsperm"
	"cellguard/internal/publish"
	"cellguard/internal/retry"
	"cellguard/internal/subject"
)

// Errors of Dataset.
var (
	// ErrBusy is matched by a *BusyError: the dataset is being staged to
	// and Options.Force is not set.
	ErrBusy = errors.New("dataset is being staged to")
	// ErrNoDataset reports a name that was never created: the decision
	// log holds no committed record of it (a transaction staged to it
	// left a rejection at most).
	ErrNoDataset = errors.New("no such dataset")
)

// DefaultQuiet is how long a dataset's log must have been still for
// Dataset to delete it without Force.
const DefaultQuiet = time.Minute

// Options tunes Dataset. The zero value refuses a busy dataset, leaves the
// Lance directory in place, and waits DefaultQuiet.
type Options struct {
	// Force deletes the dataset even while it is being staged to; the
	// staged transactions are then rejected with DATASET_DELETED.
	Force bool
	// Quiet is how recent the dataset's last decision may be for it to
	// count as idle (0: DefaultQuiet; negative: any age).
	Quiet time.Duration
	// PurgeData deletes every object in the dataset's published Lance
	// directory after the tombstone is in the log.
	PurgeData bool
	// Note is recorded on the tombstone (who deleted it, and why).
	Note string
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Result is what Dataset did.
type Result struct {
	Dataset string
	Seq     uint64 // decision-log sequence of the tombstone
	Head    uint64 // the last committed version (0: never committed)
	Already bool   // the dataset was deleted before this call
	Staged  uint64 // staged messages left to be rejected (Force only)
	// Location is the dataset's published Lance directory ("" if none);
	// Purged counts the objects deleted from it (PurgeData only).
	Location string
	Purged   int
}

// BusyError says why a dataset counts as being staged to.
type BusyError struct {
	Dataset      string
	Staged       uint64        // undecided staged messages
	LastDecision time.Duration // age of the dataset's last log record
	Quiet        time.Duration
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("drop %s: %s: %d undecided staged message(s), last decision %s ago (quiet period %s); use force to delete anyway",
		e.Dataset, ErrBusy, e.Staged, e.LastDecision.Round(time.Millisecond), e.Quiet)
}

// Unwrap makes a *BusyError match ErrBusy.
func (e *BusyError) Unwrap() error { return ErrBusy }

// Dataset deletes ds: see the package documentation for what it checks,
// writes and leaves. Deleting a deleted dataset succeeds with
// Result.Already (and purges the Lance directory again when asked). A
// refusal by the NATS server (the user is not an admin) is a
// *natsperm.Error matching natsperm.ErrPermission, returned at once.
func Dataset(ctx context.Context, js jetstream.JetStream, l *declog.Log, ds string, opts Options) (res Result, err error) {
	if err := subject.Validate(ds); err != nil {
		return Result{}, fmt.Errorf("drop: %w", err)
	}
	sc := l.Scheme()
	ctx, done := natsperm.For(js.Conn()).Guard(ctx, append([]string{sc.DecOf(ds)}, natsperm.JetStream...)...)
	defer func() { err = done(err) }()
	res = Result{Dataset: ds}
	d := &dropper{js: js, l: l, ds: ds, opts: opts.withDefaults()}
	b := retry.Backoff{Initial: 20 * time.Millisecond, Max: time.Second, Jitter: true}
	err = retry.Do(ctx, 10, b, func(ctx context.Context) error { return d.tombstone(ctx, &res) },
		retry.Unless(ErrBusy, ErrNoDataset, natsperm.ErrPermission, context.Canceled, context.DeadlineExceeded))
	if err != nil {
		return res, err
	}
	if cfg, err := l.Config(ctx, ds); err == nil {
		res.Location = cfg.GetLocation()
	} else if !errors.Is(err, declog.ErrNoDataset) {
		return res, fmt.Errorf("drop %s: read configuration: %w", ds, err)
	}
	if opts.PurgeData && res.Location != "" {
		if res.Purged, err = publish.Purge(ctx, res.Location); err != nil {
			return res, fmt.Errorf("drop %s: deleted, but purging %s failed: %w", ds, res.Location, err)
		}
	}
	return res, nil
}

func (o Options) withDefaults() Options {
	if o.Quiet == 0 {
		o.Quiet = DefaultQuiet
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Note == "" {
		o.Note = "deleted"
	}
	return o
}

type dropper struct {
	js   jetstream.JetStream
	l    *declog.Log
	ds   string
	opts Options
	// tried is set once an append was sent: a tombstone found after
	// that may be this call's own (an append whose answer was lost).
	tried bool
}

// tombstone makes one attempt: read the log's end, check for activity,
// append fenced on it. ErrFenced (the log moved) is retried by Dataset.
func (d *dropper) tombstone(ctx context.Context, res *Result) error {
	sc := d.l.Scheme()
	if t, ok, err := d.l.Tombstone(ctx, d.ds); err != nil {
		return err
	} else if ok {
		res.Seq, res.Head, res.Already = t.Seq, t.Decision.GetHeadVersion(), !d.tried
		return nil
	}
	last, err := d.l.Stream().GetLastMsgForSubject(ctx, sc.DecOf(d.ds))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("drop %s: %w", d.ds, ErrNoDataset)
	}
	if err != nil {
		return fmt.Errorf("drop %s: read the log: %w", d.ds, err)
	}
	// Read after last: a version committed in between moves the log past
	// last, and the fenced append fails.
	head, err := d.head(ctx)
	if err != nil {
		return err
	}
	if head == 0 {
		// Rejections only: a tombstone would keep the name from ever
		// being created.
		return fmt.Errorf("drop %s: %w", d.ds, ErrNoDataset)
	}
	staged, err := d.staged(ctx)
	if err != nil {
		return err
	}
	age := d.opts.Now().Sub(last.Time)
	if !d.opts.Force && (staged > 0 || (d.opts.Quiet > 0 && age < d.opts.Quiet)) {
		return &BusyError{Dataset: d.ds, Staged: staged, LastDecision: age, Quiet: d.opts.Quiet}
	}
	d.tried = true
	seq, err := d.l.AppendTombstone(ctx, d.ds, last.Sequence, head, d.opts.Note)
	if errors.Is(err, declog.ErrFenced) && !d.opts.Force {
		// A decision landed since the check (or another admin deleted
		// it: the next attempt finds that tombstone).
		if t, ok, terr := d.l.Tombstone(ctx, d.ds); terr == nil && ok {
			res.Seq, res.Head, res.Already = t.Seq, t.Decision.GetHeadVersion(), true
			return nil
		}
		return &BusyError{Dataset: d.ds, Staged: staged, Quiet: d.opts.Quiet}
	}
	if err != nil {
		return err
	}
	res.Seq, res.Head, res.Staged = seq, head, staged
	return nil
}

// head is the dataset's last committed version (0: none).
func (d *dropper) head(ctx context.Context) (uint64, error) {
	r, ok, err := d.l.Last(ctx, d.l.Scheme().Dec(d.ds, subject.Committed))
	if err != nil || !ok {
		return 0, err
	}
	return r.Version, nil
}

// staged counts the messages CG_TXN holds for the dataset, on its
// staging subject and on its partitioned form.
func (d *dropper) staged(ctx context.Context) (uint64, error) {
	sc := d.l.Scheme()
	st, err := d.js.Stream(ctx, sc.TxnStream())
	if err != nil {
		return 0, fmt.Errorf("drop %s: staging stream: %w", d.ds, err)
	}
	var n uint64
	for _, filter := range sc.StagedFilters(d.ds) {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return 0, fmt.Errorf("drop %s: count staged messages: %w", d.ds, err)
		}
		for _, c := range info.State.Subjects {
			n += c
		}
	}
	return n, nil
}
