package decide

// statecache.go bounds what a dataset's state keeps besides its head:
// recent manifests and transactions, by window and by cost.

import (
	"fmt"

	"cellguard/proto/lancepb"
	"cellguard/table"
)

// evict drops manifests and transactions that fell out of the window.
// The window slides forward only, so each version is dropped once.
func (s *State) evict() { s.evictUpTo(s.HeadVersion()) }

// evictUpTo is evict with head h: the window below h slides, nothing
// above h is touched.
func (s *State) evictUpTo(h uint64) {
	if h <= uint64(s.Limits.Window) {
		return
	}
	floor := h - uint64(s.Limits.Window)
	for v := s.windowFrom + 1; v <= floor; v++ {
		s.dropManifest(v)
		s.dropTxn(v)
	}
	s.windowFrom = max(s.windowFrom, floor)
	if span := s.conflictSpan(); h > span {
		s.trimConflicts(h - span)
	}
}

// evictByCost drops the oldest manifests of the window until what they
// keep alive fits windowBytes. Their transactions stay (they are small and
// landing reads them); a read version whose manifest is gone is pinned
// from older history when needed.
func (s *State) evictByCost() { s.evictByCostUpTo(s.HeadVersion()) }

// evictByCostUpTo is evictByCost with head h: only versions below h go.
func (s *State) evictByCostUpTo(h uint64) {
	if s.Limits.WindowBytes <= 0 {
		return
	}
	for v := s.manifestsDroppedTo + 1; s.recentBytes > s.Limits.WindowBytes && v < h; v++ {
		s.dropManifest(v)
		s.manifestsDroppedTo = v
	}
	for v := s.txnsDroppedTo + 1; s.txnBytes > s.Limits.WindowBytes && v < h; v++ {
		s.dropTxn(v)
		s.txnsDroppedTo = v
	}
}

// keepTxn adds the transaction committed at v (n bytes encoded) to the
// window and to the conflict index. With enc set, txn is borrowed
// (verdict.borrowed) and enc is its encoding: the window keeps enc, and
// decodes it again only if a later decision asks (windowed).
func (s *State) keepTxn(v uint64, txn *lancepb.Transaction, enc []byte, n int) {
	s.dropTxn(v)
	s.forgetConflicts(v)
	s.conflictBytes.add(v, s.conflicts.Add(v, txn))
	w := windowTxn{txn: txn}
	if enc != nil {
		w = windowTxn{enc: enc}
	}
	c := costed[windowTxn]{w, txnCost(n)}
	s.Txns.set(v, c)
	s.txnBytes += c.cost
}

// windowTxn is a committed transaction in the window: decoded, or its
// encoding until a decision asks for it.
type windowTxn struct {
	txn *lancepb.Transaction
	enc []byte
}

// windowed returns the transaction w holds for version v, decoding it
// (once) if w holds its encoding. Its cost in the window was counted as
// decoded from the start.
func (s *State) windowed(v uint64, w windowTxn) (*lancepb.Transaction, error) {
	if w.txn != nil {
		return w.txn, nil
	}
	txn, _, err := table.DecodeTransaction(w.enc)
	if err != nil {
		return nil, fmt.Errorf("transaction %s@%d, as recorded: %w", s.Dataset, v, err)
	}
	s.Txns.slot(v).v.v = windowTxn{txn: txn}
	return txn, nil
}

func (s *State) dropTxn(v uint64) {
	c, ok := s.Txns.remove(v)
	if !ok {
		return
	}
	s.txnBytes -= c.cost
}

// The conflict index outlives the window.
//
// A transaction read behind head lands as it is, with no manifest pinned
// and nothing read from the log, when the conflict index covers every
// version since its read version and names none of them (an Append among
// appends). Under load the read lag of every transaction is about the
// number of writers in flight, often more than the window, whose
// transactions windowBytes bounds further. So the index keeps what every
// version touches (some 50 bytes for an append) for as far back as a
// transaction may still be landed, maxRebaseLag versions, whatever the
// window dropped: a transaction the index names is read from the log
// when it is out of the window, one the index does not name is never
// read. It leaves the index from below when it is older than that, or
// when the cache budget needs the bytes (shrinkCaches), and from above
// when a batch is rolled back.

// conflictSpan is how many versions below head the conflict index keeps.
func (s *State) conflictSpan() uint64 {
	return max(s.Limits.MaxRebaseLag, uint64(s.Limits.Window))
}

// trimConflicts drops the conflict index's versions up to floor.
func (s *State) trimConflicts(floor uint64) {
	for s.conflictBytes.len() > 0 && s.conflictBytes.first <= floor {
		s.conflicts.Forget(s.conflictBytes.first)
		s.conflictBytes.dropOldest()
	}
}

// forgetConflicts drops the conflict index's versions from v on (a
// rolled-back batch, or a version decided again).
func (s *State) forgetConflicts(v uint64) {
	if s.conflictBytes.len() == 0 || v > s.conflictBytes.last() {
		return
	}
	if v <= s.conflictBytes.first {
		s.conflicts.Reset()
	} else {
		s.conflicts.Forget(v)
	}
	s.conflictBytes.dropFrom(v)
}

// conflictCosts mirrors the range of versions the conflict index covers
// with the bytes each takes, so that the state can count them against its
// budget and drop them from either end as the index does.
type conflictCosts struct {
	first uint64 // version of costs[0]
	costs []int
	bytes int
}

func (c *conflictCosts) len() int     { return len(c.costs) }
func (c *conflictCosts) last() uint64 { return c.first + uint64(len(c.costs)) - 1 }

// add records version v's cost; like ConflictIndex.Add, a version that
// does not follow the newest starts the range again.
func (c *conflictCosts) add(v uint64, cost int) {
	if len(c.costs) == 0 || v != c.last()+1 {
		*c = conflictCosts{first: v}
	}
	c.costs = append(c.costs, cost)
	c.bytes += cost
}

func (c *conflictCosts) dropOldest() {
	c.bytes -= c.costs[0]
	c.costs = c.costs[1:]
	c.first++
	if len(c.costs) == 0 {
		*c = conflictCosts{}
	}
}

// dropFrom drops v and every later version.
func (c *conflictCosts) dropFrom(v uint64) {
	for len(c.costs) > 0 && c.last() >= v {
		c.bytes -= c.costs[len(c.costs)-1]
		c.costs = c.costs[:len(c.costs)-1]
	}
	if len(c.costs) == 0 {
		*c = conflictCosts{}
	}
}

// txnCost approximates a decoded transaction's memory from its encoded
// size: protobuf messages in memory take several times their wire size
// (measured: 5.4 times for appends of 16 and 256 one-file fragments).
func txnCost(n int) int { return 256 + 6*n }

func (s *State) dropManifest(v uint64) {
	c, ok := s.recent.remove(v)
	if !ok {
		return
	}
	s.recentBytes -= c.cost
}

// costed is something the state keeps with the approximate bytes it
// keeps alive.
type costed[T any] struct {
	v    T
	cost int
}

// manifestCost approximates the memory a manifest in the window keeps
// alive that no later manifest shares: the fragment-trie nodes on the
// paths its successor changed (compressed nodes of up to a few hundred
// bytes, a few levels deep, in two maps) and the version's own header. The
// successor's encoded transaction size stands in for how much changed.
// The constants were measured with BenchmarkResidentDatasets when trie
// nodes were full 32-slot arrays (about 7 KiB for a one-fragment append);
// with compressed nodes they overestimate, which errs on the safe side.
func ManifestCost(txnBytes int) int { return 6<<10 + 8*txnBytes }
