package producer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/declog"
	"cellguard/internal/retry"
	"cellguard/internal/subject"
	"cellguard/proto/lancepb"
	"cellguard/rejection"
)

// Stage publishes txn to its dataset's staging subject with the uuid as
// Nats-Msg-Id, and returns once JetStream has stored it; an error wraps
// ErrOutcomeUnknown when a publish may have stored it. It does not wait
// for the decision; Outcome finds it later. Staging the same Txn again is
// harmless: the stream drops the duplicate within its window, and the
// committer decides each uuid once.
func (c *Client) Stage(ctx context.Context, txn *Txn) error {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	ctx, done := c.guard(ctx, txn.dataset)
	_, err := c.stage(ctx, txn)
	return done(err)
}

func (c *Client) stage(ctx context.Context, txn *Txn) (*jetstream.PubAck, error) {
	if err := validDataset(txn.dataset); err != nil {
		return nil, err
	}
	body, err := txn.bytes()
	if err != nil {
		return nil, err
	}
	ack, err := c.publishStaged(ctx, txn.dataset, txn.ID(), body)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == codeMessageTooLarge && !errors.Is(err, ErrOutcomeUnknown) {
		// No retry can stage it: the same transaction is as large again.
		return nil, fmt.Errorf("producer: stage txn %s: %w: %d bytes, over the staging stream's message limit (%s)", txn.ID(), ErrInvalidTxn, len(body), apiErr.Description)
	}
	if err != nil {
		return nil, fmt.Errorf("producer: stage txn %s: %w", txn.ID(), err)
	}
	return ack, nil
}

// stageAttemptTimeout bounds one publish of a staged transaction; a
// healthy publish takes milliseconds.
const stageAttemptTimeout = 2 * time.Second

// stageRetry paces the publish attempts of stage.
var stageRetry = retry.Backoff{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond, Jitter: true}

// Commit stages txn and waits for its decision. It returns the version
// the transaction created, or a *RejectedError, or an error wrapping
// ErrOutcomeUnknown when ctx (or the default timeout) ends first.
//
// Committing a Txn again (after ErrOutcomeUnknown, say) is safe: the same
// uuid is never decided twice, and the earlier decision is looked up in
// the log when the stage turns out to be a repeat.
func (c *Client) Commit(ctx context.Context, txn *Txn) (uint64, error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	ctx, done := c.guard(ctx, txn.dataset)
	staged := txn.staged
	v, err := c.commit(ctx, txn)
	if err = done(err); (errors.Is(err, ErrPermission) || errors.Is(err, ErrBacklogFull)) && !errors.Is(err, ErrOutcomeUnknown) && (staged || txn.staged) {
		// Refused after an earlier stage landed: the decision may still
		// come.
		err = fmt.Errorf("producer: txn %s: %w: %w", txn.ID(), ErrOutcomeUnknown, err)
	}
	return v, err
}

func (c *Client) commit(ctx context.Context, txn *Txn) (uint64, error) {
	if err := validDataset(txn.dataset); err != nil {
		return 0, err
	}
	if _, err := txn.bytes(); err != nil {
		return 0, err
	}
	f, err := c.follow(ctx, txn.dataset)
	if err != nil {
		return 0, err
	}
	w := f.wait(txn.ID()) // before publishing: no decision can slip by
	defer w.cancel()
	repeat := txn.staged
	ack, err := c.stage(ctx, txn)
	if err != nil {
		if !errors.Is(err, ErrOutcomeUnknown) {
			return 0, err // refused: nothing was stored
		}
		repeat = true // it may have landed, or land yet: look for a decision
	} else {
		txn.staged = true
		repeat = repeat || ack.Duplicate
	}
	var found <-chan lookup
	if repeat {
		lctx, stop := context.WithCancel(ctx)
		ch := c.lookupAsync(lctx, txn.dataset, txn.ID(), txn.ReadVersion())
		defer func() { stop(); <-ch }() // the lookup ends before Commit returns
		found = ch
	}
	return c.await(ctx, f, w, found, txn.dataset, txn.ID(), txn)
}

type lookup struct {
	r     declog.Record
	found bool
	err   error
}

func (c *Client) lookupAsync(ctx context.Context, ds, id string, readVersion uint64) <-chan lookup {
	ch := make(chan lookup, 1)
	go func() {
		defer close(ch)
		r, found, err := c.findDecision(ctx, ds, id, readVersion)
		ch <- lookup{r: r, found: found, err: err}
	}()
	return ch
}

// await waits for the decision of id from the follower or the lookup.
//
// The follower reads the log live; when it makes no progress for a tick
// (its consumer stalled: the stream's leader was lost, a reconnect is
// under way) await also looks the decision up directly in the log, from
// just past what the follower has seen, once per tick: a decision made
// meanwhile is found within about a second instead of when the call
// times out. When the lookup finds nothing and txn is set (Commit), txn
// is staged again: harmless if it had landed (the stream drops the
// duplicate, the committer decides a uuid once), and it lands now if the
// first publish was lost with the leader.
func (c *Client) await(ctx context.Context, f *follower, w waiter, found <-chan lookup, ds, id string, txn *Txn) (uint64, error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var probe <-chan lookup // the stall lookup in flight, if any
	stopProbe := func() {}
	defer func() {
		stopProbe()
		if probe != nil {
			<-probe // it ends before await returns
		}
	}()
	lastSeen := f.seenSeq()
	for {
		select {
		case r := <-w.ch:
			return c.result(ctx, r)
		case l := <-found:
			found = nil
			if l.found {
				return c.result(ctx, l.r)
			}
		case l := <-probe:
			probe = nil
			if l.found {
				return c.result(ctx, l.r)
			}
		case <-ctx.Done():
			return 0, fmt.Errorf("producer: txn %s: %w: %w", id, ErrOutcomeUnknown, ctx.Err())
		case <-c.done():
			return 0, fmt.Errorf("producer: txn %s: %w: %w", id, ErrOutcomeUnknown, ErrClosed)
		case <-tick.C:
			if err := c.connErr(); err != nil {
				return 0, fmt.Errorf("producer: txn %s: %w: %w", id, ErrOutcomeUnknown, err)
			}
			f.mu.Lock()
			ferr := f.err
			f.mu.Unlock()
			if ferr != nil {
				return 0, fmt.Errorf("producer: txn %s: %w: %w", id, ErrOutcomeUnknown, ferr)
			}
			seen := f.seenSeq()
			if seen == lastSeen && probe == nil {
				probe, stopProbe = c.probeAsync(ctx, ds, id, seen+1, txn)
			}
			lastSeen = seen
		}
	}
}

// probeAsync looks for the decision of id in ds's log from sequence from,
// and stages txn again (when set) if there is none. It gives up after
// probeTimeout: a request lost with a stream leader must not block the
// next probe. The channel yields one result, then closes; stop cancels
// the probe.
func (c *Client) probeAsync(ctx context.Context, ds, id string, from uint64, txn *Txn) (_ <-chan lookup, stop func()) {
	ctx, stop = context.WithTimeout(ctx, probeTimeout)
	ch := make(chan lookup, 1)
	go func() {
		defer close(ch)
		var l lookup
		dl, err := c.decisionLog(ctx)
		if err == nil {
			l.r, l.found, err = dl.Find(ctx, ds, id, from)
		}
		if err == nil && !l.found && txn != nil {
			_, err = c.stage(ctx, txn)
		}
		l.err = err
		ch <- l
	}()
	return ch, stop
}

// probeTimeout bounds one stall probe of await.
const probeTimeout = 2 * time.Second

// result turns a decision record into Commit's result.
func (c *Client) result(ctx context.Context, r declog.Record) (uint64, error) {
	if r.Seq > 0 && r.Dataset != "" {
		c.learned(r.Dataset, r.Seq)
	}
	if r.Committed() {
		return r.Version, nil
	}
	if r.Decision == nil {
		full, err := c.record(ctx, r.Seq)
		if err != nil {
			return 0, fmt.Errorf("producer: txn %s: %w: %w", r.TxnID, ErrOutcomeUnknown, err)
		}
		r = full
	}
	if isWithdrawal(r.Decision) {
		return 0, fmt.Errorf("producer: txn %s: %w: withdrawn, its uuid never commits", r.TxnID, ErrNotStaged)
	}
	return 0, rejection.FromDecision(r.Decision)
}

// Outcome finds the decision of transaction txnID of dataset ds, read at
// readVersion, after a crash or a timeout lost it. It returns the
// committed version or a *RejectedError. When the transaction is neither
// staged nor decided, Outcome withdraws its uuid (fate.go) and waits for
// the uuid's decision: ErrNotStaged when the withdrawal took it (the
// transaction never commits; only then is it safe to recompute it under
// a new uuid), else the transaction's own decision. Whatever is not
// decided when ctx (or the default timeout) ends gives ErrOutcomeUnknown.
// Committing the same Txn again is always safe.
func (c *Client) Outcome(ctx context.Context, ds, txnID string, readVersion uint64) (_ uint64, err error) {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	ctx, done := c.guard(ctx, ds)
	defer func() { err = done(unknownUnlessDecided(txnID, ds, err)) }()
	if err := subject.ValidTxnID(txnID); err != nil {
		return 0, fmt.Errorf("producer: outcome of txn %q: %w: %v", txnID, ErrInvalidOption, err)
	}
	f, err := c.follow(ctx, ds)
	if err != nil {
		return 0, err
	}
	w := f.wait(txnID)
	defer w.cancel()
	// Staged first, then the log: a message leaves the staging stream only
	// after its decision is in the log, so one of the two sees it. Both
	// are shortcuts: the withdrawal below decides what they do not see.
	pending, err := c.pending(ctx, ds, txnID)
	if err != nil {
		return 0, err
	}
	r, found, err := c.findDecision(ctx, ds, txnID, readVersion)
	if err != nil {
		return 0, err
	}
	if found {
		return c.result(ctx, r)
	}
	select {
	case r := <-w.ch:
		return c.result(ctx, r)
	default:
	}
	if !pending {
		if _, err := c.withdraw(ctx, ds, txnID, readVersion); err != nil {
			if errors.Is(err, ErrOutcomeUnknown) {
				return 0, err
			}
			// A refused withdrawal shows nothing about the transaction.
			return 0, fmt.Errorf("producer: txn %s on %s: %w: %w", txnID, ds, ErrOutcomeUnknown, err)
		}
	}
	return c.await(ctx, f, w, nil, ds, txnID, nil)
}

// unknownUnlessDecided makes an error of Outcome's wrap ErrOutcomeUnknown
// unless it is an answer (a rejection, ErrNotStaged) or a bad argument:
// a read that failed leaves the outcome unknown, whatever the reason.
func unknownUnlessDecided(txnID, ds string, err error) error {
	var rej *RejectedError
	switch {
	case err == nil, errors.As(err, &rej), errors.Is(err, ErrNotStaged), errors.Is(err, ErrOutcomeUnknown),
		errors.Is(err, ErrInvalidOption), errors.Is(err, subject.ErrInvalidDataset), errors.Is(err, ErrClosed):
		return err
	}
	return fmt.Errorf("producer: txn %s on %s: %w: %w", txnID, ds, ErrOutcomeUnknown, err)
}

// pending reports whether a message for txnID waits in the staging stream.
func (c *Client) pending(ctx context.Context, ds, txnID string) (bool, error) {
	_, txnStream, err := c.streams(ctx)
	if err != nil {
		return false, err
	}
	// The committer's stream stores a staged message under its partition
	// (subject.StagedFilters), or under the staging subject itself if it
	// was staged before the stream was partitioned.
	scanned := 0
	for _, filter := range c.sc.StagedFilters(ds) {
		for seq := uint64(1); ; scanned++ {
			if scanned >= c.cfg.MaxScan {
				return false, fmt.Errorf("producer: look for staged txn %s: more than %d staged messages: %w", txnID, c.cfg.MaxScan, ErrOutcomeUnknown)
			}
			m, err := txnStream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return false, fmt.Errorf("producer: look for staged txn %s: %w", txnID, err)
			}
			if id := m.Header.Get(subject.HdrMsgID); id == txnID || (id == "" && bodyUUID(m.Data) == txnID) {
				return true, nil
			}
			seq = m.Sequence + 1
		}
	}
	return false, nil
}

func bodyUUID(b []byte) string {
	t := &lancepb.Transaction{}
	if proto.Unmarshal(b, t) != nil {
		return ""
	}
	return t.GetUuid()
}
