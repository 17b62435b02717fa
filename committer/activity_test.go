package committer

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// sweepCommitter is a Committer with no connection, enough for its
// workers to load states by hand and for sweepDatasets to run on them.
func sweepCommitter(t testing.TB, cacheBytes int) *Committer {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c := &Committer{cfg: Config{CacheBytes: cacheBytes}.withDefaults(), log: testLogger(), metrics: m, workers: map[string]*worker{}}
	c.budget = newCacheBudget(c.cfg.CacheBytes)
	return c
}

// loadAt gives ds a state of versions appends, loaded at at, as load
// does.
func loadAt(t testing.TB, c *Committer, ds string, at time.Time, versions int) *worker {
	t.Helper()
	cfg := c.cfg
	lim := limits{
		MaxTxnBytes: cfg.MaxTxnBytes, Window: cfg.Window, MaxLag: cfg.MaxReadLag,
		MaxRebaseLag: cfg.MaxRebaseLag, IndexBytes: cfg.IndexBytes, WindowBytes: cfg.WindowBytes,
		Budget: c.budget,
	}
	st := residentState(t, ds, lim, versions, 1)
	st.FitBudget()
	w := c.worker(ds)
	w.mu.Lock()
	w.active = at
	w.adopt(st)
	w.mu.Unlock()
	return w
}

// activeAt records a message of w arriving at at, as handle does.
func activeAt(w *worker, at time.Time) {
	w.mu.Lock()
	w.markActive(at)
	w.mu.Unlock()
}

// lens returns how many workers are hot and quiet.
func (a *activity) lens() (hot, quiet int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hot.n, a.quiet.n
}

// order returns the datasets of l, front to back (tests).
func (a *activity) order(l *actList) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	if l.root.next == nil {
		return out
	}
	for n := l.root.next; n != &l.root; n = n.next {
		out = append(out, n.w.ds)
	}
	return out
}

func checkOrder(t *testing.T, c *Committer, hot, quiet []string) {
	t.Helper()
	if got := c.act.order(&c.act.hot); !slices.Equal(got, hot) {
		t.Errorf("hot = %v, want %v", got, hot)
	}
	if got := c.act.order(&c.act.quiet); !slices.Equal(got, quiet) {
		t.Errorf("quiet = %v, want %v", got, quiet)
	}
}

func loaded(w *worker) (ok, quiet bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.st == nil {
		return false, false
	}
	return true, w.st.IsQuiet()
}

// TestSweepQuietsThenEvictsOldestFirst: a sweep quiets the datasets quiet
// for quietAfter, oldest first, and leaves the others hot; later sweeps
// evict the quiet ones in the order they went quiet, each when it has
// been idle for IdleEvict, and stop at the first not due.
func TestSweepQuietsThenEvictsOldestFirst(t *testing.T) {
	c := sweepCommitter(t, 0)
	q, idle := quietAfter(c.cfg.IdleEvict), c.cfg.IdleEvict
	t0 := time.Unix(1_000_000, 0)
	a := loadAt(t, c, "a", t0, 3)
	b := loadAt(t, c, "b", t0.Add(time.Second), 3)
	d := loadAt(t, c, "d", t0.Add(2*time.Second), 3)
	checkOrder(t, c, []string{"d", "b", "a"}, nil)
	if _, quiet := loaded(a); quiet {
		t.Fatal("a freshly loaded state is quiet already")
	}

	c.sweepDatasets(t0.Add(time.Second + q + time.Millisecond)) // a and b due, d not
	checkOrder(t, c, []string{"d"}, []string{"b", "a"})
	for _, w := range []*worker{a, b} {
		if ok, quiet := loaded(w); !ok || !quiet {
			t.Errorf("%s after its quiet sweep: loaded %t, quiet %t", w.ds, ok, quiet)
		}
	}
	if _, quiet := loaded(d); quiet {
		t.Error("d quieted before quietAfter")
	}

	c.sweepDatasets(t0.Add(idle + 500*time.Millisecond)) // a idle past IdleEvict, b not yet; d quieted
	checkOrder(t, c, nil, []string{"d", "b"})
	if ok, _ := loaded(a); ok {
		t.Error("a not evicted after IdleEvict")
	}
	if ok, _ := loaded(b); !ok {
		t.Error("b evicted before IdleEvict")
	}
	if n := testutil.ToFloat64(c.metrics.evictions.WithLabelValues("a")); n != 1 {
		t.Errorf("evictions of a = %v, want 1", n)
	}

	c.sweepDatasets(t0.Add(idle + 1500*time.Millisecond)) // b due
	checkOrder(t, c, nil, []string{"d"})
	c.sweepDatasets(t0.Add(idle + 2500*time.Millisecond)) // d due
	checkOrder(t, c, nil, nil)
	for _, w := range []*worker{a, b, d} {
		if ok, _ := loaded(w); ok {
			t.Errorf("%s still loaded", w.ds)
		}
	}
}

// TestSweepEvictsAHotDatasetIdleTooLong: a dataset idle past IdleEvict
// on the hot list (no sweep came between) is evicted at once.
func TestSweepEvictsAHotDatasetIdleTooLong(t *testing.T) {
	c := sweepCommitter(t, 0)
	t0 := time.Unix(1_000_000, 0)
	a := loadAt(t, c, "a", t0, 2)
	c.sweepDatasets(t0.Add(c.cfg.IdleEvict + time.Second))
	checkOrder(t, c, nil, nil)
	if ok, _ := loaded(a); ok {
		t.Error("a still loaded")
	}
}

// TestSweepRetriesBusyWorker: a worker whose lock is held when the sweep
// comes to it keeps its place and is swept at the next sweep; the ones
// behind it are swept meanwhile.
func TestSweepRetriesBusyWorker(t *testing.T) {
	c := sweepCommitter(t, 0)
	q, idle := quietAfter(c.cfg.IdleEvict), c.cfg.IdleEvict
	t0 := time.Unix(1_000_000, 0)
	a := loadAt(t, c, "a", t0, 2)
	b := loadAt(t, c, "b", t0.Add(time.Millisecond), 2)
	loadAt(t, c, "d", t0.Add(2*time.Millisecond), 2)
	loadAt(t, c, "e", t0.Add(3*time.Second), 2) // not due

	b.mu.Lock()
	c.sweepDatasets(t0.Add(q + time.Second))
	checkOrder(t, c, []string{"e", "b"}, []string{"d", "a"})
	b.mu.Unlock()
	if _, quiet := loaded(b); quiet {
		t.Error("b quieted while busy")
	}
	c.sweepDatasets(t0.Add(q + 1100*time.Millisecond))
	checkOrder(t, c, []string{"e"}, []string{"b", "d", "a"})
	if _, quiet := loaded(b); !quiet {
		t.Error("b not quieted at the sweep after")
	}

	// Busy at eviction time: a and d are evicted, b kept, then evicted
	// at the next sweep.
	b.mu.Lock()
	c.sweepDatasets(t0.Add(idle + time.Second))
	checkOrder(t, c, nil, []string{"e", "b"})
	b.mu.Unlock()
	if ok, _ := loaded(a); ok {
		t.Error("a not evicted")
	}
	c.sweepDatasets(t0.Add(idle + 1100*time.Millisecond))
	checkOrder(t, c, nil, []string{"e"})
	if ok, _ := loaded(b); ok {
		t.Error("b not evicted at the sweep after")
	}
}

// TestSweepLooksPastAtMostMaxBusy: past maxBusy busy workers, a sweep
// stops; the due workers behind them wait for the next one.
func TestSweepLooksPastAtMostMaxBusy(t *testing.T) {
	c := sweepCommitter(t, 0)
	t0 := time.Unix(1_000_000, 0)
	var busy []*worker
	for i := range maxBusy + 1 {
		w := loadAt(t, c, fmt.Sprintf("busy%d", i), t0.Add(time.Duration(i)*time.Millisecond), 1)
		w.mu.Lock()
		busy = append(busy, w)
	}
	loadAt(t, c, "free", t0.Add(time.Second), 1)
	now := t0.Add(quietAfter(c.cfg.IdleEvict) + 2*time.Second)
	c.sweepDatasets(now)
	if hot, quiet := c.act.lens(); hot != maxBusy+2 || quiet != 0 {
		t.Fatalf("with %d busy workers at the back: %d hot, %d quiet; want %d hot", maxBusy+1, hot, quiet, maxBusy+2)
	}
	for _, w := range busy {
		w.mu.Unlock()
	}
	c.sweepDatasets(now)
	if hot, quiet := c.act.lens(); hot != 0 || quiet != maxBusy+2 {
		t.Fatalf("once free: %d hot, %d quiet; want all quiet", hot, quiet)
	}
}

// TestSweepReactivatedWhileQuiet: a message to a quiet dataset moves it
// back to the front of hot; it is not evicted with the datasets that
// went quiet alongside it, and goes quiet again quietAfter after its
// message.
func TestSweepReactivatedWhileQuiet(t *testing.T) {
	c := sweepCommitter(t, 0)
	q, idle := quietAfter(c.cfg.IdleEvict), c.cfg.IdleEvict
	t0 := time.Unix(1_000_000, 0)
	a := loadAt(t, c, "a", t0, 2)
	b := loadAt(t, c, "b", t0.Add(time.Millisecond), 2)
	c.sweepDatasets(t0.Add(q + time.Second))
	checkOrder(t, c, nil, []string{"b", "a"})

	t1 := t0.Add(time.Minute)
	activeAt(a, t1)
	checkOrder(t, c, []string{"a"}, []string{"b"})
	c.sweepDatasets(t1.Add(q / 2))
	checkOrder(t, c, []string{"a"}, []string{"b"})
	c.sweepDatasets(t1.Add(q + time.Second))
	checkOrder(t, c, nil, []string{"a", "b"})

	c.sweepDatasets(t0.Add(idle + time.Second)) // b idle, a active a minute later
	checkOrder(t, c, nil, []string{"a"})
	if ok, _ := loaded(b); ok {
		t.Error("b not evicted")
	}
	if ok, _ := loaded(a); !ok {
		t.Error("a evicted with the datasets quiet alongside it")
	}
	c.sweepDatasets(t1.Add(idle + time.Second))
	checkOrder(t, c, nil, nil)
}

// TestDroppedStateLeavesActivityOrder: a state dropped for any reason
// (dropState: a failure, a stop) takes its worker off the lists, and a
// reload puts it back at the front of hot.
func TestDroppedStateLeavesActivityOrder(t *testing.T) {
	c := sweepCommitter(t, 0)
	t0 := time.Unix(1_000_000, 0)
	a := loadAt(t, c, "a", t0, 2)
	b := loadAt(t, c, "b", t0.Add(time.Millisecond), 2)
	loadAt(t, c, "d", t0.Add(2*time.Millisecond), 2)
	c.sweepDatasets(t0.Add(quietAfter(c.cfg.IdleEvict) + time.Second))
	activeAt(b, t0.Add(time.Minute))
	checkOrder(t, c, []string{"b"}, []string{"d", "a"})
	for _, w := range []*worker{a, b} {
		w.mu.Lock()
		w.dropState()
		w.mu.Unlock()
	}
	checkOrder(t, c, nil, []string{"d"})
	loadAt(t, c, "a", t0.Add(2*time.Minute), 2)
	checkOrder(t, c, []string{"a"}, []string{"d"})
}

// TestSweepHonorsAskedDatasetsOnly: the sweep serves the cache requests
// the budget queued, and only those; a dataset busy when its request is
// served is served at the next sweep.
func TestSweepHonorsAskedDatasetsOnly(t *testing.T) {
	// Three states of about the same cost and a budget for two of them:
	// loading the third asks the first to drop its caches.
	probe := sweepCommitter(t, 1<<30)
	one := loadAt(t, probe, "probe", time.Unix(1_000_000, 0), 20)
	cost := one.st.CacheCost()
	if cost == 0 {
		t.Fatal("a state with no cache cost")
	}
	c := sweepCommitter(t, 2*cost+cost/2)
	t0 := time.Unix(1_000_000, 0)
	a := loadAt(t, c, "a", t0, 20)
	b := loadAt(t, c, "b", t0, 20)
	a.mu.Lock() // busy
	loadAt(t, c, "d", t0, 20)
	if got := len(c.budget.askedQ); got != 1 || c.budget.askedQ[0].ds != "a" {
		t.Fatalf("asked %d shares, want a alone", got)
	}
	c.sweepDatasets(t0) // nothing due but the request; a busy
	if got := len(c.budget.askedQ); got != 1 {
		t.Fatalf("a busy: %d shares asked again, want 1", got)
	}
	a.mu.Unlock()
	before := b.st.CacheCost()
	c.sweepDatasets(t0)
	if got := len(c.budget.askedQ); got != 0 {
		t.Fatalf("%d shares still asked", got)
	}
	if got := a.st.CacheCost(); got >= cost {
		t.Errorf("a's caches cost %d after its request was served, want less than %d", got, cost)
	}
	if got := b.st.CacheCost(); got != before {
		t.Errorf("b, not asked, dropped caches: %d → %d", before, got)
	}
	if s := a.st.Share().(*budgetShare); requested(s) {
		t.Error("a's request still waiting")
	}
}

// BenchmarkSweep measures one sweep of a committer holding `datasets`
// quiet datasets (loaded, quieted, not idle long enough to be evicted),
// of which `due` got a message since the last sweep and are quieted
// again by it; an op includes those messages' moves to the front of hot
// (as handle makes them). Its cost is that of the due datasets, whatever
// the number held (with 100,000, each due dataset's memory is further
// from the processor's caches).
//
//	go test ./committer/ -run XXX -bench Sweep
func BenchmarkSweep(b *testing.B) {
	for _, n := range []int{1000, 100_000} {
		c := sweepCommitter(b, 0)
		q := quietAfter(c.cfg.IdleEvict)
		t0 := time.Unix(1_000_000, 0)
		ws := make([]*worker, n)
		for i := range ws {
			ws[i] = loadAt(b, c, fmt.Sprintf("ds%d", i), t0, 0)
		}
		now := t0.Add(q + time.Second)
		c.sweepDatasets(now)
		if hot, quiet := c.act.lens(); hot != 0 || quiet != n {
			b.Fatalf("%d hot, %d quiet; want %d quiet", hot, quiet, n)
		}
		for _, due := range []int{0, 8} {
			b.Run(fmt.Sprintf("datasets=%d/due=%d", n, due), func(b *testing.B) {
				next := 0
				for b.Loop() {
					now = now.Add(time.Microsecond)
					for range due {
						activeAt(ws[next], now.Add(-q-time.Nanosecond))
						next = (next + 1) % n
					}
					c.sweepDatasets(now)
				}
				if hot, quiet := c.act.lens(); hot != 0 || quiet != n {
					b.Fatalf("%d hot, %d quiet; want %d quiet", hot, quiet, n)
				}
			})
		}
	}
}
