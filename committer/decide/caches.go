package decide

// caches.go fits the state's caches to the memory budget it shares with
// every other dataset (Limits.Budget).

// Budget is the memory budget the caches of all datasets share. A state
// joins it once (NewState); the committer implements it.
type Budget interface {
	// Join returns the share of dataset ds, replacing any earlier one;
	// nil means no budget.
	Join(ds string) BudgetShare
}

// BudgetShare is one dataset's part of a Budget.
type BudgetShare interface {
	// Report records what the dataset's caches cost now and returns how
	// many bytes it must drop itself to fit (0: others drop theirs).
	Report(cost int) (excess int)
	// Leave releases the share of ds.
	Leave(ds string)
}

// CachedHistory is an older history (NewState) that caches what it
// read: its cache counts against the budget and is dropped first.
type CachedHistory interface {
	CacheCost() int
	DropCache()
}

// cacheCost is what the state's caches count against the budget: all it
// keeps beyond the head manifest and the bookkeeping every version needs.
func (s *State) CacheCost() int {
	n := s.recentBytes + s.txnBytes + s.conflictBytes.bytes + s.ChangeIndex.Bytes()
	if h, ok := s.Older.(CachedHistory); ok {
		n += h.CacheCost()
	}
	return n
}

// fitBudget reports the caches' cost to the budget and, if the least
// recently used datasets cannot free enough, drops the state's own oldest
// entries. It runs between batches, never with provisional decisions.
func (s *State) FitBudget() {
	if s.BudgetShare == nil {
		return
	}
	cost := s.CacheCost()
	if excess := s.BudgetShare.Report(cost); excess > 0 {
		s.ShrinkCaches(max(cost-excess, 0))
		s.BudgetShare.Report(s.CacheCost())
	}
}

// dropCaches answers the budget's request to drop the caches: everything
// but the head manifest goes.
func (s *State) DropCaches() {
	s.ShrinkCaches(0)
	if s.BudgetShare != nil {
		s.BudgetShare.Report(s.CacheCost())
	}
}

// leaveBudget releases the state's share, when the state is dropped.
func (s *State) LeaveBudget() {
	if s.BudgetShare != nil {
		s.BudgetShare.Leave(s.Dataset)
	}
}

// shrinkCaches drops cached entries, oldest first, until the caches cost
// at most target: history read from the log, then recent manifests, then
// committed transactions, then the conflict index's and the change
// index's oldest versions.
func (s *State) ShrinkCaches(target int) {
	if h, ok := s.Older.(CachedHistory); ok && s.CacheCost() > target {
		h.DropCache()
	}
	for v := max(s.manifestsDroppedTo, s.windowFrom) + 1; s.CacheCost() > target && v < s.HeadVersion(); v++ {
		s.dropManifest(v)
		s.manifestsDroppedTo = v
	}
	for v := max(s.txnsDroppedTo, s.windowFrom) + 1; s.CacheCost() > target && v <= s.HeadVersion(); v++ {
		s.dropTxn(v)
		s.txnsDroppedTo = v
	}
	for s.CacheCost() > target && s.conflictBytes.len() > 0 {
		s.trimConflicts(s.conflictBytes.first)
	}
	if over := s.CacheCost() - target; over > 0 {
		s.ChangeIndex.Shrink(max(s.ChangeIndex.Bytes()-over, 0))
	}
}

func joinBudget(b Budget, ds string) BudgetShare {
	if b == nil {
		return nil
	}
	return b.Join(ds)
}

// Share returns the state's part of the budget, nil without one.
func (s *State) Share() BudgetShare { return s.BudgetShare }
