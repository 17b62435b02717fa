package committer

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"cellguard/internal/natstest"
	"cellguard/internal/subject"
)

// groupConfig serves datasets with a decider each, so that the datasets'
// appends meet in the coalescer, and a group of two or more as an atomic
// batch.
func groupConfig(datasets int) Config {
	cfg := testConfig()
	cfg.Deciders = datasets
	cfg.AtomicBatchMin = 2
	cfg.Registerer = prometheus.NewRegistry()
	return cfg
}

// gate holds every round of appends until it is opened, and notes the
// datasets of the rounds it holds.
type gate struct {
	open chan struct{}
	once sync.Once
	mu   sync.Mutex
	held [][]string // each held round's datasets
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

func (g *gate) hook(datasets []string, shared bool) {
	g.mu.Lock()
	g.held = append(g.held, datasets)
	g.mu.Unlock()
	<-g.open
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// waitHeld waits until every one of n datasets' groups is in a round the
// gate holds or queued behind them, and returns the held rounds and the
// queue.
func (g *gate) waitHeld(t *testing.T, c *Committer, n int) (held [][]string, queued []*appendReq) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.groups.mu.Lock()
		queued = slices.Clone(c.groups.queue)
		c.groups.mu.Unlock()
		g.mu.Lock()
		held = slices.Clone(g.held)
		g.mu.Unlock()
		in := len(queued)
		for _, r := range held {
			in += len(r)
		}
		if in >= n {
			return held, queued
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d groups held or queued after 30s", in, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// createAll stages the creation of each dataset and returns their ids.
func createAll(t *testing.T, js jetstream.JetStream, datasets []string) map[string][]string {
	ids := map[string][]string{}
	for _, ds := range datasets {
		id := newUUID()
		ids[ds] = []string{id}
		stage(t, js, ds, id, mustMarshal(t, createTxn(id)))
	}
	return ids
}

func dsNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// TestAppendsShareABatchAcrossDatasets: the groups of datasets that
// append while earlier appends are in flight go to the log as one atomic
// batch: fewer appends than datasets, each dataset's decision at the
// sequence its committer was told.
func TestAppendsShareABatchAcrossDatasets(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	const n = 24
	datasets := dsNames("g", n)
	cfg := groupConfig(n)
	g := newGate()
	cfg.roundHook = g.hook
	r := start(t, srv.URL(), cfg)
	defer g.release()
	ids := createAll(t, js, datasets)
	// The first rounds are held; every other dataset's group queues
	// behind them.
	held, _ := g.waitHeld(t, r.c, n)
	g.release()
	for _, ds := range datasets {
		checkLog(t, waitDecided(t, js, ds, 1, 20*time.Second), ids[ds])
	}
	h := histogramOf(t, r.c.metrics.appendDatasets)
	if h.GetSampleSum() != n {
		t.Errorf("appends carried %v datasets' groups; want %d", h.GetSampleSum(), n)
	}
	if h.GetSampleCount() >= n {
		t.Errorf("%d datasets' decisions took %d appends; want fewer appends than datasets", n, h.GetSampleCount())
	}
	if h.GetSampleCount() > uint64(len(held))+1 {
		t.Errorf("%d appends; want at most %d (the %d held rounds, then one shared batch)", h.GetSampleCount(), len(held)+1, len(held))
	}
	// Each dataset's state holds the sequence of its own record.
	for _, ds := range datasets {
		l := readLog(t, js, ds)
		r.c.mu.Lock()
		w := r.c.workers[ds]
		r.c.mu.Unlock()
		w.mu.Lock()
		got := w.st.LastDecSeq
		w.mu.Unlock()
		if got != l[len(l)-1].seq {
			t.Errorf("%s: state's last record %d; log's %d", ds, got, l[len(l)-1].seq)
		}
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

// TestSharedBatchFenceFailsOneDataset: another writer appends to one
// dataset of a shared batch before it is sent. The server refuses the
// whole batch; the others are appended again and land, the fenced
// dataset alone rolls back, reads the other writer's record and ends
// with exactly one decision per staged transaction.
func TestSharedBatchFenceFailsOneDataset(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	const n = 12
	datasets := dsNames("f", n)
	cfg := groupConfig(n)
	g := newGate()
	cfg.roundHook = g.hook
	r := start(t, srv.URL(), cfg)
	defer g.release()
	ids := createAll(t, js, datasets)
	held, queued := g.waitHeld(t, r.c, n)
	// The other writer appends the very decision the victim's committer
	// holds, as a twin that decided the same transaction would. The
	// victim is queued behind the held rounds, which take all the queue
	// at once: a shared batch.
	if len(queued) < 2 {
		t.Fatalf("held rounds %v, %d queued: no shared batch to fence", held, len(queued))
	}
	victim := queued[len(queued)/2]
	seqs, err := r.c.dl.AppendEncoded(t.Context(), victim.ds, victim.expect, victim.encs)
	if err != nil {
		t.Fatal(err)
	}
	g.release()
	for _, ds := range datasets {
		l := checkLogWait(t, js, ds, ids[ds])
		if ds == victim.ds && l[0].seq != seqs[0] {
			t.Errorf("%s: its decision at %d; the other writer's is at %d", ds, l[0].seq, seqs[0])
		}
	}
	if got := testutil.ToFloat64(r.c.metrics.sharedRefused); got != 1 {
		t.Errorf("%v shared appends refused; want 1", got)
	}
	for _, ds := range datasets {
		want := 0.0
		if ds == victim.ds {
			want = 1
		}
		if got := testutil.ToFloat64(r.c.metrics.fencing.WithLabelValues(ds)); got != want {
			t.Errorf("%s: fenced %v times; want %v", ds, got, want)
		}
	}
	// The fenced dataset goes on deciding from the record it read back.
	id := newUUID()
	ids[victim.ds] = append(ids[victim.ds], id)
	stage(t, js, victim.ds, id, mustMarshal(t, appendTxn(id, 1)))
	checkLog(t, waitDecided(t, js, victim.ds, 2, 20*time.Second), ids[victim.ds])
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}

func checkLogWait(t *testing.T, js jetstream.JetStream, ds string, ids []string) []logged {
	t.Helper()
	l := waitDecided(t, js, ds, len(ids), 20*time.Second)
	checkLog(t, l, ids)
	return l
}

// TestCrashInSharedBatch crashes a committer part way through sending a
// batch shared by several datasets, restarts it, and checks every
// dataset's log: nothing lost, nothing twice, versions contiguous.
func TestCrashInSharedBatch(t *testing.T) {
	for _, at := range []int64{1, 2, 4} {
		t.Run(fmt.Sprintf("round%d", at), func(t *testing.T) { crashInSharedBatch(t, at) })
	}
}

// crashInSharedBatch crashes at the at-th shared round.
func crashInSharedBatch(t *testing.T, at int64) {
	srv := natstest.RunServer(t, func(o *server.Options) { o.JetStreamLimits.MaxBatchTimeout = 2 * time.Second })
	_, js := natstest.Connect(t, srv.URL())
	const n = 8
	datasets := dsNames("k", n)
	cfg := groupConfig(n)
	cfg.BatchSize = 2 // several rounds, pipelined
	cfg.MaxAckPending = 8
	ensureStreamsFor(t, js, cfg)
	var mu sync.Mutex
	sending := map[string]int64{} // dataset → the shared round that carries it
	var sharedRounds atomic.Int64
	cfg.roundHook = func(dss []string, shared bool) {
		var k int64 // 0: appended alone
		if shared {
			k = sharedRounds.Add(1)
		}
		mu.Lock()
		for _, ds := range dss {
			sending[ds] = k
		}
		mu.Unlock()
	}
	var fired atomic.Bool
	cfg.hook = func(s Step, ds string) error {
		if s != StepMidBatch || fired.Load() {
			return nil
		}
		mu.Lock()
		k := sending[ds]
		mu.Unlock()
		if k >= at && k > 0 && fired.CompareAndSwap(false, true) {
			return errors.New("boom")
		}
		return nil
	}
	ids := createAll(t, js, datasets)
	const per = 6
	for i := 1; i <= per; i++ {
		for _, ds := range datasets {
			id := newUUID()
			ids[ds] = append(ids[ds], id)
			stage(t, js, ds, id, mustMarshal(t, appendTxn(id, uint64(i))))
		}
	}
	r := start(t, srv.URL(), cfg)
	// Rounds are shared only while the log is busy: stage more until
	// the at-th shared round has come and crashed.
	deadline := time.Now().Add(20 * time.Second)
	for i := per + 1; !fired.Load() && time.Now().Before(deadline); i++ {
		time.Sleep(50 * time.Millisecond)
		if fired.Load() {
			break
		}
		for _, ds := range datasets {
			id := newUUID()
			ids[ds] = append(ids[ds], id)
			stage(t, js, ds, id, mustMarshal(t, appendTxn(id, uint64(i))))
		}
	}
	if !fired.Load() {
		t.Fatalf("no crash inside shared round %d (%d shared rounds)", at, sharedRounds.Load())
	}
	r.crashed(t)
	cfg.hook, cfg.roundHook = nil, nil
	cfg.Registerer = prometheus.NewRegistry()
	r2 := start(t, srv.URL(), cfg)
	for _, ds := range datasets {
		checkLogWait(t, js, ds, ids[ds])
	}
	if err := r2.stop(t); err != nil {
		t.Fatal(err)
	}
}

func histogramOf(t *testing.T, h prometheus.Histogram) *dto.Histogram {
	t.Helper()
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram()
}

// TestFirstBatchReadsTheStagingStreamOnce: the first batch of a new
// dataset checks the staging stream for undecided messages before it (a
// gap), and asks for nothing after the batch's last message: one read.
func TestFirstBatchReadsTheStagingStreamOnce(t *testing.T) {
	srv := natstest.RunServer(t)
	nc, js := natstest.Connect(t, srv.URL())
	cfg := testConfig()
	var sc subject.Scheme
	var reads atomic.Int64
	for _, subj := range []string{"$JS.API.DIRECT.GET." + sc.TxnStream(), "$JS.API.DIRECT.GET." + sc.TxnStream() + ".>", "$JS.API.STREAM.MSG.GET." + sc.TxnStream()} {
		sub, err := nc.Subscribe(subj, func(*nats.Msg) { reads.Add(1) })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	r := start(t, srv.URL(), cfg)
	ids := createAll(t, js, []string{"fresh"})
	checkLogWait(t, js, "fresh", ids["fresh"])
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := reads.Load(); got != 1 {
		t.Errorf("the first batch of a new dataset read the staging stream %d times; want 1", got)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
}
