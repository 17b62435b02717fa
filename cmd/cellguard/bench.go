package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/committer"
	"cellguard/internal/subject"
	"cellguard/proto/lancepb"
)

// bench drives a real committer on an embedded server with concurrent
// producers and, in the same run, a raw JetStream loop doing the same I/O
// without evaluation (publish staged, consume, publish decisions as an
// atomic batch, ack).
func bench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("txns", 20000, "transactions per throughput run")
	producers := fs.Int("producers", 256, "concurrent producers (each stages, then awaits its decision)")
	batches := fs.String("batches", "1,8,64,256", "group-commit batch sizes to measure")
	pres := fs.String("preconditions", "0,1,16,128", "precondition sizes (fragments protected per transaction) to measure, at the largest batch size")
	many := fs.Int("datasets", 1000, "datasets in the many-datasets run (0: skip)")
	manyTxns := fs.Int("datasets-txns", 5, "transactions per dataset in the many-datasets run")
	cacheBytes := fs.Int("cache-bytes", 0, "the committer's cache budget for all datasets (0: its default)")
	latency := fs.Bool("latency", true, "also measure latency at half the measured throughput")
	dir := fs.String("data-dir", "", "embedded server store (default: a temp dir, removed after)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "cellguard-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		*dir = d
	}
	quiet := slog.New(slog.DiscardHandler)
	if os.Getenv("CELLGUARD_BENCH_LOG") != "" {
		quiet = slog.New(slog.NewTextHandler(stderr, nil))
	}
	b0 := quiet
	srv, err := open(*dir, -1)
	if err != nil {
		return err
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	b := &bencher{srv: srv, n: *n, producers: *producers, out: stdout, log: b0, cacheBytes: *cacheBytes}
	bs, err := parseInts(*batches)
	if err != nil {
		return usageError{err.Error()}
	}
	ps, err := parseInts(*pres)
	if err != nil {
		return usageError{err.Error()}
	}
	fmt.Fprintf(stdout, "cellguard bench: %d txns per run, %d producers, embedded JetStream (file store, R1), GOMAXPROCS=%s\n\n",
		*n, *producers, envOr("GOMAXPROCS", "all cores"))
	fmt.Fprintf(stdout, "%-34s %10s %9s %9s %9s\n", "run", "commits/s", "p50", "p99", "vs raw")
	for _, bsz := range bs {
		raw, err := b.run(ctx, runSpec{raw: true, batch: bsz})
		if err != nil {
			return err
		}
		b.print(fmt.Sprintf("raw JetStream  batch=%d", bsz), raw, 0)
		got, err := b.run(ctx, runSpec{batch: bsz})
		if err != nil {
			return err
		}
		b.print(fmt.Sprintf("committer      batch=%d", bsz), got, raw.rate)
		if *latency {
			rawHalf, err := b.run(ctx, runSpec{raw: true, batch: bsz, rate: got.rate / 2})
			if err != nil {
				return err
			}
			b.print(fmt.Sprintf("  raw, offered %.0f/s", got.rate/2), rawHalf, 0)
			half, err := b.run(ctx, runSpec{batch: bsz, rate: got.rate / 2})
			if err != nil {
				return err
			}
			b.print(fmt.Sprintf("  committer, offered %.0f/s", got.rate/2), half, 0)
		}
	}
	top := 256
	if len(bs) > 0 {
		top = bs[len(bs)-1]
	}
	for _, p := range ps {
		got, err := b.run(ctx, runSpec{batch: top, pre: p})
		if err != nil {
			return err
		}
		b.print(fmt.Sprintf("committer batch=%d pre=%d frags", top, p), got, 0)
	}
	if *many > 0 {
		got, mem, err := b.runMany(ctx, *many, *manyTxns)
		if err != nil {
			return err
		}
		b.print(fmt.Sprintf("%d datasets × %d txns", *many, *manyTxns), got, 0)
		fmt.Fprintf(stdout, "  memory with %d datasets served: %s (one process: committer, embedded JetStream, producers)\n", *many, mem)
	}
	return nil
}

// writeHeapProfile writes the live heap, for `go tool pprof`.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// memReport is the process's memory at one point.
type memReport struct {
	live, heap, rss, rssReleased uint64
}

func (m memReport) String() string {
	mib := func(n uint64) float64 { return float64(n) / (1 << 20) }
	return fmt.Sprintf("Go heap %.0f MiB (live %.0f MiB), RSS %.0f MiB; RSS %.0f MiB once free heap is returned to the OS",
		mib(m.heap), mib(m.live), mib(m.rss), mib(m.rssReleased))
}

// measureMemory reports the heap after a collection and the RSS, then the
// RSS again after returning free memory to the OS, as Go's scavenger does
// over time in a long-running process; CELLGUARD_BENCH_HEAP_PROFILE names
// a file for the heap profile.
func measureMemory() (memReport, error) {
	var m memReport
	m.heap, m.rss = memoryInUse()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.live = ms.HeapAlloc
	if path := os.Getenv("CELLGUARD_BENCH_HEAP_PROFILE"); path != "" {
		if err := writeHeapProfile(path); err != nil {
			return m, err
		}
	}
	debug.FreeOSMemory()
	_, m.rssReleased = memoryInUse()
	return m, nil
}

// memoryInUse returns the Go heap in use after a collection and the
// process's resident set size (Linux; 0 elsewhere).
func memoryInUse() (heap, rss uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ms.HeapInuse, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			rss = kb << 10
		}
	}
	return ms.HeapInuse, rss
}

func parseInts(s string) ([]int, error) {
	var out []int
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

type bencher struct {
	srv       *server.Server
	n         int
	producers int
	out       io.Writer
	runs      int
	log       *slog.Logger
	// cacheBytes is the committers' Config.CacheBytes.
	cacheBytes int
}

type runSpec struct {
	raw   bool
	batch int
	pre   int     // fragments each precondition protects
	rate  float64 // transactions/s; 0 = as fast as possible
}

type result struct {
	rate     float64
	p50, p99 time.Duration
	rejected int64
}

func (b *bencher) print(name string, r result, raw float64) {
	ratio := ""
	if raw > 0 {
		ratio = fmt.Sprintf("%.2f×", r.rate/raw)
	}
	rej := ""
	if r.rejected > 0 {
		rej = fmt.Sprintf("  (%d rejected)", r.rejected)
	}
	fmt.Fprintf(b.out, "%-34s %10.0f %9s %9s %9s%s\n", name, r.rate, r.p50.Round(10*time.Microsecond), r.p99.Round(10*time.Microsecond), ratio, rej)
}

const benchFragments = 256

// run measures one configuration on a fresh dataset (and, for the
// committer, a fresh committer limited to it).
func (b *bencher) run(ctx context.Context, spec runSpec) (result, error) {
	b.runs++
	prefix := "cg"
	if spec.raw {
		prefix = "raw"
	}
	sc, _ := subject.NewScheme(prefix)
	ds := fmt.Sprintf("bench%d", b.runs)
	nc, err := nats.Connect(b.srv.ClientURL())
	if err != nil {
		return result{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(2048))
	if err != nil {
		return result{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	if spec.raw {
		if err := b.startRaw(rctx, &wg, sc, ds, spec.batch); err != nil {
			return result{}, err
		}
	} else {
		cnc, err := nats.Connect(b.srv.ClientURL())
		if err != nil {
			return result{}, err
		}
		defer cnc.Close()
		c, err := committer.New(cnc, committer.Config{
			Prefix: prefix, Logger: b.log, BatchSize: spec.batch, Datasets: []string{ds},
			TakeoverOnStart: true, CheckpointEvery: 10000, TxnMaxBytes: 256 << 20,
		})
		if err != nil {
			return result{}, err
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Run(rctx) }()
		for !c.Ready() {
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Follow decisions on a core subscription.
	tr := newTracker(b.n + 1)
	sub, err := nc.Subscribe(sc.DecOf(ds), tr.onDecision)
	if err != nil {
		return result{}, err
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)
	// Create the dataset with benchFragments fragments, then measure.
	create := newUUID()
	if err := publish(ctx, js, sc, ds, create, benchCreate(create), tr); err != nil {
		return result{}, err
	}
	if err := tr.wait(ctx, 1, time.Minute); err != nil {
		return result{}, err
	}
	tr.reset()
	if err := b.produce(ctx, js, sc, ds, spec, tr); err != nil {
		return result{}, err
	}
	if err := tr.wait(ctx, b.n, 5*time.Minute); err != nil {
		return result{}, err
	}
	return tr.result(b.n), nil
}

// produce stages b.n appends. At full speed (rate 0) each of b.producers
// workers reads the head, stages, and waits for its decision before the
// next, as a pipeline worker does; the read lag is then at most the number
// of producers. At a fixed rate producers stage open-loop on a schedule.
func (b *bencher) produce(ctx context.Context, js jetstream.JetStream, sc subject.Scheme, ds string, spec runSpec, tr *tracker) error {
	var wg sync.WaitGroup
	errs := make(chan error, b.producers)
	per := b.n / b.producers
	tokens := pace(ctx, spec.rate, b.n)
	for p := 0; p < b.producers; p++ {
		count := per
		if p == b.producers-1 {
			count = b.n - per*(b.producers-1)
		}
		wg.Add(1)
		go func(p, count int) {
			defer wg.Done()
			done := make(chan struct{}, 1)
			for i := 0; i < count; i++ {
				id := newUUID()
				body := benchAppend(id, max(tr.head.Load(), 1), spec.pre)
				if spec.rate > 0 {
					select {
					case <-tokens:
					case <-ctx.Done():
						return
					}
					body = benchAppend(id, max(tr.head.Load(), 1), spec.pre)
					if err := publishAsync(js, sc, ds, id, body, tr); err != nil {
						errs <- err
						return
					}
					continue
				}
				tr.await(id, done)
				if err := publishAsync(js, sc, ds, id, body, tr); err != nil {
					errs <- err
					return
				}
				select {
				case <-done:
				case <-ctx.Done():
					return
				case <-time.After(time.Minute):
					errs <- fmt.Errorf("bench: no decision for %s after a minute", id)
					return
				}
			}
		}(p, count)
	}
	wg.Wait()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return fmt.Errorf("bench: staging did not complete")
	}
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// pace hands out n tokens at rate per second (nil channel for rate 0).
func pace(ctx context.Context, rate float64, n int) <-chan struct{} {
	if rate <= 0 {
		return nil
	}
	ch := make(chan struct{}, n)
	go func() {
		start := time.Now()
		sent := 0
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for sent < n {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				for due := min(n, int(now.Sub(start).Seconds()*rate)); sent < due; sent++ {
					ch <- struct{}{}
				}
			}
		}
	}()
	return ch
}

func publish(ctx context.Context, js jetstream.JetStream, sc subject.Scheme, ds, id string, body []byte, tr *tracker) error {
	tr.sent(id)
	_, err := js.Publish(ctx, sc.Txn(ds), body, jetstream.WithMsgID(id))
	return err
}

func publishAsync(js jetstream.JetStream, sc subject.Scheme, ds, id string, body []byte, tr *tracker) error {
	tr.sent(id)
	for {
		_, err := js.PublishAsync(sc.Txn(ds), body, jetstream.WithMsgID(id))
		if err == nil || !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			return err
		}
		<-js.PublishAsyncComplete() // back off until the window drains
	}
}

func benchCreate(id string) []byte {
	frags := make([]*lancepb.DataFragment, benchFragments)
	for i := range frags {
		frags[i] = benchFragment(fmt.Sprintf("data/%s-%d.lance", id, i))
	}
	b, _ := proto.Marshal(&lancepb.Transaction{Uuid: id, Operation: &lancepb.Transaction_Overwrite_{Overwrite: &lancepb.Transaction_Overwrite{
		Schema: []*lancepb.Field{
			{Id: 0, Name: "id", ParentId: -1, LogicalType: "int64", Type: lancepb.Field_LEAF},
			{Id: 1, Name: "x", ParentId: -1, LogicalType: "double", Nullable: true, Type: lancepb.Field_LEAF},
		},
		Fragments: frags,
	}}})
	return b
}

func benchFragment(path string) *lancepb.DataFragment {
	return &lancepb.DataFragment{PhysicalRows: 1000, Files: []*lancepb.DataFile{{
		Path: path, Fields: []int32{0, 1}, ColumnIndices: []int32{0, 1}, FileMajorVersion: 2, FileMinorVersion: 1,
	}}}
}

// benchAppend is an append of one fragment whose preconditions protect
// column x of the first pre fragments (which appends never change).
func benchAppend(id string, rv uint64, pre int) []byte {
	txn := &lancepb.Transaction{Uuid: id, ReadVersion: rv, Operation: &lancepb.Transaction_Append_{Append: &lancepb.Transaction_Append{
		Fragments: []*lancepb.DataFragment{benchFragment("data/" + id + ".lance")},
	}}}
	if pre > 0 {
		rows := make([]*lancepb.FragmentRows, min(pre, benchFragments))
		for i := range rows {
			rows[i] = &lancepb.FragmentRows{FragmentId: uint64(i), Selection: &lancepb.FragmentRows_WholeFragment{WholeFragment: true}}
		}
		txn.Preconditions = []*lancepb.Precondition{{Kind: &lancepb.Precondition_CellsUnchanged{
			CellsUnchanged: &lancepb.CellsUnchanged{FieldIds: []int32{1}, Rows: rows},
		}}}
	}
	b, _ := proto.Marshal(txn)
	return b
}

// them (one consumer and one worker each).
func (b *bencher) runMany(ctx context.Context, datasets, per int) (result, memReport, error) {
	prefix := "many"
	sc, _ := subject.NewScheme(prefix)
	nc, err := nats.Connect(b.srv.ClientURL())
	if err != nil {
		return result{}, memReport{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(2048))
	if err != nil {
		return result{}, memReport{}, err
	}
	cnc, err := nats.Connect(b.srv.ClientURL())
	if err != nil {
		return result{}, memReport{}, err
	}
	defer cnc.Close()
	c, err := committer.New(cnc, committer.Config{
		Prefix: prefix, Logger: slog.New(slog.DiscardHandler), TakeoverOnStart: true, DiscoverEvery: 100 * time.Millisecond,
		BatchSize: 64, Window: 16, TxnMaxBytes: 512 << 20, CacheBytes: b.cacheBytes,
	})
	if err != nil {
		return result{}, memReport{}, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(rctx) }()
	defer func() { cancel(); <-done }()
	for !c.Ready() {
		time.Sleep(5 * time.Millisecond)
	}
	tr := newTracker(datasets * (per + 1))
	sub, err := nc.Subscribe(sc.DecAll(), tr.onDecision)
	if err != nil {
		return result{}, memReport{}, err
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)
	for d := 0; d < datasets; d++ {
		id := newUUID()
		if err := publishAsync(js, sc, fmt.Sprintf("ds%04d", d), id, benchCreate(id), tr); err != nil {
			return result{}, memReport{}, err
		}
	}
	if err := tr.wait(ctx, datasets, 5*time.Minute); err != nil {
		return result{}, memReport{}, err
	}
	tr.reset()
	for i := 0; i < per; i++ {
		for d := 0; d < datasets; d++ {
			id := newUUID()
			if err := publishAsync(js, sc, fmt.Sprintf("ds%04d", d), id, benchAppend(id, 1+uint64(i), 0), tr); err != nil {
				return result{}, memReport{}, err
			}
		}
	}
	if err := tr.wait(ctx, datasets*per, 5*time.Minute); err != nil {
		return result{}, memReport{}, err
	}
	// Measured while the committer still serves every dataset.
	mem, err := measureMemory()
	return tr.result(datasets * per), mem, err
}
