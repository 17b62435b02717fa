package committer

// core.go names what the transport uses of the decision core
// (committer/decide), which holds the state and every rule that decides.

import (
	"context"

	"cellguard/committer/decide"
	"cellguard/internal/declog"
)

type (
	state         = decide.State
	verdict       = decide.Verdict
	staged        = decide.Staged
	mark          = decide.Mark
	limits        = decide.Limits
	ruleOptions   = decide.RuleOptions
	rejection     = decide.Rejection
	deletionWrite = decide.DeletionWrite
	history       = decide.History
)

var (
	errBrokenState = decide.ErrBrokenState
	errReplay      = decide.ErrReplay
	newState       = decide.NewState
	newStateOf     = decide.NewStateOf
	reject         = decide.Reject
	manifestCost   = decide.ManifestCost
	applyTxn       = decide.ApplyTxn
)

// adoption reports whether the committed record r (read headers only)
// is an adoption; a record that cannot be read is not.
func (c *Committer) adoption(ctx context.Context, r declog.Record) bool {
	full, err := c.record(ctx, r.Seq)
	return err == nil && full.Decision.GetAdoptedManifest() != nil
}
