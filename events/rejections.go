package events

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/declog"
	"cellguard/internal/natsperm"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
	"cellguard/rejection"
)

// Errors of the events package.
var (
	// ErrInvalidConfig reports a configuration Validate refuses.
	ErrInvalidConfig = errors.New("invalid config")
	// ErrDrop, returned (or wrapped) by a rejection handler, acknowledges
	// the rejection for good without handling it: it is never delivered
	// again. Use it for jobs that no longer make sense.
	ErrDrop = errors.New("drop rejection")
	// ErrPermission reports a read the NATS server refused for lack of
	// permission; Run returns it at once (a *natsperm.Error naming the
	// subject).
	ErrPermission = natsperm.ErrPermission
	// ErrDatasetDeleted is matched by a delivered rejection whose dataset
	// was deleted (reason DATASET_DELETED): a handler should return
	// ErrDrop, since no recomputation can commit.
	ErrDatasetDeleted = rejection.ErrDatasetDeleted
)

// RejectionsConfig configures a feed of rejected transactions.
type RejectionsConfig struct {
	// Prefix is the subject prefix of the deployment (default "cg").
	Prefix string
	// Dataset restricts the feed to one dataset; empty means all datasets.
	Dataset string
	// Queue names the durable consumer a pool of workers shares: each
	// rejection goes to one worker of the pool, and one that is not
	// acknowledged (the worker failed or died) goes to another. Empty
	// means an ephemeral feed that only observes: every Run sees every
	// rejection, and acknowledging does nothing.
	Queue string
	// FromStart makes a new queue (or an ephemeral feed) start at the
	// first rejection in the log instead of the next one. An existing
	// queue resumes where it is.
	FromStart bool
	// AckWait is how long a rejection handed to a worker stays with it
	// before it is delivered again (default 30 s). The handler's context
	// is kept alive meanwhile by progress signals every AckWait/3.
	AckWait time.Duration
	// RetryDelay is how long a rejection whose handler failed waits before
	// it is delivered again (default 1 s).
	RetryDelay time.Duration
	// MaxDeliver bounds the deliveries of one rejection (default -1:
	// unlimited).
	MaxDeliver int
}

// Rejected is one rejected transaction from the decision log.
type Rejected struct {
	Dataset string
	TxnID   string
	Seq     uint64 // CG_DEC stream sequence of the record
	// Err carries the reason, the violations (with the culprit version
	// and transaction) and the message; errors.Is(Err,
	// rejection.ErrRetryable) says whether recomputing can help. It is
	// the error the producer's Commit returned (producer.RejectedError).
	Err      *rejection.Error
	Decision *cellguardpb.Decision
	// Delivery counts deliveries of this rejection to the queue (1 the
	// first time).
	Delivery uint64
	// Time is when the log stored the rejection (the server's clock).
	Time time.Time
}

// Txn returns the rejected transaction exactly as it was staged. The
// committer records it on every rejection of a body that decoded; for
// undecodable bodies ok is false and the violations and message are all
// there is.
func (r *Rejected) Txn() (*lancepb.Transaction, bool) {
	b := r.Decision.GetTransaction()
	if len(b) == 0 {
		return nil, false
	}
	t := &lancepb.Transaction{}
	if proto.Unmarshal(b, t) != nil {
		return nil, false
	}
	return t, true
}

// RejectionHandler handles one rejection. Returning nil acknowledges it;
// an error hands it back for another delivery after RetryDelay (to any
// worker of the pool), unless it wraps ErrDrop.
type RejectionHandler func(ctx context.Context, r *Rejected) error

// Rejections delivers rejected transactions: as a shared work queue (a
// durable consumer, Config.Queue) or as an ephemeral feed.
type Rejections struct {
	cfg RejectionsConfig
	sc  subject.Scheme
	js  jetstream.JetStream
	nc  *nats.Conn
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func validName(s string) bool { return nameRE.MatchString(s) }

// NewRejections checks cfg; Run does the I/O.
func NewRejections(nc *nats.Conn, cfg RejectionsConfig) (*Rejections, error) {
	sc, err := subject.NewScheme(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	if cfg.Dataset != "" {
		if err := subject.ValidateLog(cfg.Dataset); err != nil {
			return nil, fmt.Errorf("events: %w", err)
		}
	}
	if cfg.Queue != "" && !validName(cfg.Queue) {
		return nil, fmt.Errorf("events: %w: queue name %q", ErrInvalidConfig, cfg.Queue)
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.AckWait < time.Second {
		return nil, fmt.Errorf("events: %w: AckWait %v < 1s", ErrInvalidConfig, cfg.AckWait)
	}
	if cfg.RetryDelay == 0 {
		cfg.RetryDelay = time.Second
	}
	if cfg.MaxDeliver == 0 {
		cfg.MaxDeliver = -1
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	return &Rejections{cfg: cfg, sc: sc, js: js, nc: nc}, nil
}

func (q *Rejections) filter() string {
	if q.cfg.Dataset == "" {
		return q.sc.RejectedAll()
	}
	return q.sc.Dec(q.cfg.Dataset, subject.Rejected)
}

// Run delivers rejections to h one at a time until ctx ends (then it
// returns nil) or the feed fails; a server restart or a lost connection
// is not a failure: Run goes on once the server is back. With a queue, the rejection being
// handled when ctx ends is handed back for another worker. Run blocks;
// the goroutines it starts have exited when it returns. A read the server
// refuses for lack of permission ends Run at once with an error matching
// ErrPermission.
func (q *Rejections) Run(ctx context.Context, h RejectionHandler) error {
	gctx, done := natsperm.For(q.nc).Guard(ctx, append([]string{q.filter()}, natsperm.JetStream...)...)
	return done(q.run(gctx, h))
}

func (q *Rejections) run(ctx context.Context, h RejectionHandler) error {
	dl, err := declog.Open(ctx, q.js, q.sc, declog.Options{})
	if err != nil {
		return fmt.Errorf("events: rejections: %w", err)
	}
	if q.cfg.Queue == "" {
		return q.follow(ctx, dl, h)
	}
	cons, err := q.queue(ctx)
	if err != nil {
		return fmt.Errorf("events: rejections: %w", err)
	}
	// One at a time: spread the work over the pool, hold one job.
	return consume(ctx, dl, cons, 1, "rejections", func(d declog.Delivery, err error) error {
		if err != nil || d.Committed() {
			_ = d.Msg.TermWithReason("not a rejected decision")
			return nil
		}
		return q.deliver(ctx, d, h)
	})
}

// follow runs an ephemeral feed as a live scan of the log, which notices
// a stalled consumer and goes on from a new one (declog's live.go). It
// starts after the last record the log held when Run opened it, or at
// the first with FromStart.
func (q *Rejections) follow(ctx context.Context, dl *declog.Log, h RejectionHandler) error {
	start := uint64(1)
	if info := dl.Stream().CachedInfo(); !q.cfg.FromStart && info != nil {
		start = info.State.LastSeq + 1
	}
	for rec, err := range dl.Scan(ctx, q.filter(), start, declog.ScanOptions{Live: true}) {
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, declog.ErrMalformedRecord) || rec.Committed() {
			continue // not a rejected decision: skipped, as a queue drops it
		}
		if err != nil {
			return fmt.Errorf("events: rejections: %w", err)
		}
		if err := q.deliver(ctx, declog.Delivery{Record: rec, Delivered: 1}, h); err != nil {
			return err
		}
	}
	return nil
}

// queue returns the durable consumer of the queue, creating it.
func (q *Rejections) queue(ctx context.Context) (jetstream.Consumer, error) {
	deliver := jetstream.DeliverNewPolicy
	if q.cfg.FromStart {
		deliver = jetstream.DeliverAllPolicy
	}
	cons, err := q.js.Consumer(ctx, q.sc.DecStream(), q.cfg.Queue)
	if err == nil {
		return cons, nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, err
	}
	cons, err = q.js.CreateConsumer(ctx, q.sc.DecStream(), jetstream.ConsumerConfig{
		Durable:       q.cfg.Queue,
		Description:   "cellguard rejection queue",
		FilterSubject: q.filter(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: deliver,
		AckWait:       q.cfg.AckWait,
		MaxDeliver:    q.cfg.MaxDeliver,
	})
	if errors.Is(err, jetstream.ErrConsumerExists) { // another worker of the pool made it first
		return q.js.Consumer(ctx, q.sc.DecStream(), q.cfg.Queue)
	}
	return cons, err
}

// deliver runs h on one message and settles it. Only a failure of the
// feed itself is returned.
func (q *Rejections) deliver(ctx context.Context, d declog.Delivery, h RejectionHandler) error {
	m := d.Msg
	r := &Rejected{Dataset: d.Dataset, TxnID: d.TxnID, Seq: d.Seq, Err: rejection.FromDecision(d.Decision), Decision: d.Decision, Delivery: d.Delivered, Time: d.Time}
	if q.cfg.Queue == "" {
		if err := h(ctx, r); err != nil && !errors.Is(err, ErrDrop) && ctx.Err() == nil {
			return err
		}
		return nil
	}
	// Keep the job while it is handled: progress resets the AckWait.
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	alive := make(chan struct{})
	defer func() { cancel(); <-alive }() // the keep-alive ends before deliver returns
	go func() {
		defer close(alive)
		t := time.NewTicker(q.cfg.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	err := h(hctx, r)
	cancel()
	switch {
	case err == nil:
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := m.DoubleAck(actx); err != nil && ctx.Err() == nil {
			return fmt.Errorf("events: ack rejection %s: %w", r.TxnID, err)
		}
	case errors.Is(err, ErrDrop):
		_ = m.Term()
	case ctx.Err() != nil:
		_ = m.Nak() // shutting down: another worker takes it now
	default:
		_ = m.NakWithDelay(q.cfg.RetryDelay)
	}
	return nil
}
