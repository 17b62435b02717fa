package committer

import (
	"testing"
	"time"

	"cellguard/internal/natstest"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

func TestCacheBudgetAsksLeastRecentlyUsedFirst(t *testing.T) {
	b := newCacheBudget(100)
	a, c, d := b.join("a"), b.join("c"), b.join("d")
	if got := a.report(40); got != 0 {
		t.Fatalf("a within budget: excess %d", got)
	}
	if got := c.report(40); got != 0 {
		t.Fatalf("c within budget: excess %d", got)
	}
	// d pushes the total to 130: a, the least recently used, is asked to
	// drop its caches, which covers the excess; c is left alone.
	if got := d.report(50); got != 0 {
		t.Fatalf("d: excess %d, want 0 (a covers it)", got)
	}
	if !requested(a) || requested(c) || requested(d) {
		t.Fatalf("requests: a %v c %v d %v, want only a", requested(a), requested(c), requested(d))
	}
	a.report(0)
	if got := b.used(); got != 90 {
		t.Fatalf("used %d after a dropped its caches, want 90", got)
	}
	// d alone cannot fit: with c asked, d must still drop 70 itself.
	if got := d.report(160); got != 160+40-100-40 {
		t.Fatalf("d over budget: excess %d, want %d", got, 160+40-100-40)
	}
	if !requested(c) {
		t.Fatal("c not asked to drop its caches")
	}
	// A state reloaded for c replaces its share; an old share leaving
	// does not release the new one.
	c2 := b.join("c")
	c2.report(10)
	c.leave("c")
	if got := b.used(); got != 170 {
		t.Fatalf("used %d, want 170 (d 160 + new c 10)", got)
	}
	c2.leave("c")
	d.leave("d")
	if got := b.used(); got != 0 {
		t.Fatalf("used %d after every dataset left, want 0", got)
	}
}

// TestCacheBudgetCountsAskedAsFreed: a share asked to drop its caches
// is not asked again, and what it will free covers later excesses until
// it reports; then it counts, and is asked, like any other.
func TestCacheBudgetCountsAskedAsFreed(t *testing.T) {
	b := newCacheBudget(100)
	a, c, d := b.join("a"), b.join("c"), b.join("d")
	a.report(60)
	c.report(30)
	if got := d.report(30); got != 0 || !requested(a) {
		t.Fatalf("d: excess %d, a asked %v; want 0, a asked", got, requested(a))
	}
	// 120 used, a's 60 on the way out: c growing by 20 needs nobody.
	if got := c.report(50); got != 0 || requested(a) || requested(d) {
		t.Fatalf("c: excess %d, a asked again %v, d asked %v; want 0, neither", got, requested(a), requested(d))
	}
	// a reports instead of dropping: it counts again and, least recently
	// used but for d, d is asked next when c grows again.
	a.report(40)
	if got := c.report(60); got != 0 || !requested(d) || requested(a) {
		t.Fatalf("c: excess %d, d asked %v, a asked %v; want 0, d asked, a not", got, requested(d), requested(a))
	}
}

func requested(s *budgetShare) bool { return s.takeRequest() }

// TestCacheBudgetKeepsDecisions decides the same transactions, stale reads
// and conflicts among them, with no budget and with a budget so small that
// every cache is dropped after every batch: the decisions are the same,
// the budgeted state reads older versions from history instead, and what
// it counts against the budget returns to zero.
func TestCacheBudgetKeepsDecisions(t *testing.T) {
	txns := []*lancepb.Transaction{createTxn(newUUID()), appendTxn(newUUID(), 1), deleteFragmentTxn(newUUID(), 2, 1)}
	for v := uint64(3); v < 40; v++ {
		txns = append(txns, appendTxn(newUUID(), v))
	}
	txns = append(txns,
		staleTxn(),                          // precondition on fragment 1, deleted at 3
		appendTxn(newUUID(), 2),             // stale append: rebased
		deleteFragmentTxn(newUUID(), 10, 1), // fragment 1 is long gone
		withPre(appendTxn(newUUID(), 30), cellsUnchanged([]int32{1}, wholeFragment(0))),
		deleteFragmentTxn(newUUID(), 20, 5),
		appendTxn(newUUID(), 25),
	)
	lim := staleLimits()
	refHist := newCountingHistory()
	ref := newState("ds", lim, refHist)
	want := decideAll(t, ref, &refHist.MemHistory, txns...)

	budget := newCacheBudget(1)
	lim.Budget = budget
	hist := newCountingHistory()
	st := newState("ds", lim, hist)
	other := newState("other", lim, newCountingHistory())
	decideAll(t, other, newMemHistory(), createTxn(newUUID()), appendTxn(newUUID(), 1))
	for i, txn := range txns {
		got := decideAll(t, st, &hist.MemHistory, txn)[0]
		if requested(other.BudgetShare.(*budgetShare)) {
			other.DropCaches()
		}
		if requested(st.BudgetShare.(*budgetShare)) {
			st.DropCaches()
		}
		if u := budget.used(); u > 1 {
			t.Fatalf("txn %d: %d bytes counted against a 1-byte budget", i, u)
		}
		w := want[i].Rec
		if got.Rec.Outcome != w.Outcome || got.Rec.Reason != w.Reason || got.Rec.Version != w.Version ||
			got.Rec.ConflictVersion != w.ConflictVersion || len(got.Rec.Violations) != len(w.Violations) {
			t.Errorf("txn %d: budgeted %v, unbudgeted %v", i, got.Rec, w)
		}
	}
	if hist.ManifestReads+hist.CommittedReads == 0 {
		t.Error("the budgeted state never read older history: its caches were not dropped")
	}
	if other.Head == nil || other.HeadVersion() != 2 {
		t.Errorf("other dataset lost its head: %v", other.HeadVersion())
	}
	var outcomes [3]int
	for _, v := range want {
		outcomes[v.Rec.Outcome]++
	}
	if outcomes[cellguardpb.Outcome_OUTCOME_REJECTED] == 0 {
		t.Error("the sequence has no rejection: it does not test stale reads")
	}
}

// TestCacheBudgetAcrossDatasets runs a committer whose cache budget is one
// byte: every batch asks the other datasets to drop their caches, and each
// dataset's stale transactions are then decided from checkpoints and the
// log. Every transaction still commits, in order, once.
func TestCacheBudgetAcrossDatasets(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	cfg.CacheBytes = 1
	r := start(t, srv.URL(), cfg)
	datasets := []string{"alpha", "beta", "gamma"}
	staged := map[string][]string{}
	note := func(ds, id string, txn *lancepb.Transaction) {
		staged[ds] = append(staged[ds], id)
		stage(t, js, ds, id, mustMarshal(t, txn))
	}
	for _, ds := range datasets {
		id := newUUID()
		note(ds, id, createTxn(id))
	}
	for v := uint64(1); v <= 10; v++ {
		for _, ds := range datasets {
			id := newUUID()
			note(ds, id, appendTxn(id, v))
		}
	}
	for _, ds := range datasets {
		waitVersion(t, js, ds, 11)
	}
	for _, ds := range datasets { // read long ago: rebased over what came since
		id := newUUID()
		note(ds, id, appendTxn(id, 2))
		id = newUUID()
		note(ds, id, withPre(appendTxn(id, 3), cellsUnchanged([]int32{1}, wholeFragment(0))))
	}
	for _, ds := range datasets {
		waitVersion(t, js, ds, 13)
		checkLog(t, readLog(t, js, ds), staged[ds])
	}
	deadline := time.Now().Add(30 * time.Second)
	for r.c.budget.used() > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("caches hold %d bytes against a 1-byte budget", r.c.budget.used())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
