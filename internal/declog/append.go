package declog

import (
	"context"
	"encoding/json"
	"errors"
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

// ErrRefused marks an append the server answered with a refusal: nothing
// of it was stored. It comes together with ErrFenced, ErrLogFull or
// ErrAppend (the class of the refusal); an ErrAppend without it leaves the
// outcome unknown.
var ErrRefused = errors.New("declog: append refused")

// MaxBatch is the most messages one atomic batch holds: the server's
// default limit (JetStream's max_batch_size). A server configured lower
// refuses a larger batch whole (ErrRefused).
const MaxBatch = 1000

// Group is one dataset's decisions in an append, fenced on Expect: the
// sequence of the last record on the dataset's subjects the writer knows
// (0 for none).
type Group struct {
	Dataset string
	Expect  uint64
	Encs    []Encoded
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
	seqs, err := l.AppendGroups(ctx, []Group{{Dataset: ds, Expect: expect, Encs: encs}})
	if err != nil {
		return nil, err
	}
	return seqs[0], nil
}

// AppendGroups appends the groups of one or more datasets as one atomic
// batch (one message when there is one decision in all). The first
// message of each group carries that group's fence, which the server
// checks on its own inside the batch, so each dataset's records land
// only after the record its writer knows. It returns each group's
// sequences, in order. The batch is stored whole or not at all: an
// error is the whole batch's, as Append's; one wrapping ErrRefused says
// nothing was stored, without saying which group the server objected
// to (a fence, a duplicate, no room).
func (l *Log) AppendGroups(ctx context.Context, groups []Group) ([][]uint64, error) {
	msgs, err := l.batch(groups)
	if err != nil {
		return nil, err
	}
	name := groupsName(groups)
	nc := l.js.Conn()
	for i, m := range msgs[:len(msgs)-1] {
		if err := nc.PublishMsg(m); err != nil {
			return nil, fmt.Errorf("%w: %s: send batch member: %v", ErrAppend, name, err)
		}
		if i == (len(msgs)-1)/2 && l.opts.MidBatch != nil {
			if err := l.opts.MidBatch(datasetOfMember(groups, i)); err != nil {
				return nil, err
			}
		}
	}
	resp, err := nc.RequestMsgWithContext(ctx, msgs[len(msgs)-1])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrAppend, name, err)
	}
	return appendResult(name, resp.Data, groups, len(msgs))
}

// groupsName names the datasets of an append in its errors.
func groupsName(groups []Group) string {
	if len(groups) == 1 {
		return groups[0].Dataset
	}
	return fmt.Sprintf("%d datasets (%s, ...)", len(groups), groups[0].Dataset)
}

// datasetOfMember is the dataset of the batch's message i.
func datasetOfMember(groups []Group, i int) string {
	for _, g := range groups {
		if i < len(g.Encs) {
			return g.Dataset
		}
		i -= len(g.Encs)
	}
	return ""
}

// batch builds the messages of groups: the first of each group carries
// its fence, and more than one message in all form an atomic batch.
func (l *Log) batch(groups []Group) ([]*nats.Msg, error) {
	var msgs []*nats.Msg
	seen := make(map[string]bool, len(groups))
	for _, g := range groups {
		ds := g.Dataset
		if len(g.Encs) == 0 {
			return nil, fmt.Errorf("declog: append to %s: no decisions", ds)
		}
		if seen[ds] {
			// A second fence on the subjects the batch already writes is
			// refused by the server; one group per dataset.
			return nil, fmt.Errorf("declog: append to %s: two groups of one dataset in a batch", ds)
		}
		seen[ds] = true
		first := len(msgs)
		for _, e := range g.Encs {
			if d := e.Decision; d.GetDataset() != ds {
				return nil, fmt.Errorf("declog: append to %s: decision of %q", ds, d.GetDataset())
			}
			m, err := encodedMessage(l.sc, e)
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, m)
		}
		h := msgs[first].Header
		h.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(g.Expect, 10))
		h.Set(jetstream.ExpectedLastSubjSeqSubjHeader, l.sc.DecOf(ds))
	}
	if len(msgs) == 0 {
		return nil, errors.New("declog: append: no groups")
	}
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

// appendResult reads the server's answer to an append of groups, n
// messages in all.
func appendResult(name string, data []byte, groups []Group, n int) ([][]uint64, error) {
	var pa pubResponse
	if err := json.Unmarshal(data, &pa); err != nil {
		return nil, fmt.Errorf("%w: %s: bad response %q: %v", ErrAppend, name, data, err)
	}
	if pa.Error != nil {
		class := ErrAppend
		switch {
		case pa.Error.ErrCode == jetstream.JSErrCodeStreamWrongLastSequence, pa.Error.ErrCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant, pa.Error.ErrCode == codeBatchDuplicateID:
			class = ErrFenced
		case logFull(pa.Error.ErrCode, pa.Error.Description):
			class = ErrLogFull
		}
		return nil, fmt.Errorf("%w: %w: %s: %s (%d)", class, ErrRefused, name, pa.Error.Description, pa.Error.ErrCode)
	}
	if pa.Duplicate {
		// The log already holds this decision: the writer's view is stale.
		return nil, fmt.Errorf("%w: %w: %s: duplicate decision %s", ErrFenced, ErrRefused, name, groups[0].Encs[0].Decision.GetTxnUuid())
	}
	if n > 1 && pa.Count != n {
		return nil, fmt.Errorf("%w: %s: batch stored %d of %d", ErrAppend, name, pa.Count, n)
	}
	// An atomic batch is stored contiguously, ending at pa.Seq.
	out := make([][]uint64, len(groups))
	next := pa.Seq - uint64(n-1)
	for i, g := range groups {
		seqs := make([]uint64, len(g.Encs))
		for j := range seqs {
			seqs[j] = next
			next++
		}
		out[i] = seqs
	}
	return out, nil
}
