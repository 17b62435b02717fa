package committer

// statecache.go bounds what a dataset's state keeps besides its head:
// recent manifests and transactions, by window and by cost.

import (
	"cellguard/proto/lancepb"
)

// evict drops manifests and transactions that fell out of the window.
// The window slides forward only, so each version is dropped once.
func (s *state) evict() {
	h := s.headVersion()
	if h <= uint64(s.lim.window) {
		return
	}
	floor := h - uint64(s.lim.window)
	for v := s.evicted + 1; v <= floor; v++ {
		s.dropManifest(v)
		s.dropTxn(v)
	}
	s.evicted = max(s.evicted, floor)
}

// evictByCost drops the oldest manifests of the window until what they
// keep alive fits windowBytes. Their transactions stay (they are small and
// landing reads them); a read version whose manifest is gone is pinned
// from older history when needed.
func (s *state) evictByCost() {
	if s.lim.windowBytes <= 0 {
		return
	}
	for v := s.mevicted + 1; s.rbytes > s.lim.windowBytes && v < s.headVersion(); v++ {
		s.dropManifest(v)
		s.mevicted = v
	}
	for v := s.tevicted + 1; s.tbytes > s.lim.windowBytes && v < s.headVersion(); v++ {
		s.dropTxn(v)
		s.tevicted = v
	}
}

// keepTxn adds the transaction committed at v (n bytes encoded) to the
// window and to the conflict index, which covers the window's
// transactions: those dropped from below leave it from below, those
// rolled back from above.
func (s *state) keepTxn(v uint64, txn *lancepb.Transaction, n int) {
	s.dropTxn(v)
	c := costed[*lancepb.Transaction]{txn, txnCost(n) + s.cx.Add(v, txn)}
	s.txns[v] = c
	s.tbytes += c.cost
}

func (s *state) dropTxn(v uint64) {
	c, ok := s.txns[v]
	if !ok {
		return
	}
	delete(s.txns, v)
	s.cx.Forget(v)
	s.tbytes -= c.cost
}

// txnCost approximates a decoded transaction's memory from its encoded
// size: protobuf messages in memory take several times their wire size
// (measured: 5.4 times for appends of 16 and 256 one-file fragments).
func txnCost(n int) int { return 256 + 6*n }

func (s *state) dropManifest(v uint64) {
	c, ok := s.recent[v]
	if !ok {
		return
	}
	delete(s.recent, v)
	s.rbytes -= c.cost
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
func manifestCost(txnBytes int) int { return 6<<10 + 8*txnBytes }
