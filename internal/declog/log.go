package declog

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/logrec"
	"cellguard/internal/subject"
)

// Errors of the decision log.
var (
	// ErrMalformedRecord reports a log message that is not a valid
	// decision record (bad subject, header or body).
	ErrMalformedRecord = logrec.ErrMalformedRecord
	// ErrUntrustedCheckpoint reports a checkpoint that fails the trust
	// rule; readers replay from the start instead.
	ErrUntrustedCheckpoint = errors.New("untrusted checkpoint")
	// ErrNoDataset reports a dataset with no committed record.
	ErrNoDataset = errors.New("dataset has no committed version")
	// ErrNoVersion reports a version the log does not hold.
	ErrNoVersion = errors.New("version not in the log")
	// ErrFenced reports an append refused because the dataset's log moved
	// past the sequence the writer expected: another writer (or an
	// earlier attempt of this one) appended first.
	ErrFenced = errors.New("declog: fenced")
	// ErrAppend reports an append whose outcome is unknown (timeout, no
	// responders, leader change): the log must be re-read to find out.
	ErrAppend = errors.New("declog: append failed")
	// ErrLogFull reports an append the server refused for want of room:
	// the decision stream is at its MaxBytes or MaxMsgs (Discard: new),
	// or the account or server has no storage left. Nothing was stored;
	// the append can succeed only once the log has room.
	ErrLogFull = errors.New("declog: decision log full")
)

// Options tunes a Log. The zero Options passes each caller's context to
// every request unchanged.
type Options struct {
	// RequestTimeout bounds each single read request (a direct get, a
	// consumer creation) below the caller's context. A request
	// sent as a connection drops, or to a server shutting down, is never
	// answered; a bound turns that into an error the caller can retry
	// instead of a stall for the caller's whole deadline.
	RequestTimeout time.Duration
	// MidBatch, if set, runs in Append between the members of an atomic
	// batch: a test hook that injects a crash there.
	MidBatch func(ds string) error
	// FullAPI says the log's user may send any JetStream API request (the
	// committer's role). Checkpoints are then read with message gets and
	// listed with a pull consumer (objects.go), and bounded scans fetched
	// (pullBounded): no stalled consumer holds them up. Both need
	// requests a worker or a reader may not send (a direct get by
	// sequence on the bucket's stream, a pull from it, deleting the
	// consumer an ordered fetch replaces); without FullAPI, nats.go's
	// object store and an ordered consumer's Messages read them.
	FullAPI bool
	// Reread, if set, is told of each scan that reads again at the stream
	// leader (chain.go): the filter, and the sequence it reads from.
	Reread func(filter string, from uint64)
}

// Log reads and writes the decision log and the checkpoints of one
// deployment. It is safe for concurrent use.
type Log struct {
	sc   subject.Scheme
	js   jetstream.JetStream
	dec  jetstream.Stream
	opts Options

	mu  sync.Mutex
	obj jetstream.ObjectStore // nil until the bucket is found
	// objStr is the bucket's stream, for reading objects (objects.go).
	objStr jetstream.Stream
	// liveRestarts counts live scans found stalled and started over
	// (live.go), for tests.
	liveRestarts atomic.Int64
	// noDirect: the stream answered no direct get to this user, so
	// bounded scans read with consumers only (direct.go).
	noDirect atomic.Bool
	// rereads counts scans that read again at the stream leader.
	rereads atomic.Int64
}

// New returns the Log over the stream dec; obj may be nil (the checkpoint
// bucket is then looked up on first use).
func New(js jetstream.JetStream, sc subject.Scheme, dec jetstream.Stream, obj jetstream.ObjectStore, opts Options) *Log {
	return &Log{sc: sc, js: js, dec: dec, obj: obj, opts: opts}
}

// Open looks up the decision stream of the deployment with scheme sc.
func Open(ctx context.Context, js jetstream.JetStream, sc subject.Scheme, opts Options) (*Log, error) {
	dec, err := js.Stream(ctx, sc.DecStream())
	if err != nil {
		return nil, fmt.Errorf("declog: stream %s (is a committer running?): %w", sc.DecStream(), err)
	}
	return New(js, sc, dec, nil, opts), nil
}

// Scheme returns the subject scheme of the log.
func (l *Log) Scheme() subject.Scheme { return l.sc }

// Stream returns the decision stream.
func (l *Log) Stream() jetstream.Stream { return l.dec }

// request bounds one request by Options.RequestTimeout.
func (l *Log) request(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.opts.RequestTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, l.opts.RequestTimeout)
}

// Last returns the last record on filter (a dataset's DecOf, or one of
// its outcome subjects) with its body, or ok=false if there is none.
func (l *Log) Last(ctx context.Context, filter string) (Record, bool, error) {
	if leaderOnly(ctx) {
		return l.LastAtLeader(ctx, filter)
	}
	rctx, cancel := l.request(ctx)
	defer cancel()
	m, err := l.dec.GetLastMsgForSubject(rctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, fmt.Errorf("declog: last record on %s: %w", filter, err)
	}
	r, err := Parse(l.sc, m.Sequence, m.Subject, m.Header, nonNil(m.Data))
	r.Time = m.Time
	return r, err == nil, err
}

// At returns the record at seq with its body. A purged or missing
// record wraps jetstream.ErrMsgNotFound.
func (l *Log) At(ctx context.Context, seq uint64) (Record, error) {
	rctx, cancel := l.request(ctx)
	defer cancel()
	m, err := l.getMsg(rctx, seq)
	if err != nil {
		return Record{}, fmt.Errorf("declog: record %d: %w", seq, err)
	}
	r, err := Parse(l.sc, m.Sequence, m.Subject, m.Header, nonNil(m.Data))
	r.Time = m.Time
	return r, err
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// ScanOptions selects what Scan reads.
type ScanOptions struct {
	// HeadersOnly leaves Record.Decision nil: enough to find an id, a
	// version or a sequence, and much cheaper.
	HeadersOnly bool
	// To is the last sequence read; 0 means the last record on the filter
	// when the scan starts.
	To uint64
	// Live keeps reading past the end, waiting for new records, until
	// the caller stops ranging or ctx ends (To is then ignored).
	Live bool
	// Partial lets a bounded read end early, without an error, where the
	// stream's direct gets stop short of To (a replica behind, or a
	// batch that failed), instead of going on with a consumer: for a
	// caller that reads again anyway. Without direct gets it reads as
	// usual.
	Partial bool
	// After is the version of the dataset's committed record before
	// from, when the caller knows it (0: not known): the first committed
	// record the scan hands out must be the version after it (chain.go).
	After uint64
	// AtLeader reads every record from the stream leader (STREAM.MSG.GET,
	// a request per record) instead of any replica. A bounded scan only.
	AtLeader bool
}

// Scan iterates over the records on filter with sequence ≥ from, in log
// order: a live scan through an ordered consumer, a bounded one with
// batched direct gets, going on with an ordered consumer where those
// stop short (direct.go). A committed record that does not follow the
// one before it, or a malformed record, read from a replica, makes the
// scan read again at the stream leader from there (chain.go). The
// sequence ends after the last record (ScanOptions.To), or with one
// error: a failed read, a malformed record, or ctx's error when ctx ends
// (a live scan's normal end). A live scan yields a malformed record's
// error (wrapping ErrMalformedRecord) and goes on past it if the caller
// goes on ranging.
func (l *Log) Scan(ctx context.Context, filter string, from uint64, opts ScanOptions) iter.Seq2[Record, error] {
	if opts.Live {
		return l.scanLive(ctx, filter, max(from, 1), opts)
	}
	return func(yield func(Record, error) bool) {
		from = max(from, 1)
		to := opts.To
		opts.AtLeader = opts.AtLeader || leaderOnly(ctx)
		if to == 0 {
			last, ok, err := l.lastSeq(ctx, filter)
			if opts.AtLeader {
				last, ok, err = l.leaderLastSeq(ctx, filter)
			}
			if err != nil {
				yield(Record{}, err)
				return
			}
			if !ok {
				return
			}
			to = last
		}
		if to < from {
			return
		}
		ch := newChain(opts.After, from)
		if opts.AtLeader {
			l.leaderRange(ctx, filter, from, to, opts.HeadersOnly, ch.pass(yield))
			return
		}
		suspect := false
		guarded := ch.guard(yield, &suspect)
		defer func() {
			if suspect {
				l.reread(filter, ch.next)
				l.leaderRange(ctx, filter, ch.next, to, opts.HeadersOnly, ch.pass(yield))
			}
		}()
		next, complete, stopped := l.directRange(ctx, filter, from, to, opts.HeadersOnly, guarded)
		if complete || stopped || (opts.Partial && !l.noDirect.Load()) {
			return
		}
		cons, err := l.ordered(ctx, filter, next, opts.HeadersOnly)
		if err != nil {
			yield(Record{}, err)
			return
		}
		defer l.dropConsumer(cons)
		for d, err := range l.pull(ctx, cons, 1000, opts.HeadersOnly, true) {
			if err != nil {
				guarded(Record{}, err)
				return
			}
			if d.Seq > to {
				return
			}
			if !guarded(d.Record, nil) {
				return
			}
			if d.Seq >= to || d.pending == 0 {
				return
			}
		}
	}
}

// lastSeq returns the sequence of the last message on filter.
func (l *Log) lastSeq(ctx context.Context, filter string) (uint64, bool, error) {
	if leaderOnly(ctx) {
		return l.leaderLastSeq(ctx, filter)
	}
	rctx, cancel := l.request(ctx)
	defer cancel()
	m, err := l.dec.GetLastMsgForSubject(rctx, filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("declog: last record on %s: %w", filter, err)
	}
	return m.Sequence, true, nil
}

// readIdle is how long the server keeps a read's consumer that nobody
// pulls from (nats.go's default for an ordered consumer is 5 minutes). A
// read in progress always has a pull waiting; a reader that went away
// leaves its consumer this long, unless it may delete it (dropConsumer).
const readIdle = 30 * time.Second

// ordered creates an ordered consumer on filter from sequence from.
func (l *Log) ordered(ctx context.Context, filter string, from uint64, headersOnly bool) (jetstream.Consumer, error) {
	rctx, cancel := l.request(ctx)
	defer cancel()
	cons, err := l.js.OrderedConsumer(rctx, l.sc.DecStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{filter},
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       from,
		HeadersOnly:       headersOnly,
		InactiveThreshold: readIdle,
	})
	if err != nil {
		return nil, fmt.Errorf("declog: read %s: %w", filter, err)
	}
	return cons, nil
}

// dropConsumer deletes a read's consumer once the read is over, in the
// background, when this log's user may (Options.FullAPI); other users
// may not delete consumers of the decision stream, and leave theirs to
// readIdle.
func (l *Log) dropConsumer(cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if !l.opts.FullAPI || info == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.js.DeleteConsumer(ctx, l.sc.DecStream(), info.Name)
	}()
}

// Delivery is one record pulled from a consumer, with the message to
// acknowledge when the consumer is durable.
type Delivery struct {
	Record
	Msg jetstream.Msg
	// Delivered counts deliveries of the message (1 the first time).
	Delivered uint64
	pending   uint64
}

// Pull iterates over the records a consumer the caller owns delivers (a
// durable consumer the caller acknowledges, or an ordered one), at most
// max in flight, until the caller stops ranging or ctx ends. A malformed
// record is yielded with its Delivery (Msg set, to settle it) and an
// error wrapping ErrMalformedRecord, and the iteration goes on if the
// caller continues; any other error ends it.
func (l *Log) Pull(ctx context.Context, cons jetstream.Consumer, max int, headersOnly bool) iter.Seq2[Delivery, error] {
	return l.pull(ctx, cons, max, headersOnly, false)
}

// delivery parses one pulled message.
func delivery(sc subject.Scheme, m jetstream.Msg, headersOnly bool) (Delivery, error) {
	md, err := m.Metadata()
	if err != nil {
		return Delivery{}, fmt.Errorf("declog: pull: %w", err)
	}
	var data []byte
	if !headersOnly {
		data = nonNil(m.Data())
	}
	r, err := Parse(sc, md.Sequence.Stream, m.Subject(), m.Headers(), data)
	r.Time = md.Timestamp
	d := Delivery{Record: r, Msg: m, Delivered: md.NumDelivered, pending: md.NumPending}
	d.Seq = md.Sequence.Stream
	return d, err
}
