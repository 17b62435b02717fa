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

// Quiet makes a dataset no message arrived for a while cost little: its
// head manifest is held packed (table.Manifest.Packed) until the next
// batch reads it, and the window's manifests, which share the head's
// fragments, go, as the budget drops them first (ShrinkCaches). The
// change index is kept, pointed at the packed head
// (table.ChangeIndex.ReplaceHead), and so are the conflict index and the
// window's transactions: what the state decides, and every byte of it,
// is what it would have decided without (TestQuietStateDecidesAlike).
// Like DropCaches it runs between batches, never with provisional
// decisions (PackCreated is what may). On a quiet state it does nothing.
func (s *State) Quiet() {
	if s.IsQuiet() {
		return
	}
	h := s.HeadVersion()
	for v := max(s.manifestsDroppedTo, s.windowFrom) + 1; v < h; v++ {
		s.dropManifest(v)
		s.manifestsDroppedTo = v
	}
	s.packHead()
	if s.BudgetShare != nil {
		s.BudgetShare.Report(s.CacheCost())
	}
}

// PackCreated packs the head of a state whose one version is a creation
// or adoption still appending, and reports whether it did: the only
// change of Quiet's made over a provisional decision, since rolling that
// decision back empties the state whatever was packed. A state with
// anything else (a window manifest: the batch made more than one
// version) is left as it is; nothing is dropped and nothing reported to
// the budget, which the commit does.
func (s *State) PackCreated() bool {
	if s.Head == nil || s.recent.len() > 0 || !s.Head.Packable() {
		return false
	}
	s.packHead()
	return true
}

// packHead replaces a packable head by its packed form, the change index
// pointed at it.
func (s *State) packHead() {
	if s.Head == nil || !s.Head.Packable() {
		return
	}
	p := s.Head.Packed()
	if s.ChangeIndex.Head() == nil || s.ChangeIndex.ReplaceHead(p) != nil {
		s.ChangeIndex.Rebuild(p) // out of step with head: as syncIndex would
	}
	s.Head = p
}

// IsQuiet reports whether the state is as Quiet leaves it: no window
// manifest, and the head (if any) packed or not packable.
func (s *State) IsQuiet() bool {
	return s.recent.len() == 0 && (s.Head == nil || !s.Head.Packable())
}

// WindowManifests returns how many manifests the window holds besides
// the head.
func (s *State) WindowManifests() int { return s.recent.len() }
