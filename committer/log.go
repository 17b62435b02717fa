package committer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// Errors of the decision log.
var (
	// ErrFenced reports an append refused because the dataset's log moved
	// past the sequence this committer expected: another committer (or an
	// earlier attempt of this one) appended first.
	ErrFenced = errors.New("committer: fenced")
	// errAppend reports an append whose outcome is unknown (timeout, no
	// responders, leader change): the log must be re-read to find out.
	errAppend = errors.New("committer: append failed")
)

// Server error codes of a failed optimistic-concurrency guard: 10071 on
// single-replica streams, 10164 on replicated ones; 10201 is a duplicate
// message id inside an atomic batch (the decision is already in the log).
const (
	codeWrongLastSeq      = 10071
	codeWrongLastSeqConst = 10164
	codeBatchDuplicateID  = 10201
)

// pubResponse is the server's answer to a JetStream publish or an atomic
// batch commit.
type pubResponse struct {
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
	Batch     string `json:"batch"`
	Count     int    `json:"count"`
	Error     *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

// decisionMsg builds the log message of one decision.
func decisionMsg(sc subject.Scheme, rec *cellguardpb.Decision) (*nats.Msg, error) {
	body, err := proto.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("encode decision: %w", err)
	}
	o := subject.Rejected
	if rec.Outcome == cellguardpb.Outcome_OUTCOME_COMMITTED {
		o = subject.Committed
	}
	m := nats.NewMsg(sc.Dec(rec.Dataset, o))
	m.Data = body
	m.Header.Set(subject.HdrMsgID, subject.DecisionMsgID(rec.TxnUuid))
	m.Header.Set(subject.HdrTxnID, rec.TxnUuid)
	m.Header.Set(subject.HdrTxnSeq, strconv.FormatUint(rec.TxnSeq, 10))
	if o == subject.Committed {
		m.Header.Set(subject.HdrVersion, strconv.FormatUint(rec.Version, 10))
	} else {
		m.Header.Set(subject.HdrReason, rec.Reason.String())
	}
	return m, nil
}

// appendDecisions appends recs to the dataset's decision log as one atomic
// batch (or one message), fenced on expect: the sequence of the last record
// on cg.dec.<ds>.* this committer knows. It returns the sequence of each
// record. Errors wrap ErrFenced or errAppend.
func (c *Committer) appendDecisions(ctx context.Context, ds string, expect uint64, recs []*cellguardpb.Decision) ([]uint64, error) {
	msgs := make([]*nats.Msg, len(recs))
	for i, r := range recs {
		m, err := decisionMsg(c.sc, r)
		if err != nil {
			return nil, err
		}
		msgs[i] = m
	}
	first := msgs[0].Header
	first.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
	first.Set(jetstream.ExpectedLastSubjSeqSubjHeader, c.sc.DecOf(ds))
	if len(msgs) > 1 {
		id := nuid.Next()
		for i, m := range msgs {
			m.Header.Set("Nats-Batch-Id", id)
			m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		}
		msgs[len(msgs)-1].Header.Set("Nats-Batch-Commit", "1")
		for i, m := range msgs[:len(msgs)-1] {
			if err := c.nc.PublishMsg(m); err != nil {
				return nil, fmt.Errorf("%w: %s: send batch member: %v", errAppend, ds, err)
			}
			if i == len(msgs)/2 {
				if err := c.step(StepMidBatch, ds); err != nil {
					return nil, err
				}
			}
		}
	}
	resp, err := c.nc.RequestMsgWithContext(ctx, msgs[len(msgs)-1])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errAppend, ds, err)
	}
	var pa pubResponse
	if err := json.Unmarshal(resp.Data, &pa); err != nil {
		return nil, fmt.Errorf("%w: %s: bad response %q: %v", errAppend, ds, resp.Data, err)
	}
	if pa.Error != nil {
		switch pa.Error.ErrCode {
		case codeWrongLastSeq, codeWrongLastSeqConst, codeBatchDuplicateID:
			return nil, fmt.Errorf("%w: %s: %s (%d)", ErrFenced, ds, pa.Error.Description, pa.Error.ErrCode)
		}
		return nil, fmt.Errorf("%w: %s: %s (%d)", errAppend, ds, pa.Error.Description, pa.Error.ErrCode)
	}
	if pa.Duplicate {
		// The log already holds this decision: our view is stale.
		return nil, fmt.Errorf("%w: %s: duplicate decision %s", ErrFenced, ds, recs[0].TxnUuid)
	}
	if len(msgs) > 1 && pa.Count != len(msgs) {
		return nil, fmt.Errorf("%w: %s: batch stored %d of %d", errAppend, ds, pa.Count, len(msgs))
	}
	// An atomic batch is stored contiguously, ending at pa.Seq.
	seqs := make([]uint64, len(msgs))
	for i := range seqs {
		seqs[i] = pa.Seq - uint64(len(msgs)-1-i)
	}
	return seqs, nil
}

// logRecord is one record read back from the log. In a headers-only scan
// rec carries only the fields the headers hold.
type logRecord struct {
	seq uint64
	rec *cellguardpb.Decision
}

// logRequestTimeout bounds each single request of a log read (last-record
// lookup, consumer creation). The callers' contexts are long (catchUp
// allows a minute for a whole tail scan; load has no deadline at all), but
// a request sent as the connection drops, or routed to a server that is
// shutting down (a killed stream leader), is never answered: passing the
// long context to it stalls the dataset for that whole time while its
// staged messages wait. Invariant: no single request of the decide loop
// waits longer than a few seconds; a lost one is retried.
const logRequestTimeout = 2 * time.Second

// lastDecSeq returns the sequence of the last record of ds (0 if none).
// Each attempt is bounded by logRequestTimeout; a few are made.
func (c *Committer) lastDecSeq(ctx context.Context, ds string) (uint64, error) {
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		actx, cancel := context.WithTimeout(ctx, logRequestTimeout)
		var m *jetstream.RawStreamMsg
		m, err = c.dec.GetLastMsgForSubject(actx, c.sc.DecOf(ds))
		cancel()
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return 0, nil
		}
		if err == nil {
			return m.Sequence, nil
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff(attempt)):
		}
	}
	return 0, fmt.Errorf("committer: last decision of %s: %w", ds, err)
}

// scanLog calls fn for each record of ds on filter (DecOf(ds) or the
// committed subject) with sequence ≥ start, up to the last record present
// when the scan begins. headersOnly skips bodies.
func (c *Committer) scanLog(ctx context.Context, ds, filter string, start uint64, headersOnly bool, fn func(logRecord) error) (uint64, error) {
	last, err := c.lastDecSeq(ctx, ds)
	if err != nil || last < start {
		return last, err
	}
	// Consumer creation goes through the cluster's meta layer: allow it
	// more than a direct get, but still not the caller's whole deadline.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second) // see logRequestTimeout
	cons, err := c.js.OrderedConsumer(cctx, c.sc.DecStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    start,
		HeadersOnly:    headersOnly,
	})
	cancel()
	if err != nil {
		return 0, fmt.Errorf("committer: read log of %s: %w", ds, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		return 0, fmt.Errorf("committer: read log of %s: %w", ds, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			return 0, fmt.Errorf("committer: read log of %s: %w", ds, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return 0, fmt.Errorf("committer: read log of %s: %w", ds, err)
		}
		r, err := parseRecord(c.sc, m.Subject(), m.Headers(), m.Data(), headersOnly)
		if err != nil {
			return 0, fmt.Errorf("committer: log of %s at %d: %w", ds, md.Sequence.Stream, err)
		}
		if err := fn(logRecord{seq: md.Sequence.Stream, rec: r}); err != nil {
			return 0, err
		}
		if md.Sequence.Stream >= last || md.NumPending == 0 {
			return md.Sequence.Stream, nil
		}
	}
}

// parseRecord decodes a log message. For headers-only messages the
// decision is rebuilt from the subject and headers.
func parseRecord(sc subject.Scheme, subj string, h nats.Header, data []byte, headersOnly bool) (*cellguardpb.Decision, error) {
	ds, o, err := sc.ParseDec(subj)
	if err != nil {
		return nil, err
	}
	if !headersOnly {
		r := &cellguardpb.Decision{}
		if err := proto.Unmarshal(data, r); err != nil {
			return nil, fmt.Errorf("decode decision: %w", err)
		}
		return r, nil
	}
	r := &cellguardpb.Decision{Dataset: ds, TxnUuid: h.Get(subject.HdrTxnID), Outcome: cellguardpb.Outcome_OUTCOME_REJECTED}
	if r.TxnSeq, err = strconv.ParseUint(h.Get(subject.HdrTxnSeq), 10, 64); err != nil {
		return nil, fmt.Errorf("header %s: %w", subject.HdrTxnSeq, err)
	}
	if o == subject.Committed {
		r.Outcome = cellguardpb.Outcome_OUTCOME_COMMITTED
		if r.Version, err = strconv.ParseUint(h.Get(subject.HdrVersion), 10, 64); err != nil {
			return nil, fmt.Errorf("header %s: %w", subject.HdrVersion, err)
		}
	}
	return r, nil
}

// record reads the record at seq.
func (c *Committer) record(ctx context.Context, seq uint64) (*cellguardpb.Decision, error) {
	m, err := c.dec.GetMsg(ctx, seq)
	if err != nil {
		return nil, err
	}
	return parseRecord(c.sc, m.Subject, m.Header, m.Data, false)
}
