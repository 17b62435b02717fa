package declog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A direct get may be answered by any replica of the decision log,
// including one that has not yet stored the latest records: on a 3-node
// cluster a record appended a moment ago was reported "not found" by a
// lagging follower (the bench's R3 runs rejected a few appends
// READ_VERSION_TOO_OLD, "record purged"). "Not found" from a direct get
// is therefore confirmed with the stream leader (the STREAM.MSG.GET API)
// before anyone is told the record is gone.

// leaderGetResponse is the STREAM.MSG.GET answer.
type leaderGetResponse struct {
	Message *struct {
		Subject  string    `json:"subject"`
		Sequence uint64    `json:"seq"`
		Header   []byte    `json:"hdrs,omitempty"`
		Data     []byte    `json:"data,omitempty"`
		Time     time.Time `json:"time"`
	} `json:"message,omitempty"`
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error,omitempty"`
}

// errCodeNoMessage is JetStream's "no message found" error code.
const errCodeNoMessage = 10037

// atLeader reads record seq from the stream leader.
func (l *Log) atLeader(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	req, _ := json.Marshal(map[string]uint64{"seq": seq})
	return l.leaderGet(ctx, req, fmt.Sprintf("record %d", seq))
}

// LastAtLeader is Last answered by the stream leader (STREAM.MSG.GET,
// never a direct get): a direct get may be served by a replica that is
// behind, so the last record it returns may be older than a record whose
// append was already answered (measured in the nemesis: a worker read
// version 149 after its own commit of version 151 had returned, while a
// restarted node caught up). A reader that promises every version
// committed before its call reads the last record here.
func (l *Log) LastAtLeader(ctx context.Context, filter string) (Record, bool, error) {
	rctx, cancel := l.request(ctx)
	defer cancel()
	req, _ := json.Marshal(map[string]string{"last_by_subj": filter})
	m, err := l.leaderGet(rctx, req, "last record on "+filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, err
	}
	r, err := Parse(l.sc, m.Sequence, m.Subject, m.Header, nonNil(m.Data))
	r.Time = m.Time
	return r, err == nil, err
}

// leaderGet sends a STREAM.MSG.GET request to the stream leader.
func (l *Log) leaderGet(ctx context.Context, req []byte, what string) (*jetstream.RawStreamMsg, error) {
	subj := "$JS.API.STREAM.MSG.GET." + l.sc.DecStream()
	resp, err := l.js.Conn().RequestWithContext(ctx, subj, req)
	if err != nil {
		return nil, fmt.Errorf("declog: %s from the stream leader: %w", what, err)
	}
	var r leaderGetResponse
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return nil, fmt.Errorf("declog: %s from the stream leader: %w", what, err)
	}
	switch {
	case r.Error != nil && r.Error.ErrCode == errCodeNoMessage:
		return nil, jetstream.ErrMsgNotFound
	case r.Error != nil:
		return nil, fmt.Errorf("declog: %s from the stream leader: %s (%d)", what, r.Error.Description, r.Error.ErrCode)
	case r.Message == nil:
		return nil, fmt.Errorf("declog: %s from the stream leader: empty answer", what)
	}
	m := &jetstream.RawStreamMsg{Subject: r.Message.Subject, Sequence: r.Message.Sequence, Data: r.Message.Data, Time: r.Message.Time}
	if len(r.Message.Header) > 0 {
		hdr, err := nats.DecodeHeadersMsg(r.Message.Header)
		if err != nil {
			return nil, fmt.Errorf("declog: %s from the stream leader: headers: %w", what, err)
		}
		m.Header = hdr
	}
	return m, nil
}

// getMsg reads record seq, confirming "not found" with the leader.
func (l *Log) getMsg(ctx context.Context, seq uint64) (*jetstream.RawStreamMsg, error) {
	if leaderOnly(ctx) {
		return l.atLeader(ctx, seq)
	}
	m, err := l.dec.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) && l.dec.CachedInfo().Config.AllowDirect {
		return l.atLeader(ctx, seq)
	}
	return m, err
}

// leaderNext reads the first record on filter with sequence ≥ seq from
// the stream leader.
func (l *Log) leaderNext(ctx context.Context, filter string, seq uint64) (*jetstream.RawStreamMsg, error) {
	rctx, cancel := l.leaderRequest(ctx)
	defer cancel()
	req, _ := json.Marshal(map[string]any{"seq": seq, "next_by_subj": filter})
	return l.leaderGet(rctx, req, fmt.Sprintf("next record on %s from %d", filter, seq))
}

// leaderLastSeq returns the sequence of the last record on filter as the
// stream leader holds it.
func (l *Log) leaderLastSeq(ctx context.Context, filter string) (uint64, bool, error) {
	rctx, cancel := l.leaderRequest(ctx)
	defer cancel()
	req, _ := json.Marshal(map[string]string{"last_by_subj": filter})
	m, err := l.leaderGet(rctx, req, "last record on "+filter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return m.Sequence, true, nil
}

// leaderRequest bounds one request to the stream leader: by
// Options.RequestTimeout, else directWait. A leader that went down never
// answers; the bound makes that an error the caller retries.
func (l *Log) leaderRequest(ctx context.Context) (context.Context, context.CancelFunc) {
	if l.opts.RequestTimeout > 0 {
		return context.WithTimeout(ctx, l.opts.RequestTimeout)
	}
	return context.WithTimeout(ctx, directWait)
}

// leaderRange yields the records on filter with sequences from..to as
// the stream leader holds them, one STREAM.MSG.GET (next_by_subj) per
// record, and returns the sequence after the last one it read and
// whether the caller stopped ranging (or was handed a failed read, which
// ends it; a malformed record is handed out with its sequence, and the
// read goes on if the caller does).
func (l *Log) leaderRange(ctx context.Context, filter string, from, to uint64, headersOnly bool, yield func(Record, error) bool) (next uint64, stopped bool) {
	next = from
	for next <= to {
		m, err := l.leaderNext(ctx, filter, next)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return to + 1, false // nothing on filter from next on
		}
		if err != nil {
			yield(Record{}, err)
			return next, true
		}
		if m.Sequence < next {
			yield(Record{}, fmt.Errorf("declog: read %s from %d at the stream leader: answered sequence %d", filter, next, m.Sequence))
			return next, true
		}
		if m.Sequence > to {
			return to + 1, false
		}
		var data []byte
		if !headersOnly {
			data = nonNil(m.Data)
		}
		r, err := Parse(l.sc, m.Sequence, m.Subject, m.Header, data)
		r.Time = m.Time
		if err != nil {
			r = Record{Seq: m.Sequence} // a malformed record: the caller may go on past it
		}
		next = m.Sequence + 1
		if !yield(r, err) {
			return next, true
		}
	}
	return next, false
}

// leaderKey marks a context whose reads of the log go to the stream
// leader (AtLeader).
type leaderKey struct{}

// AtLeader returns ctx marked so that the bounded reads of the log made
// with it (Scan without Live, Last, At, and what is built on them) are
// answered by the stream leader only, never by another replica: for a
// reader that found a replica's records disagreeing with each other.
func AtLeader(ctx context.Context) context.Context {
	return context.WithValue(ctx, leaderKey{}, true)
}

func leaderOnly(ctx context.Context) bool {
	v, _ := ctx.Value(leaderKey{}).(bool)
	return v
}
