package evaluator

import (
	"context"
	"slices"

	"cellguard/table"
)

// Step is one committed version: its number, the uuid of the transaction
// that made it, and its manifest.
type Step struct {
	Version  uint64
	TxnUUID  string
	Manifest *table.Manifest
}

// Blame names the culprit of each violation: it returns a copy of v in
// which every violation's Version and TxnUUID are those of the first step
// of history whose state differs from pinned for that violation's cells
// (its precondition's rows of FragmentID, field FieldID), judged by the
// same rules and options as Evaluate.
//
// history must hold every committed version after pinned's up to the head
// v was computed against, in ascending order. The first differing step is
// not always the last writer: cells changed at version 42 and restored at
// 43 name 42 if they differ again at head.
//
// Cost: at most len(history) × len(v.Violations) single-cell-group
// evaluations; it stops once every violation is named, usually within the
// first few steps. Unchanged fragments cost two lookups per step. A step
// whose comparison fails (for example, a malformed overlay bitmap) is
// taken as the culprit. Violations Blame cannot attribute keep zero values.
func Blame(ctx context.Context, pinned *table.Manifest, history []Step, pre []Precondition, v Verdict, opts Options) Verdict {
	if len(v.Violations) == 0 || pinned == nil {
		return v
	}
	out := Verdict{Outcome: v.Outcome, Violations: slices.Clone(v.Violations)}
	named := make([]bool, len(out.Violations))
	pending := len(named)
	for _, st := range history {
		if st.Manifest == nil {
			continue
		}
		for k := range out.Violations {
			x := &out.Violations[k]
			if named[k] || !differs(ctx, ofManifest(pinned), ofManifest(st.Manifest), pre, x, opts) {
				continue
			}
			x.Version, x.TxnUUID = st.Version, st.TxnUUID
			named[k] = true
			pending--
		}
		if pending == 0 {
			break
		}
	}
	return out
}

// differs reports whether m differs from pinned for x's cell group.
func differs(ctx context.Context, pinned, m snapshot, pre []Precondition, x *Violation, opts Options) bool {
	if x.Precondition < 0 || x.Precondition >= len(pre) {
		return false
	}
	rows, ok := pre[x.Precondition].Rows.Fragment(x.FragmentID)
	if !ok {
		return false
	}
	one := []Precondition{{
		Fields: []int32{x.FieldID},
		Rows:   RowSelection{frags: []fragRows{{id: x.FragmentID, rows: rows.bm}}},
	}}
	got, err := evaluate(ctx, pinned, m, one, opts)
	return err != nil || !got.Accepted()
}
