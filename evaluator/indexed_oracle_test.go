package evaluator

import (
	"strings"
	"testing"

	"cellguard/table"
)

// The indexed oracle checks EvaluateIndexed and BlameIndexed against
// Evaluate and Blame on the oracle's random histories (built with the real
// table.Apply): for every oracle case and policy, the indexed verdict must
// accept and reject exactly the same cell groups for the same reasons, and
// name the same culprits whenever the index covers the read version and
// the step budget suffices. Small index limits (so the read version falls
// before the horizon and the manifest is pinned) and small step budgets
// exercise the bounded paths: there a violation names the culprit Blame
// names, a later version after the horizon, or says why it names none.

// changeIndex returns an index over versions 1..h of the history, with
// limits drawn at random: mostly the defaults, sometimes small.
func (s *sim) changeIndex(h uint64) *table.ChangeIndex {
	s.t.Helper()
	lim := table.IndexLimits{}
	if s.rng.IntN(3) == 0 {
		lim.MaxBytes = 1 + s.rng.IntN(6000)
	}
	ix := table.NewChangeIndex(s.mans[1], lim)
	for v := uint64(2); v <= h; v++ {
		if err := ix.Advance(s.mans[v], s.uuids[v]); err != nil {
			s.t.Fatalf("Advance(v%d): %v", v, err)
		}
	}
	return ix
}

func (s *sim) checkIndexed(t *testing.T, ix *table.ChangeIndex, r uint64, pre []Precondition, opts Options, blamed Verdict) {
	t.Helper()
	io := IndexedOptions{Options: opts, Pin: func() (*table.Manifest, error) { return s.mans[r], nil }}
	small := s.rng.IntN(4) == 0
	if small {
		io.MaxBlameSteps = 1 + s.rng.IntN(3)
	}
	got, err := EvaluateIndexed(t.Context(), ix, r, pre, io)
	if err != nil {
		t.Fatalf("EvaluateIndexed v%d→v%d: %v", r, ix.Head().Version(), err)
	}
	covered := r >= ix.Horizon()
	if covered && !small {
		if got.String() != blamed.String() {
			t.Fatalf("EvaluateIndexed v%d→v%d (horizon %d) differs from Evaluate+Blame:\n got %v\nwant %v",
				r, ix.Head().Version(), ix.Horizon(), got, blamed)
		}
		return
	}
	if got.Outcome != blamed.Outcome || len(got.Violations) != len(blamed.Violations) {
		t.Fatalf("EvaluateIndexed v%d→v%d: verdict\n%v\nwant\n%v", r, ix.Head().Version(), got, blamed)
	}
	for i, x := range got.Violations {
		w := blamed.Violations[i]
		if x.Precondition != w.Precondition || x.FieldID != w.FieldID || x.FragmentID != w.FragmentID ||
			x.Reason != w.Reason || !strings.HasPrefix(x.Detail, w.Detail) {
			t.Fatalf("EvaluateIndexed violation %d = %v; want %v", i, x, w)
		}
		switch {
		case x.Version == w.Version && x.TxnUUID == w.TxnUUID:
		case x.Version == 0 && strings.Contains(x.Detail, "culprit not identified"):
		case !covered && x.Version > ix.Horizon() && x.TxnUUID == s.uuids[x.Version] && strings.Contains(x.Detail, "not indexed"):
		case !covered && x.Version == r+1 && x.Version == ix.Horizon() && x.Version == w.Version && (x.TxnUUID == w.TxnUUID || x.TxnUUID == ""):
			// the horizon is the only version after the read version: the
			// culprit, its uuid possibly forgotten (the committer has it)
		default:
			t.Fatalf("EvaluateIndexed violation %d blamed on v%d %q (%s); Blame says v%d %q; read v%d horizon %d",
				i, x.Version, x.TxnUUID, x.Detail, w.Version, w.TxnUUID, r, ix.Horizon())
		}
	}
}
