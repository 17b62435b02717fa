package producer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natsperm"
	"cellguard/proto/cellguardpb"
)

func apiErr(code jetstream.ErrorCode, status int, desc string) error {
	return &jetstream.APIError{ErrorCode: code, Code: status, Description: desc}
}

// TestRefused classifies every kind of publish error: only those that
// prove nothing was stored are refusals; unknown ones leave the fate open.
func TestRefused(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"duplicate message id in process", apiErr(10158, 409, "duplicate message id is in process"), false},
		{"cluster not available", apiErr(10008, 503, "JetStream cluster not available"), false},
		{"stream not available (503)", apiErr(10074, 503, "stream offline"), false},
		{"stream not found during a leader move", jetstream.ErrStreamNotFound, false},
		{"unknown API error", apiErr(10999, 500, "something new"), false},
		{"no stream response", jetstream.ErrNoStreamResponse, false},
		{"no responders", nats.ErrNoResponders, false},
		{"deadline", context.DeadlineExceeded, false},
		{"cancelled in flight", context.Canceled, false},
		{"nats timeout", nats.ErrTimeout, false},
		{"reconnecting", nats.ErrConnectionReconnecting, false},
		{"connection closed", nats.ErrConnectionClosed, false},
		{"unknown error", errors.New("disk on fire"), false},
		{"message too large", apiErr(codeMessageTooLarge, 400, "message size exceeds maximum allowed"), true},
		{"message too large (jetstream's error)", jetstream.ErrStreamMessageExceedsMaximum, true},
		{"expected stream mismatch", apiErr(codeStreamMismatch, 400, "expected stream does not match"), true},
		{"permission (natsperm)", &natsperm.Error{Op: "publish", Subject: "cg.txn.ds"}, true},
		{"permission violation", nats.ErrPermissionViolation, true},
		{"over max payload", nats.ErrMaxPayload, true},
		{"bad subject", nats.ErrBadSubject, true},
		{"headers not supported", nats.ErrHeadersNotSupported, true},
		{"stream at max bytes", apiErr(codeStoreFailed, 503, "maximum bytes exceeded"), true},
		{"stream at max msgs", apiErr(codeStoreFailed, 503, "maximum messages exceeded"), true},
		{"subject at max msgs", apiErr(codeStoreFailed, 503, "maximum messages per subject exceeded"), true},
		{"account storage exceeded", apiErr(codeAccountResources, 400, "resource limits exceeded for account"), true},
		{"server storage insufficient", apiErr(codeInsufficientResources, 503, "insufficient resources"), true},
		{"other store failure", apiErr(codeStoreFailed, 503, "write error: disk on fire"), false},
	}
	for _, c := range cases {
		for _, err := range []error{c.err, fmt.Errorf("producer: stage: %w", c.err)} {
			if got := refused(err); got != c.want {
				t.Errorf("%s: refused(%v) = %v; want %v", c.name, err, got, c.want)
			}
		}
	}
	for _, c := range cases {
		wantFull := strings.HasPrefix(c.name, "stream at") || strings.HasPrefix(c.name, "subject at") ||
			strings.HasSuffix(c.name, "storage exceeded") || strings.HasSuffix(c.name, "storage insufficient")
		if got := full(c.err); got != wantFull {
			t.Errorf("%s: full(%v) = %v; want %v", c.name, c.err, got, wantFull)
		}
	}
	if refused(nil) {
		t.Error("refused(nil) = true; want false")
	}
}

// TestIsWithdrawal tells the rejection of a withdrawal from the others.
func TestIsWithdrawal(t *testing.T) {
	rejected := func(r cellguardpb.Reason, msg string) *cellguardpb.Decision {
		return &cellguardpb.Decision{Outcome: cellguardpb.Outcome_OUTCOME_REJECTED, Reason: r, Message: msg}
	}
	cases := []struct {
		d    *cellguardpb.Decision
		want bool
	}{
		{rejected(cellguardpb.Reason_INVALID_TRANSACTION, "decode transaction: unsupported operation: "+withdrawalDetail), true},
		{rejected(cellguardpb.Reason_INVALID_TRANSACTION, "read_version 0 is only valid for a creating Overwrite"), false},
		{rejected(cellguardpb.Reason_PRECONDITION_FAILED, withdrawalDetail), false},
		{&cellguardpb.Decision{Outcome: cellguardpb.Outcome_OUTCOME_COMMITTED, Version: 3}, false},
		{nil, false},
	}
	for _, c := range cases {
		if got := isWithdrawal(c.d); got != c.want {
			t.Errorf("isWithdrawal(%v) = %v; want %v", c.d, got, c.want)
		}
	}
}
