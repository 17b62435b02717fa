package declog

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"cellguard/proto/cellguardpb"
)

// codeBatchDuplicateID is the server's error code for a duplicate message
// id inside an atomic batch (the decision is already in the log).
// nats.go declares no constant for it.
const codeBatchDuplicateID jetstream.ErrorCode = 10201

// The server's answers to a publish it refused for want of room: the
// stream at a limit with Discard: new (JSStreamStoreFailedF, whose
// description names the limit), the account's or the server's storage
// exhausted.
const (
	codeAccountResources      jetstream.ErrorCode = 10002 // JSAccountResourcesExceededErr
	codeInsufficientResources jetstream.ErrorCode = 10023 // JSInsufficientResourcesErr
	codeStoreFailed           jetstream.ErrorCode = 10077 // JSStreamStoreFailedF
)

// logFull reports whether a publish error (code, description) is a
// refusal for want of room.
func logFull(code jetstream.ErrorCode, desc string) bool {
	switch code {
	case codeAccountResources, codeInsufficientResources:
		return true
	case codeStoreFailed:
		switch desc {
		case "maximum bytes exceeded", "maximum messages exceeded", "maximum messages per subject exceeded":
			return true
		}
	}
	return false
}

// pubResponse is the server's answer to a JetStream publish or an atomic
// batch commit.
type pubResponse struct {
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
	Batch     string `json:"batch"`
	Count     int    `json:"count"`
	Error     *struct {
		Code        int                 `json:"code"`
		ErrCode     jetstream.ErrorCode `json:"err_code"`
		Description string              `json:"description"`
	} `json:"error"`
}

// Append appends decs, decisions of ds, as one atomic batch (or one
// message), fenced on expect: the sequence of the last record on ds's
// subjects the writer knows (0 for none). It returns the sequence of
// each record. Errors wrap ErrFenced (the log moved: re-read it),
// ErrLogFull (nothing stored: the log has no room) or ErrAppend (the
// outcome is unknown: re-read it).
func (l *Log) Append(ctx context.Context, ds string, expect uint64, decs []*cellguardpb.Decision) ([]uint64, error) {
	encs := make([]Encoded, len(decs))
	for i, d := range decs {
		encs[i].Decision = d
	}
	return l.AppendEncoded(ctx, ds, expect, encs)
}

// AppendEncoded is Append for decisions whose bodies were encoded once
// (Encode), when they were decided: the bytes are sent as they are, on
// every attempt. An Encoded with a nil Body is encoded here.
func (l *Log) AppendEncoded(ctx context.Context, ds string, expect uint64, encs []Encoded) ([]uint64, error) {
	msgs, err := l.batch(ds, expect, encs)
	if err != nil {
		return nil, err
	}
	nc := l.js.Conn()
	for i, m := range msgs[:len(msgs)-1] {
		if err := nc.PublishMsg(m); err != nil {
			return nil, fmt.Errorf("%w: %s: send batch member: %v", ErrAppend, ds, err)
		}
		if i == len(msgs)/2 && l.opts.MidBatch != nil {
			if err := l.opts.MidBatch(ds); err != nil {
				return nil, err
			}
		}
	}
	resp, err := nc.RequestMsgWithContext(ctx, msgs[len(msgs)-1])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrAppend, ds, err)
	}
	return appendResult(ds, resp.Data, encs)
}

// batch builds the messages of encs: the first carries the fence, and
// more than one form an atomic batch.
func (l *Log) batch(ds string, expect uint64, encs []Encoded) ([]*nats.Msg, error) {
	if len(encs) == 0 {
		return nil, fmt.Errorf("declog: append to %s: no decisions", ds)
	}
	msgs := make([]*nats.Msg, len(encs))
	for i, e := range encs {
		if d := e.Decision; d.GetDataset() != ds {
			return nil, fmt.Errorf("declog: append to %s: decision of %q", ds, d.GetDataset())
		}
		m, err := encodedMessage(l.sc, e)
		if err != nil {
			return nil, err
		}
		msgs[i] = m
	}
	first := msgs[0].Header
	first.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(expect, 10))
	first.Set(jetstream.ExpectedLastSubjSeqSubjHeader, l.sc.DecOf(ds))
	if len(msgs) > 1 {
		id := nuid.Next()
		for i, m := range msgs {
			m.Header.Set("Nats-Batch-Id", id)
			m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		}
		msgs[len(msgs)-1].Header.Set("Nats-Batch-Commit", "1")
	}
	return msgs, nil
}

// appendResult reads the server's answer to an append of decs.
func appendResult(ds string, data []byte, decs []Encoded) ([]uint64, error) {
	var pa pubResponse
	if err := json.Unmarshal(data, &pa); err != nil {
		return nil, fmt.Errorf("%w: %s: bad response %q: %v", ErrAppend, ds, data, err)
	}
	if pa.Error != nil {
		switch pa.Error.ErrCode {
		case jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant, codeBatchDuplicateID:
			return nil, fmt.Errorf("%w: %s: %s (%d)", ErrFenced, ds, pa.Error.Description, pa.Error.ErrCode)
		}
		if logFull(pa.Error.ErrCode, pa.Error.Description) {
			return nil, fmt.Errorf("%w: %s: %s (%d)", ErrLogFull, ds, pa.Error.Description, pa.Error.ErrCode)
		}
		return nil, fmt.Errorf("%w: %s: %s (%d)", ErrAppend, ds, pa.Error.Description, pa.Error.ErrCode)
	}
	if pa.Duplicate {
		// The log already holds this decision: the writer's view is stale.
		return nil, fmt.Errorf("%w: %s: duplicate decision %s", ErrFenced, ds, decs[0].Decision.GetTxnUuid())
	}
	if len(decs) > 1 && pa.Count != len(decs) {
		return nil, fmt.Errorf("%w: %s: batch stored %d of %d", ErrAppend, ds, pa.Count, len(decs))
	}
	// An atomic batch is stored contiguously, ending at pa.Seq.
	seqs := make([]uint64, len(decs))
	for i := range seqs {
		seqs[i] = pa.Seq - uint64(len(decs)-1-i)
	}
	return seqs, nil
}
