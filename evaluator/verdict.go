package evaluator

import (
	"strconv"
	"strings"

	"cellguard/table"
)

// DeletionPolicy says which deletions change protected cells. It is a
// per-dataset setting; every policy is at least as strict as "a deleted
// cell has no value to go stale".
type DeletionPolicy uint8

// Deletion policies.
const (
	// ProtectedRows (the default) rejects when the deletion state of a
	// protected row differs: DV_H ∩ R ≠ DV_P ∩ R. Deleting other rows of a
	// protected fragment is not a change. It needs Options.Deletions to
	// read deletion vectors; without them, or when a read fails, a changed
	// deletion file counts as a change.
	ProtectedRows DeletionPolicy = iota
	// Strict rejects when the deletion file of a protected fragment changed
	// at all, as Lance's first implementation does.
	Strict
	// Ignore never rejects for deletions: deleted cells are masked anyway.
	// The other rules still compare the stored values of deleted rows.
	Ignore
)

var policyNames = [...]string{ProtectedRows: "protected-rows", Strict: "strict", Ignore: "ignore"}

func (p DeletionPolicy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return "DeletionPolicy(" + strconv.Itoa(int(p)) + ")"
}

// ParseDeletionPolicy parses the String form of a policy.
func ParseDeletionPolicy(s string) (DeletionPolicy, bool) {
	for p, name := range policyNames {
		if s == name {
			return DeletionPolicy(p), true
		}
	}
	return 0, false
}

// Options configure Evaluate.
type Options struct {
	// Policy is the deletion policy; the zero value is ProtectedRows.
	Policy DeletionPolicy
	// Deletions reads deletion vectors, for the ProtectedRows policy (and
	// for row samples under Strict). Only deletion files that differ
	// between the two manifests are read. May be nil.
	Deletions table.DeletionVectors
}

// Reason says why protected cells may have changed.
type Reason uint8

// Reasons for a violation, in the order Evaluate checks them: a cell group
// reports the first that applies.
const (
	_ Reason = iota
	// FieldDropped: the field is not in the head schema.
	FieldDropped
	// SchemaChanged: the field's type, nullability or parent changed, or a
	// nested field of it (child or ancestor) was dropped, added or changed.
	SchemaChanged
	// FragmentRemoved: the fragment is not in head (deleted, compacted,
	// overwritten), or a different fragment now has its id.
	FragmentRemoved
	// BaseDataReplaced: the (data file, column) holding the field's base
	// values changed, or the field gained or lost a data file.
	BaseDataReplaced
	// OverlayChanged: the overlays covering the field at protected rows
	// differ (added, removed, tombstoned, re-stamped or re-covered).
	OverlayChanged
	// ProtectedRowsDeleted: a protected row was deleted (or un-deleted)
	// under the ProtectedRows policy.
	ProtectedRowsDeleted
	// DeletionsChanged: the fragment's deletion file changed, under Strict,
	// or under ProtectedRows when the deletion vectors could not be read.
	DeletionsChanged
)

var reasonNames = [...]string{
	FieldDropped:         "FieldDropped",
	SchemaChanged:        "SchemaChanged",
	FragmentRemoved:      "FragmentRemoved",
	BaseDataReplaced:     "BaseDataReplaced",
	OverlayChanged:       "OverlayChanged",
	ProtectedRowsDeleted: "ProtectedRowsDeleted",
	DeletionsChanged:     "DeletionsChanged",
}

func (r Reason) String() string {
	if int(r) < len(reasonNames) && reasonNames[r] != "" {
		return reasonNames[r]
	}
	return "Reason(" + strconv.Itoa(int(r)) + ")"
}

// Outcome is the decision on a transaction's preconditions.
type Outcome uint8

// Outcomes. The zero value is neither, so a Verdict that was never filled
// in does not read as an acceptance.
const (
	_ Outcome = iota
	Accept
	Reject
)

func (o Outcome) String() string {
	switch o {
	case Accept:
		return "accept"
	case Reject:
		return "reject"
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Verdict is the result of Evaluate.
type Verdict struct {
	Outcome Outcome
	// Violations lists every cell group (precondition × declared field ×
	// fragment) that may have changed, ordered by precondition, then
	// fragment in the selection's order, then field in declaration order.
	// Empty on Accept.
	Violations []Violation
}

// Accepted reports whether every precondition holds.
func (v Verdict) Accepted() bool { return v.Outcome == Accept }

// MaxSampleRows is the most row offsets a Violation carries.
const MaxSampleRows = 8

// Violation names cells that may have changed: precondition Precondition's
// field FieldID, in fragment FragmentID.
type Violation struct {
	Precondition int    // index in the transaction's list
	FieldID      int32  // the declared field
	FragmentID   uint64 // the fragment
	Reason       Reason
	// Rows holds up to MaxSampleRows affected protected offsets, ascending,
	// when they are known.
	Rows   []uint32
	Detail string // what changed, for people
	// Version and TxnUUID name the first committed version after the read
	// version whose state differs for these cells, and the transaction
	// that made it; filled by Blame, zero before.
	Version uint64
	TxnUUID string
}

// String renders the violation on one line.
func (v Violation) String() string {
	var b strings.Builder
	b.WriteString("precondition ")
	b.WriteString(strconv.Itoa(v.Precondition))
	b.WriteString(" field ")
	b.WriteString(strconv.FormatInt(int64(v.FieldID), 10))
	b.WriteString(" fragment ")
	b.WriteString(strconv.FormatUint(v.FragmentID, 10))
	b.WriteString(": ")
	b.WriteString(v.Reason.String())
	if len(v.Rows) > 0 {
		b.WriteString(" rows [")
		for i, r := range v.Rows {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(strconv.FormatUint(uint64(r), 10))
		}
		b.WriteByte(']')
	}
	if v.Version != 0 || v.TxnUUID != "" {
		b.WriteString(" at version ")
		b.WriteString(strconv.FormatUint(v.Version, 10))
		b.WriteString(" by ")
		b.WriteString(v.TxnUUID)
	}
	if v.Detail != "" {
		b.WriteString(" (")
		b.WriteString(v.Detail)
		b.WriteByte(')')
	}
	return b.String()
}

// String renders the verdict, one violation per line.
func (v Verdict) String() string {
	if len(v.Violations) == 0 {
		return v.Outcome.String()
	}
	var b strings.Builder
	b.WriteString(v.Outcome.String())
	for _, x := range v.Violations {
		b.WriteString("\n  ")
		b.WriteString(x.String())
	}
	return b.String()
}
