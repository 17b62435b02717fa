package producer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/internal/natsperm"
	"cellguard/internal/retry"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// The fate of a publish.
//
// A publish of a staged message either stores it, or is refused, or
// leaves its fate open: the answer was lost, or says the server could not
// decide yet (a leader change, no responders, a timeout, the stream or
// cluster not available, "duplicate message id is in process": another
// publish of the same id is being replicated). A fate left open may still
// end with the message stored, as late as the proposal in flight is
// applied, so it is never taken for a refusal: only an answer that proves
// nothing was stored is.

// JetStream API error codes of a publish refused before anything was
// stored. jetstream names the first; the second is the server's
// JSStreamNotMatchErr (the Nats-Expected-Stream header did not match).
const (
	codeMessageTooLarge = jetstream.JSErrCodeStreamMessageExceedsMaximum // 10054
	codeStreamMismatch  = jetstream.ErrorCode(10060)
)

// JetStream API error codes of a publish refused because the stream (or
// the account, or the server) has no room for it: nothing was stored. The
// server answers a staging stream at its MaxBytes or MaxMsgs (Discard:
// new) with JSStreamStoreFailedF, whose description names the limit; the
// same code with another description is a store failure of unknown fate.
const (
	codeAccountResources      = jetstream.ErrorCode(10002) // JSAccountResourcesExceededErr
	codeInsufficientResources = jetstream.ErrorCode(10023) // JSInsufficientResourcesErr
	codeStoreFailed           = jetstream.ErrorCode(10077) // JSStreamStoreFailedF
)

// fullDescriptions are the store errors JSStreamStoreFailedF carries for a
// stream at one of its limits with Discard: new.
var fullDescriptions = []string{
	"maximum bytes exceeded",
	"maximum messages exceeded",
	"maximum messages per subject exceeded",
}

// full reports whether a publish error is the server's refusal for want
// of room: the staging stream is at its limit (the committer is behind,
// or down), or the account or server has no storage left.
func full(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case codeAccountResources, codeInsufficientResources:
		return true
	case codeStoreFailed:
		return slices.Contains(fullDescriptions, apiErr.Description)
	}
	return false
}

// refused reports whether a publish error proves that the message was not
// stored and never will be by this attempt: the server refused it, or the
// client never sent it. Every other error, unknown ones included, leaves
// its fate open.
func refused(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case codeMessageTooLarge, codeStreamMismatch:
			return true
		}
		return full(err) // 10158 (in process), 503s, anything else: open
	}
	switch {
	case errors.Is(err, natsperm.ErrPermission), errors.Is(err, nats.ErrPermissionViolation):
		return true // the server drops a publish the user may not send
	case errors.Is(err, nats.ErrMaxPayload), errors.Is(err, nats.ErrBadSubject),
		errors.Is(err, nats.ErrHeadersNotSupported), errors.Is(err, nats.ErrInvalidMsg):
		return true // refused by the client before sending
	}
	return false
}

// refusedPublish reports whether ctx ended because the server refused a
// publish to subj (natsperm.Guard's cause).
func refusedPublish(ctx context.Context, subj string) bool {
	var perr *natsperm.Error
	return errors.As(context.Cause(ctx), &perr) && perr.Op == "publish" && perr.Subject == subj
}

// publishStaged publishes body on ds's staging subject with Nats-Msg-Id
// id, retrying every attempt whose fate is open until one is answered,
// one is refused, or ctx ends. Attempts carry the same Nats-Msg-Id, so
// one that did land makes the next a duplicate. When no attempt was
// answered and any of them may have stored the message, the error wraps
// ErrOutcomeUnknown; when the stream had no room for it (and no earlier
// attempt may have stored it), the error wraps ErrBacklogFull.
func (c *Client) publishStaged(ctx context.Context, ds, id string, body []byte) (*jetstream.PubAck, error) {
	var ack *jetstream.PubAck
	open := false // an attempt may have stored the message
	err := retry.Do(ctx, math.MaxInt, stageRetry, func(ctx context.Context) error {
		// Each attempt is bounded: a publish in flight when the
		// stream's leader is lost is never answered, and waiting for it
		// would spend the whole call.
		actx, cancel := context.WithTimeout(ctx, stageAttemptTimeout)
		defer cancel()
		var err error
		ack, err = c.js.Publish(actx, c.sc.Txn(ds), body,
			jetstream.WithMsgID(id), jetstream.WithExpectStream(c.sc.TxnStream()))
		if err != nil && refusedPublish(ctx, c.sc.Txn(ds)) {
			// The server refused the publish itself (and answers
			// nothing): the guard's cause says so.
			return context.Cause(ctx)
		}
		if err != nil && !refused(err) {
			open = true
		}
		return err
	}, func(err error) bool { return !refused(err) && ctx.Err() == nil })
	switch {
	case err == nil:
		return ack, nil
	case open:
		// The last attempt's refusal, too: an earlier one may have landed.
		return nil, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	case full(err):
		return nil, fmt.Errorf("%w: %w", ErrBacklogFull, err)
	}
	return nil, err
}

// Withdrawing a transaction.
//
// Outcome answers ErrNotStaged only when the transaction's uuid can
// never commit. Reading the staging stream and the decision log cannot
// show that: a publish of the uuid may still be in flight (answered late,
// replicated late), and a read may be served by a replica behind. So
// Outcome withdraws the uuid instead: it stages, under the same
// Nats-Msg-Id on the dataset's staging subject, a withdrawal, a
// transaction with the uuid and no operation, which the committer
// rejects (INVALID_TRANSACTION). The committer decides a uuid once, in
// stream order, so whichever of the two messages comes first takes the
// uuid and the other is a duplicate; within the stream's duplicate
// window the later one is not even stored. The decision recorded for
// the uuid then says which: the withdrawal's rejection (the transaction
// never commits: ErrNotStaged), or the transaction's own decision.

// withdrawalDetail is the text of the committer's rejection of a
// withdrawal (the table decoder's, for a transaction without operation).
// A Txn the builder makes always has an operation, so only a withdrawal
// is rejected so.
const withdrawalDetail = "transaction has no operation"

// withdrawal returns the body of the withdrawal of uuid id.
func withdrawal(id string, readVersion uint64) ([]byte, error) {
	return proto.Marshal(&lancepb.Transaction{Uuid: id, ReadVersion: readVersion})
}

// isWithdrawal reports whether a decision is the rejection of a
// withdrawal.
func isWithdrawal(d *cellguardpb.Decision) bool {
	return d != nil && d.GetReason() == cellguardpb.Reason_INVALID_TRANSACTION &&
		strings.Contains(d.GetMessage(), withdrawalDetail)
}

// withdraw stages the withdrawal of uuid id on ds.
func (c *Client) withdraw(ctx context.Context, ds, id string, readVersion uint64) (*jetstream.PubAck, error) {
	body, err := withdrawal(id, readVersion)
	if err != nil {
		return nil, fmt.Errorf("producer: withdraw txn %s: %w", id, err)
	}
	ack, err := c.publishStaged(ctx, ds, id, body)
	if err != nil {
		return nil, fmt.Errorf("producer: withdraw txn %s: %w", id, err)
	}
	return ack, nil
}
