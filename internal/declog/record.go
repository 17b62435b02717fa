package declog

import (
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/logrec"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// Parse reads the log message at seq. A nil data reads headers only;
// otherwise the body is decoded and must agree with subject and headers.
func Parse(sc subject.Scheme, seq uint64, subj string, h nats.Header, data []byte) (Record, error) {
	ds, o, err := sc.ParseDec(subj)
	if err != nil {
		return Record{}, fmt.Errorf("declog: record %d: %w: %v", seq, ErrMalformedRecord, err)
	}
	r := Record{Seq: seq, Dataset: ds, Outcome: outcomeOf(o), TxnID: h.Get(subject.HdrTxnID)}
	if data == nil {
		return r, parseHeaders(&r, h)
	}
	d := &cellguardpb.Decision{}
	if err := proto.Unmarshal(data, d); err != nil {
		return Record{}, fmt.Errorf("declog: record %d: %w: decode decision: %v", seq, ErrMalformedRecord, err)
	}
	if err := logrec.Expand(d); err != nil {
		return Record{}, fmt.Errorf("declog: record %d: %w: %v", seq, ErrMalformedRecord, err)
	}
	if d.GetOutcome() != r.Outcome || d.GetDataset() != ds {
		return Record{}, fmt.Errorf("declog: record %d: %w: body says %s of %q on subject %s", seq, ErrMalformedRecord, d.GetOutcome(), d.GetDataset(), subj)
	}
	r.Decision, r.TxnID, r.TxnSeq, r.Version = d, d.GetTxnUuid(), d.GetTxnSeq(), d.GetVersion()
	return r, nil
}

// outcomeOf is the record outcome of a decision subject's last token.
func outcomeOf(o subject.Outcome) cellguardpb.Outcome {
	switch o {
	case subject.Committed:
		return cellguardpb.Outcome_OUTCOME_COMMITTED
	case subject.Deleted:
		return cellguardpb.Outcome_OUTCOME_DELETED
	}
	return cellguardpb.Outcome_OUTCOME_REJECTED
}

// subjectOf is the last token of the subject of a record with outcome o.
func subjectOf(o cellguardpb.Outcome) subject.Outcome {
	switch o {
	case cellguardpb.Outcome_OUTCOME_COMMITTED:
		return subject.Committed
	case cellguardpb.Outcome_OUTCOME_DELETED:
		return subject.Deleted
	}
	return subject.Rejected
}

// parseHeaders fills the fields a headers-only read has.
func parseHeaders(r *Record, h nats.Header) error {
	var err error
	if r.TxnSeq, err = strconv.ParseUint(h.Get(subject.HdrTxnSeq), 10, 64); err != nil {
		return fmt.Errorf("declog: record %d: %w: header %s: %v", r.Seq, ErrMalformedRecord, subject.HdrTxnSeq, err)
	}
	if r.Committed() {
		if r.Version, err = strconv.ParseUint(h.Get(subject.HdrVersion), 10, 64); err != nil {
			return fmt.Errorf("declog: record %d: %w: header %s: %v", r.Seq, ErrMalformedRecord, subject.HdrVersion, err)
		}
	}
	return nil
}

// Message builds the log message of one decision: the subject of its
// outcome, the body, and the headers a headers-only reader needs, with a
// Nats-Msg-Id derived from the dataset and the transaction uuid (a
// decision is stored once).
func Message(sc subject.Scheme, d *cellguardpb.Decision) (*nats.Msg, error) {
	e, err := Encode(d)
	if err != nil {
		return nil, err
	}
	return encodedMessage(sc, e)
}

// encodedMessage builds the log message of e (see Message), with
// e.Body as the message body; a nil Body is encoded now.
func encodedMessage(sc subject.Scheme, e Encoded) (*nats.Msg, error) {
	d, body := e.Decision, e.Body
	if body == nil {
		enc, err := Encode(d)
		if err != nil {
			return nil, err
		}
		body = enc.Body
	}
	o := subjectOf(d.GetOutcome())
	m := nats.NewMsg(sc.Dec(d.GetDataset(), o))
	m.Data = body
	m.Header.Set(subject.HdrMsgID, subject.DecisionMsgID(d.GetDataset(), d.GetTxnUuid()))
	m.Header.Set(subject.HdrTxnID, d.GetTxnUuid())
	m.Header.Set(subject.HdrTxnSeq, strconv.FormatUint(d.GetTxnSeq(), 10))
	switch o {
	case subject.Committed:
		m.Header.Set(subject.HdrVersion, strconv.FormatUint(d.GetVersion(), 10))
	case subject.Rejected:
		m.Header.Set(subject.HdrReason, d.GetReason().String())
	case subject.Deleted:
		// One tombstone per dataset: a second one is a duplicate.
		m.Header.Set(subject.HdrMsgID, subject.TombstoneMsgID(d.GetDataset()))
	}
	return m, nil
}
