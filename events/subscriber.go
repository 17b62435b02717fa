package events

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/natsperm"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/table"
)

// Config configures a Subscriber to one dataset's committed versions.
type Config struct {
	// Prefix is the subject prefix of the deployment (default "cg").
	Prefix string
	// Dataset is the dataset to follow (required).
	Dataset string
	// From is the first version delivered: 1 replays the whole history,
	// v replays from v on; 0 delivers only versions committed after Run
	// starts. A durable subscriber uses From only when its consumer is
	// created; later runs resume after the last version it acknowledged.
	From uint64
	// Durable names a durable consumer: the server remembers how far it
	// got, across restarts. Empty means an ephemeral (ordered) consumer.
	Durable string
	// AckWait is the durable consumer's AckWait (default 30 s): how long a
	// version handed to a handler that died stays with it.
	AckWait time.Duration
}

// Committed is one committed version, with the transaction that made it
// and what it changed.
type Committed struct {
	Dataset  string
	Version  uint64
	TxnID    string
	Seq      uint64 // CG_DEC stream sequence of the record
	Op       table.Op
	Txn      *lancepb.Transaction // as committed (after rebase)
	Decision *cellguardpb.Decision
	// Manifest is the new version; Previous the one before (nil for 1).
	Manifest *table.Manifest
	Previous *table.Manifest
	Summary  Summary
	// Time is when the log stored the version's record (the server's
	// clock): for history replayed from Config.From, when it was decided.
	Time time.Time
}

// Handler handles one committed version. Returning an error stops Run
// with that error; a durable subscriber gets the version again on its
// next Run.
type Handler func(ctx context.Context, c *Committed) error

// Subscriber delivers a dataset's committed versions in order, each once
// per run: first the history from Config.From, then live.
type Subscriber struct {
	cfg Config
	sc  subject.Scheme
	js  jetstream.JetStream
	nc  *nats.Conn
}

// NewSubscriber checks cfg; Run does the I/O.
func NewSubscriber(nc *nats.Conn, cfg Config) (*Subscriber, error) {
	sc, err := subject.NewScheme(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	if err := subject.ValidateLog(cfg.Dataset); err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	if cfg.Durable != "" && !validName(cfg.Durable) {
		return nil, fmt.Errorf("events: %w: durable name %q", ErrInvalidConfig, cfg.Durable)
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 30 * time.Second
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return &Subscriber{cfg: cfg, sc: sc, js: js, nc: nc}, nil
}

// Run delivers versions to h, one at a time and in version order, until
// ctx ends (then it returns nil) or h or the log fails. Run blocks; the
// goroutines it starts have exited when it returns.
//
// A read the server refuses for lack of permission ends Run at once with
// an error matching ErrPermission.
func (s *Subscriber) Run(ctx context.Context, h Handler) error {
	gctx, done := natsperm.For(s.nc).Guard(ctx, append([]string{s.sc.DecOf(s.cfg.Dataset)}, natsperm.JetStream...)...)
	return done(s.runGuarded(gctx, h))
}

func (s *Subscriber) runGuarded(ctx context.Context, h Handler) error {
	dl, err := declog.Open(ctx, s.js, s.sc, declog.Options{})
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	r := &run{s: s, dl: dl, older: dl.Versions(s.cfg.Dataset), h: h}
	err = r.run(ctx)
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrMsgIteratorClosed)) {
		return nil
	}
	return err
}

// run is the state of one Run: the manifest of the last version handled.
// Manifests it does not have are rebuilt from the newest checkpoint and
// the log, as every reader of the decision log rebuilds them.
type run struct {
	s      *Subscriber
	dl     *declog.Log
	older  table.Versions // the dataset's versions, for Restore and restarts
	h      Handler
	last   *table.Manifest
	lastV  uint64
	loaded bool // last is known (a durable learns it from its first record)
}

func (r *run) run(ctx context.Context) error {
	s := r.s
	filter := s.sc.Dec(s.cfg.Dataset, subject.Committed)
	start, err := r.start(ctx)
	if err != nil {
		return err
	}
	if s.cfg.Durable == "" {
		// A live scan of the log: it notices a stalled consumer and goes
		// on from a new one (declog's live.go).
		for rec, err := range r.dl.Scan(ctx, filter, start, declog.ScanOptions{Live: true}) {
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return fmt.Errorf("events: follow %s: %w", s.cfg.Dataset, err)
			}
			if err := r.deliver(ctx, declog.Delivery{Record: rec}); err != nil {
				return err
			}
		}
		return nil
	}
	cons, err := r.durable(ctx, filter, start)
	if err != nil {
		return fmt.Errorf("events: follow %s: %w", s.cfg.Dataset, err)
	}
	return consume(ctx, r.dl, cons, 1, "follow "+s.cfg.Dataset, func(d declog.Delivery, err error) error {
		if err != nil {
			_ = d.Msg.Nak()
			return fmt.Errorf("events: %w", err)
		}
		return r.deliver(ctx, d)
	})
}

// deliver hands one committed record to the handler and, for a durable
// subscriber, acknowledges it (or hands it back when the handler failed).
func (r *run) deliver(ctx context.Context, d declog.Delivery) error {
	s, m := r.s, d.Msg
	if err := r.handle(ctx, d.Record); err != nil {
		if s.cfg.Durable != "" {
			_ = m.Nak()
		}
		return err
	}
	if s.cfg.Durable != "" {
		// Acknowledge even when the handler just cancelled ctx: it did
		// handle the version.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := m.DoubleAck(actx)
		cancel()
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("events: ack version: %w", err)
		}
	}
	return nil
}

// start finds the log sequence to start at and the manifest before it.
func (r *run) start(ctx context.Context) (uint64, error) {
	s := r.s
	switch from := s.cfg.From; {
	case from == 1:
		r.loaded = true
		return 1, nil
	case from == 0:
		m, seq, err := r.dl.Load(ctx, s.cfg.Dataset, 0, r.older)
		if errors.Is(err, declog.ErrNoDataset) {
			r.loaded = true
			return 1, nil
		}
		if err != nil {
			return 0, fmt.Errorf("events: %w", err)
		}
		r.last, r.lastV, r.loaded = m, m.Version(), true
		return seq + 1, nil
	default:
		m, seq, err := r.dl.Load(ctx, s.cfg.Dataset, from-1, r.older)
		if err != nil {
			return 0, fmt.Errorf("events: start at version %d: %w", from, err)
		}
		r.last, r.lastV, r.loaded = m, m.Version(), true
		return seq + 1, nil
	}
}

// durable returns the named consumer, creating it at start.
func (r *run) durable(ctx context.Context, filter string, start uint64) (jetstream.Consumer, error) {
	s := r.s
	cons, err := s.js.Consumer(ctx, s.sc.DecStream(), s.cfg.Durable)
	if err == nil {
		r.loaded = false // resume: learn the manifest from the first record
		return cons, nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, err
	}
	return s.js.CreateConsumer(ctx, s.sc.DecStream(), jetstream.ConsumerConfig{
		Durable:       s.cfg.Durable,
		Description:   "cellguard versions of " + s.cfg.Dataset,
		FilterSubject: filter,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   start,
		MaxAckPending: 1, // strict version order, also across redeliveries
		AckWait:       s.cfg.AckWait,
		MaxDeliver:    -1,
	})
}

// handle turns a log record into a Committed and calls the handler.
func (r *run) handle(ctx context.Context, rec declog.Record) error {
	s := r.s
	if r.loaded && rec.Version <= r.lastV {
		return nil // seen already (a redelivery)
	}
	if !r.loaded || rec.Version != r.lastV+1 {
		if err := r.loadBefore(ctx, rec.Version); err != nil {
			return err
		}
	}
	next, txn, err := declog.Replay(ctx, r.last, rec, r.older)
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	op, _ := table.OpOf(txn)
	c := &Committed{
		Dataset: s.cfg.Dataset, Version: rec.Version, TxnID: rec.TxnID, Seq: rec.Seq, Op: op,
		Txn: txn, Decision: rec.Decision, Manifest: next, Previous: r.last, Summary: Summarize(r.last, next),
		Time: rec.Time,
	}
	if err := r.h(ctx, c); err != nil {
		return err
	}
	r.last, r.lastV, r.loaded = next, next.Version(), true
	return nil
}

// loadBefore reads the manifest of version v-1.
func (r *run) loadBefore(ctx context.Context, v uint64) error {
	r.last, r.lastV, r.loaded = nil, 0, true
	if v <= 1 {
		return nil
	}
	m, _, err := r.dl.Load(ctx, r.s.cfg.Dataset, v-1, r.older)
	if err != nil {
		return fmt.Errorf("events: version %d: %w", v-1, err)
	}
	r.last, r.lastV = m, m.Version()
	return nil
}
