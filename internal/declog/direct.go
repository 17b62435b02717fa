package declog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natsperm"
)

// A bounded read of the log (Scan with an end: a Find, a rebase's scan of
// the versions since a read version, a replay) asks the stream for its
// records in batches of direct gets: $JS.API.DIRECT.GET.<stream> with
// next_by_subj and batch. The stream's servers answer from their stores
// and no consumer is made. An ordered consumer per read would stay for
// the server's inactive threshold after the read ends: a busy Lance
// namespace makes about three reads per commit, and a stock server's
// limit of 1,000 consumers per stream would then refuse every new read
// and stall every LanceDB write.
//
// A direct get may be answered by a replica that is behind (leaderget.go).
// A batch that ends before the range does therefore does not end the
// read: the read goes on from where the batch stopped with an ordered
// consumer. Every bounded read in
// cellguard ends at a record on its own filter (the last one, or a head
// record), so on a single server, or a replica that is up to date, no
// consumer is made. So does a user whose server does not answer direct
// gets on the stream (no AllowDirect, or not allowed the request): after
// the first refusal the log reads with consumers only. And a long read
// of headers only (directBulk) goes on with a consumer, which sends no
// bodies.

// directBatch is how many records one direct get asks for.
const directBatch = 256

// directBulk: a headers-only read with more records than this left goes
// on with a consumer, which sends headers only; a direct get sends
// bodies too (a committer's first start reads every record's headers).
const directBulk = 4 * directBatch

// directWait bounds one batch when Options.RequestTimeout does not: an
// answer lost with a server that went down ends the batch, and the read
// goes on with a consumer.
const directWait = 10 * time.Second

// errDirectUnavailable: the stream answers no direct gets to this user.
var errDirectUnavailable = errors.New("direct gets unavailable")

// directRange yields the records on filter with sequences from..to that a
// replica's direct gets hand out, in order, and returns the sequence
// after the last one it read. complete reports that it read through to;
// stopped that the caller stopped ranging (or was handed an error that
// ends the read).
func (l *Log) directRange(ctx context.Context, filter string, from, to uint64, headersOnly bool, yield func(Record, error) bool) (next uint64, complete, stopped bool) {
	next = from
	if l.noDirect.Load() {
		return next, false, false
	}
	for next <= to {
		n, pending, err := l.directBatch(ctx, filter, next, to, headersOnly, yield)
		switch {
		case errors.Is(err, errStopped):
			return n, n > to, true
		case errors.Is(err, errDirectUnavailable):
			l.noDirect.Store(true)
			return n, false, false
		case err != nil:
			return n, false, false // the consumer goes on from n
		}
		if n == next && pending == 0 {
			return n, false, false // nothing on this replica from next on
		}
		if headersOnly && pending > directBulk {
			return n, false, false // a long read of headers: a consumer sends nothing else
		}
		next = n
	}
	return next, true, false
}

// errStopped: the caller stopped ranging, or an error was yielded.
var errStopped = errors.New("stopped")

// directBatch asks for up to directBatch records on filter from next on
// and yields those up to to. It returns the sequence after the last
// record it read (past to once a record beyond to arrived) and how many
// records the server said were left on filter after its batch.
func (l *Log) directBatch(ctx context.Context, filter string, next, to uint64, headersOnly bool, yield func(Record, error) bool) (uint64, uint64, error) {
	subj := "$JS.API.DIRECT.GET." + l.sc.DecStream()
	nc := l.js.Conn()
	wait := l.opts.RequestTimeout
	if wait <= 0 {
		wait = directWait
	}
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	gctx, done := natsperm.For(nc).Guard(rctx, subj)
	defer done(nil)
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return next, 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	req, _ := json.Marshal(map[string]any{"seq": next, "next_by_subj": filter, "batch": directBatch})
	if err := nc.PublishMsg(&nats.Msg{Subject: subj, Reply: inbox, Data: req}); err != nil {
		return next, 0, err
	}
	for got := 0; ; got++ {
		m, err := sub.NextMsgWithContext(gctx)
		if err != nil {
			// Refused, or no responders (nats.go's error for the 503
			// status): the stream answers this user no direct gets.
			if err := done(err); errors.As(err, new(*natsperm.Error)) || (got == 0 && errors.Is(err, nats.ErrNoResponders)) {
				return next, 0, fmt.Errorf("%w: %v", errDirectUnavailable, err)
			}
			return next, 0, err
		}
		switch status := m.Header.Get("Status"); {
		case status == "204": // the end of the batch
			pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
			return next, pending, nil
		case status == "404": // no record on filter from next on
			return next, 0, nil
		case status != "":
			return next, 0, fmt.Errorf("declog: read %s from %d: status %s %s", filter, next, status, m.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil || seq < next {
			return next, 0, fmt.Errorf("declog: read %s from %d: a direct get answered sequence %q", filter, next, m.Header.Get(jetstream.SequenceHeader))
		}
		if seq > to {
			return seq, 0, nil
		}
		var data []byte
		if !headersOnly {
			data = nonNil(m.Data)
		}
		r, err := Parse(l.sc, seq, m.Header.Get(jetstream.SubjectHeader), m.Header, data)
		if err != nil {
			yield(Record{}, err)
			return next, 0, errStopped
		}
		r.Time, _ = time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.TimeStampHeaer))
		next = seq + 1
		if !yield(r, nil) {
			return next, 0, errStopped
		}
	}
}
