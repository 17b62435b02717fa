package decide

import (
	"cellguard/internal/decidetest"
)

// The helpers both packages' tests use, from internal/decidetest.
type (
	memHistory      = decidetest.MemHistory
	countingHistory = decidetest.CountingHistory
)

var (
	testSchema         = decidetest.Schema
	dataFragment       = decidetest.DataFragment
	createTxn          = decidetest.CreateTxn
	appendTxn          = decidetest.AppendTxn
	deleteFragmentTxn  = decidetest.DeleteFragmentTxn
	withPre            = decidetest.WithPre
	cellsUnchanged     = decidetest.CellsUnchanged
	wholeFragment      = decidetest.WholeFragment
	staleTxn           = decidetest.StaleTxn
	newUUID            = decidetest.NewUUID
	mustMarshal        = decidetest.MustMarshal
	newMemHistory      = decidetest.NewMemHistory
	newCountingHistory = decidetest.NewCountingHistory
)

func staleLimits() Limits {
	return Limits{MaxTxnBytes: 1 << 20, Window: 16, MaxLag: 100000, MaxRebaseLag: 1000, IndexBytes: 8 << 20}
}
