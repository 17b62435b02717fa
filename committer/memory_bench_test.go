package committer

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"cellguard/internal/natstest"
	"cellguard/proto/cellguardpb"
	"cellguard/proto/lancepb"
)

// BenchmarkResidentDatasets measures what the decision core keeps per
// active dataset: `datasets` states, each with `versions` committed
// appends (more than the window) and as many precondition-carrying
// decisions, as a long-running committer holds them, under the default
// cache budget shared by all of them. It reports the Go
// heap in use and the process RSS after a GC, in MiB, and the heap per
// dataset, active and once every state is quiet (state.Quiet, as the
// sweep makes it after quietAfter). b.N is ignored beyond 1: the state
// is built once.
//
//	go test ./committer/ -run XXX -bench ResidentDatasets -benchtime 1x
func BenchmarkResidentDatasets(b *testing.B) {
	for _, c := range []struct{ datasets, versions, fragments int }{{1000, 20, 1}, {1000, 300, 1}, {1000, 2, 256}} {
		b.Run(fmt.Sprintf("datasets=%d/versions=%d/fragments=%d", c.datasets, c.versions, c.fragments), func(b *testing.B) {
			cfg := Config{}.withDefaults()
			lim := limits{
				MaxTxnBytes: cfg.MaxTxnBytes, Window: cfg.Window, MaxLag: cfg.MaxReadLag,
				MaxRebaseLag: cfg.MaxRebaseLag, IndexBytes: cfg.IndexBytes, WindowBytes: cfg.WindowBytes,
				Budget: newCacheBudget(cfg.CacheBytes),
			}
			before := heapInUse()
			states := make([]*state, c.datasets)
			for i := range states {
				states[i] = residentState(b, fmt.Sprintf("ds%d", i), lim, c.versions, c.fragments)
			}
			for _, st := range states { // what each worker does when asked
				if st.BudgetShare.(*budgetShare).takeRequest() {
					st.DropCaches()
				}
			}
			b.ReportMetric(float64(lim.Budget.(*cacheBudget).used())/(1<<20), "cache-MiB")
			runtime.GC()
			heap := heapInUse() - before
			b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
			b.ReportMetric(float64(rssBytes())/(1<<20), "rss-MiB")
			b.ReportMetric(float64(heap)/float64(c.datasets)/1024, "KiB/dataset")
			if path := os.Getenv("CG_HEAP_PROFILE"); path != "" {
				writeHeapProfile(b, path)
			}
			for _, st := range states { // what the sweep does once they are quiet
				st.Quiet()
			}
			quiet := heapInUse() - before
			b.ReportMetric(float64(quiet)/float64(c.datasets)/1024, "KiB/quiet-dataset")
			if path := os.Getenv("CG_HEAP_PROFILE"); path != "" {
				writeHeapProfile(b, path+".quiet")
			}
			runtime.KeepAlive(states)
		})
	}
}

// residentState builds a state whose table is created with fragments
// fragments (each with its own data file, as the bench's tables are),
// then takes versions appends.
func residentState(b testing.TB, ds string, lim limits, versions, fragments int) *state {
	st := newState(ds, lim, nil)
	seq := uint64(0)
	decide := func(txn *lancepb.Transaction) {
		seq++
		m := st.Mark()
		v := st.Decide(b.Context(), staged{Seq: seq, Data: mustMarshal(b, txn)})
		st.Commit(m, []*cellguardpb.Decision{v.Rec}, []uint64{seq})
	}
	create := createTxn(newUUID())
	if fragments > 1 {
		ow := create.GetOverwrite()
		for i := len(ow.Fragments); i < fragments; i++ {
			ow.Fragments = append(ow.Fragments, dataFragment(fmt.Sprintf("data/%s-%d.lance", newUUID(), i), 1000))
		}
	}
	decide(create)
	for range versions {
		decide(withPre(appendTxn(newUUID(), st.HeadVersion()), cellsUnchanged([]int32{1}, wholeFragment(0))))
	}
	return st
}

// writeHeapProfile writes the live heap to path, to see what the states
// hold: go tool pprof -sample_index=inuse_space -top committer.test path.
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// rssBytes reads the resident set size of this process (Linux), 0 if
// unknown.
func rssBytes() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// BenchmarkIdleDatasets measures what an idle dataset costs a running
// committer and its server, in one process: N datasets are created
// through a real committer (partitioned staging, embedded JetStream),
// left idle until their states are evicted, and the Go heap in use after
// a GC is compared with the heap before the first dataset. It reports
// KiB per idle dataset (b.N is ignored beyond 1).
//
//	go test ./committer/ -run XXX -bench IdleDatasets -benchtime 1x
func BenchmarkIdleDatasets(b *testing.B) {
	const n = 2000
	srv := runServer(b)
	_, js := natstest.Connect(b, srv.URL())
	cfg := testConfig()
	cfg.IdleEvict = 200 * time.Millisecond
	cfg.Logger = slog.New(slog.DiscardHandler)
	r := start(b, srv.URL(), cfg)
	runtime.GC()
	before := heapInUse()
	for i := range n {
		id := newUUID()
		stage(b, js, fmt.Sprintf("idle%05d", i), id, mustMarshal(b, createTxn(id)))
	}
	// A dataset turns idle only after its batch was decided and its
	// state evicted (a failed one would be retrying).
	deadline := time.Now().Add(2 * time.Minute)
	for {
		idle := 0
		for _, s := range r.c.DatasetStatuses() {
			if s.State == DatasetIdle {
				idle++
			}
		}
		if idle == n {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d datasets idle", idle, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	runtime.GC()
	heap := heapInUse() - before
	b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(heap)/n/1024, "KiB/idle-dataset")
	for _, i := range []int{0, n / 2, n - 1} { // after measuring: reading the log costs memory
		waitDecided(b, js, fmt.Sprintf("idle%05d", i), 1, time.Minute)
	}
	if path := os.Getenv("CG_HEAP_PROFILE"); path != "" {
		writeHeapProfile(b, path)
	}
}
