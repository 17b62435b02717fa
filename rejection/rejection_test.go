package rejection_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"cellguard/proto/cellguardpb"
	"cellguard/rejection"
)

func TestFromDecisionMatches(t *testing.T) {
	for _, c := range []struct {
		reason            cellguardpb.Reason
		precondition, try bool
	}{
		{cellguardpb.Reason_PRECONDITION_FAILED, true, true},
		{cellguardpb.Reason_CONFLICT_RETRYABLE, false, true},
		{cellguardpb.Reason_READ_VERSION_TOO_OLD, false, true},
		{cellguardpb.Reason_INTERNAL, false, true},
		{cellguardpb.Reason_CONFLICT_INCOMPATIBLE, false, false},
		{cellguardpb.Reason_INVALID_TRANSACTION, false, false},
		{cellguardpb.Reason_DATASET_DELETED, false, false},
	} {
		e := rejection.FromDecision(&cellguardpb.Decision{Dataset: "ds", TxnUuid: "u", Reason: c.reason})
		var err error = fmt.Errorf("commit: %w", e)
		if !errors.Is(err, rejection.ErrRejected) {
			t.Errorf("%s: does not match ErrRejected", c.reason)
		}
		if got := errors.Is(err, rejection.ErrPreconditionFailed); got != c.precondition {
			t.Errorf("%s: matches ErrPreconditionFailed = %v, want %v", c.reason, got, c.precondition)
		}
		if got := errors.Is(err, rejection.ErrRetryable); got != c.try {
			t.Errorf("%s: matches ErrRetryable = %v, want %v", c.reason, got, c.try)
		}
		if got, want := errors.Is(err, rejection.ErrDatasetDeleted), c.reason == cellguardpb.Reason_DATASET_DELETED; got != want {
			t.Errorf("%s: matches ErrDatasetDeleted = %v, want %v", c.reason, got, want)
		}
		var back *rejection.Error
		if !errors.As(err, &back) || back != e {
			t.Errorf("%s: errors.As does not find the *Error", c.reason)
		}
	}
}

func TestFromDecisionCarriesTheRecord(t *testing.T) {
	d := &cellguardpb.Decision{
		Dataset: "orders", TxnUuid: "t1", Reason: cellguardpb.Reason_PRECONDITION_FAILED, Message: "2 changed",
		ReadVersion: 4, HeadVersion: 7, ConflictVersion: 6, ConflictTxnUuid: "t0",
		Violations: []*cellguardpb.Violation{
			{PreconditionIndex: 1, FieldId: 3, FragmentId: 9, Reason: "overlay-changed", SampleRows: []uint32{17, 18}, CulpritVersion: 6, CulpritTxnUuid: "t0"},
			{FieldId: 2, FragmentId: 2, Reason: "rows-deleted"},
			{FieldId: 3, FragmentId: 9, Reason: "overlay-changed"},
		},
	}
	e := rejection.FromDecision(d)
	if e.Dataset != "orders" || e.TxnID != "t1" || e.ReadVersion != 4 || e.HeadVersion != 7 ||
		e.ConflictVersion != 6 || e.ConflictTxnID != "t0" || e.Decision != d || len(e.Violations) != 3 {
		t.Fatalf("FromDecision = %+v", e)
	}
	if got, want := e.Error(), "txn t1 on orders rejected: PRECONDITION_FAILED: 2 changed"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got, want := e.Violations[0].String(), "field 3 fragment 9 rows [17 18]: overlay-changed at version 6 by t0"; got != want {
		t.Errorf("Violation.String() = %q, want %q", got, want)
	}
	if got := e.Fragments(); !slices.Equal(got, []uint64{2, 9}) {
		t.Errorf("Fragments() = %v, want [2 9]", got)
	}
}
