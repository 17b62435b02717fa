package bench

// The runs of `cellguard bench`: one configuration each, on a fresh
// dataset (or fresh datasets) under a fresh committer or raw loop.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"cellguard/committer"
	"cellguard/internal/subject"
	"cellguard/proto/lancepb"
)

type bencher struct {
	url       string // client URLs of the server or cluster
	replicas  int    // stream replicas
	n         int    // transactions per single-dataset run
	producers int
	manyTxns  int // transactions per dataset in many-datasets runs
	out       io.Writer
	runs      int
	log       *slog.Logger
	// cacheBytes is the committers' Config.CacheBytes.
	cacheBytes int
	// partitions is the committers' Config.Partitions.
	partitions int
	// maxAckPending is the committers' Config.MaxAckPending.
	maxAckPending int
	// deciders is the committers' Config.Deciders.
	deciders int
	// atomicMin is the committers' Config.AtomicBatchMin, and raw
	// JetStream's rule alike (0: the default for the log).
	atomicMin int
	// timelineDir, if set, receives each run's decisions (-timeline).
	timelineDir string
	// keepStreams leaves each run's streams on the server (-keep-streams).
	keepStreams bool
	rep         *benchReport
	prog        *benchProgress
	round       int // of the runs being made, from 1
}

type runSpec struct {
	raw   bool
	batch int
	pre   int     // fragments each precondition protects
	rate  float64 // transactions/s; 0 = as fast as possible
}

// profileName names the CPU profile of spec's transactions
// (startPhaseProfile): <kind>-batch<N>[-pre<P>][-rate<R>].
func (spec runSpec) profileName() string {
	kind := kindCommitter
	if spec.raw {
		kind = kindRaw
	}
	name := fmt.Sprintf("%s-batch%d", kind, spec.batch)
	if spec.pre > 0 {
		name += fmt.Sprintf("-pre%d", spec.pre)
	}
	if spec.rate > 0 {
		name += fmt.Sprintf("-rate%.0f", spec.rate)
	}
	return name
}

type result struct {
	rate                   float64
	p50, p99               time.Duration
	rejected               int64
	duplicates, outOfOrder int64
	reasons                map[string]int64  // rejections by reason
	examples               map[string]string // a rejection's message per reason
}

// outcome is what one run measured.
type outcome struct {
	res      result
	timeline []sample // every decision, when -timeline is set
	setup    time.Duration
	replicas int
	mem      *memReport // many-datasets runs
	meter    metered    // after the set-up
}

// manyBatch is the batch size of the many-datasets runs.
const manyBatch = 64

// measure makes the run rec describes, fills in what it measured, prints
// it and adds it to the report.
func (b *bencher) measure(ctx context.Context, rec benchRecord) (benchRecord, error) {
	rec.Datasets = max(rec.Datasets, 1)
	rec.Round = max(b.round, 1)
	rec.Txns = b.n
	if rec.Load == loadDatasets {
		rec.Txns = rec.Datasets * b.manyTxns
	}
	b.prog.begin(rec.Name)
	before, err := b.streamNames(ctx)
	if err != nil {
		return rec, fmt.Errorf("bench: %s: list streams: %w", rec.Name, err)
	}
	start := time.Now()
	var out outcome
	if rec.Loop == loopClosed {
		rec.Producers = b.producers
	}
	// The goroutines of the run (producers, committer or raw loop, their
	// connections) carry its name in a -cpuprofile: go tool pprof
	// -tagfocus run=... shows one run (the servers' own goroutines are
	// not labelled).
	pprof.Do(ctx, pprof.Labels("run", rec.Name), func(ctx context.Context) {
		if rec.Load == loadDatasets {
			if rec.Loop == loopClosed {
				rec.Producers = len(shares(rec.Datasets, b.manyTxns, b.producers))
			}
			out, err = b.runMany(ctx, manySpec{raw: rec.Kind == kindRaw, datasets: rec.Datasets, per: b.manyTxns, loop: rec.Loop, rate: rec.OfferedPerSec})
		} else {
			out, err = b.run(ctx, runSpec{raw: rec.Kind == kindRaw, batch: rec.Batch, pre: rec.Protected, rate: rec.OfferedPerSec})
		}
	})
	if err != nil {
		return rec, fmt.Errorf("bench: %s: %w", rec.Name, err)
	}
	rec.record(out.res)
	if b.timelineDir != "" {
		if _, err := writeTimeline(b.timelineDir, len(b.rep.Runs)+1, rec.Name, out.timeline); err != nil {
			return rec, fmt.Errorf("bench: %s: timeline: %w", rec.Name, err)
		}
	}
	rec.Groups, rec.CPUPerTxnUs = out.meter.groups, float64(out.meter.cpu.Microseconds())/float64(rec.Txns)
	rec.AllocPerTxn, rec.GCCycles = float64(out.meter.heap.allocBytes)/float64(rec.Txns), out.meter.heap.cycles
	if rec.Groups > 0 {
		rec.AppendMs = ms(out.meter.appending) / float64(rec.Groups)
	}
	rec.SetupSec, rec.RunSec = out.setup.Seconds(), time.Since(start).Seconds()
	rec.Replicas, rec.RSSBytes = out.replicas, readRSS()
	if out.mem != nil {
		rec.RSSBytes = out.mem.rss
	}
	if rec.Kind == kindCommitter && (rec.Load == loadMax || rec.Load == loadDatasets) && rec.Loop != loopOpen {
		if raw := b.rep.findIn(rec.Round, kindRaw, rec.Load, rec.Loop, rec.Batch, rec.Datasets); raw != nil && raw.CommitsPerSec > 0 {
			rec.VsRaw = rec.CommitsPerSec / raw.CommitsPerSec
		}
	}
	b.rep.Runs = append(b.rep.Runs, rec)
	b.prog.end(rec)
	b.print(rec, out.mem)
	if err := b.dropStreams(ctx, before); err != nil {
		return rec, fmt.Errorf("bench: %s: %w", rec.Name, err)
	}
	return rec, nil
}

// streamNames lists the streams on the server.
func (b *bencher) streamNames(ctx context.Context) (map[string]bool, error) {
	nc, js, err := b.connect()
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	return listStreams(ctx, js)
}

func listStreams(ctx context.Context, js jetstream.JetStream) (map[string]bool, error) {
	names := map[string]bool{}
	l := js.StreamNames(ctx)
	for name := range l.Name() {
		names[name] = true
	}
	return names, l.Err()
}

// anchorStream is a stream the bench keeps from start to end, empty.
const anchorStream = "CELLGUARD_BENCH_ANCHOR"

// anchorStreams makes anchorStream, so that the account's stream
// directory never empties between runs: after deleting a stream the
// server removes that directory, and the account's, when they are empty,
// in a goroutine of its own, which can run while the next run creates
// its first stream there and fail that creation ("could not create
// storage directory").
func (b *bencher) anchorStreams(ctx context.Context) error {
	nc, js, err := b.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: anchorStream, Subjects: []string{"cellguard-bench.anchor"}, Storage: jetstream.FileStorage,
		Replicas: max(b.replicas, 1), MaxMsgs: 1,
	})
	if err != nil {
		return fmt.Errorf("bench: create %s: %w", anchorStream, err)
	}
	return nil
}

// dropStreams deletes the streams made since before was listed (a run's
// staging and decision streams, its checkpoint store), unless
// -keep-streams. Every run starts on fresh streams (each has its own
// subject prefix); what an earlier run left would stay in the embedded
// server's memory (messages cached, the deduplication window's ids, the
// subject index), which every later run's garbage collections mark and
// its wildcard lookups walk.
func (b *bencher) dropStreams(ctx context.Context, before map[string]bool) error {
	if b.keepStreams {
		return nil
	}
	nc, js, err := b.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	now, err := listStreams(ctx, js)
	if err != nil {
		return fmt.Errorf("list streams: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(now)) {
		if before[name] {
			continue
		}
		if err := js.DeleteStream(ctx, name); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("delete stream %s: %w", name, err)
		}
	}
	return nil
}

// print writes rec's row of the table, with a line for each reason of
// rejection and the memory report of a many-datasets run (mem, or nil).
func (b *bencher) print(rec benchRecord, mem *memReport) {
	printBenchRecord(b.out, rec)
	for _, reason := range slices.Sorted(maps.Keys(rec.RejectedExamples)) {
		fmt.Fprintf(b.out, "  rejected %s, e.g.: %s\n", reason, rec.RejectedExamples[reason])
	}
	if mem != nil {
		fmt.Fprintf(b.out, "  memory with %d datasets served: %s (one process: %s, embedded JetStream, producers)\n", rec.Datasets, mem, rec.Kind)
	}
}

// connect dials the bench's servers with a JetStream context.
func (b *bencher) connect() (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(b.url, nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, err
	}
	stagingErr.Store(nil)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(2048), jetstream.WithPublishAsyncErrHandler(restage))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// stagingErr is the first staged message of the run that the server
// refused for another reason than a full staging stream: the run fails
// with it (tracker.wait) instead of waiting for a decision that cannot
// come.
var stagingErr atomic.Pointer[error]

// awaitDecided waits until tr has n decisions. It fails when none came
// for stall (the committer or the loop is stuck), or at once when a
// staged message was refused (stagingErr); a large set-up that keeps
// making progress may take longer than stall in all.
func awaitDecided(ctx context.Context, tr *tracker, n int, stall time.Duration) error {
	last, since := tr.done.Load(), time.Now()
	for {
		if e := stagingErr.Load(); e != nil {
			return *e
		}
		done := tr.done.Load()
		switch {
		case done >= int64(n):
			return nil
		case done != last:
			last, since = done, time.Now()
		case time.Since(since) > stall || ctx.Err() != nil:
			return fmt.Errorf("bench: %d of %d decisions, none for %v", done, n, stall)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// restagePause is how long a staged message the stream had no room for
// waits before it is staged again.
const restagePause = 100 * time.Millisecond

// restage handles a staged message the server refused: one the staging
// stream had no room for (its MaxBytes or MaxMsgs with Discard: new: the
// committer is behind) is staged again after restagePause, as a producer
// told ErrBacklogFull would; any other refusal ends the run.
func restage(js jetstream.JetStream, m *nats.Msg, err error) {
	if !stagingFull(err) {
		err = fmt.Errorf("bench: staging on %s refused: %w", m.Subject, err)
		stagingErr.CompareAndSwap(nil, &err)
		return
	}
	go func() {
		time.Sleep(restagePause)
		for {
			_, err := js.PublishMsgAsync(m)
			if err == nil || !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				if err != nil {
					err = fmt.Errorf("bench: staging on %s: %w", m.Subject, err)
					stagingErr.CompareAndSwap(nil, &err)
				}
				return
			}
			time.Sleep(restagePause)
		}
	}()
}

// stagingFull reports whether a publish error is JetStream's refusal for
// want of room (as producer.ErrBacklogFull classifies it).
func stagingFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case 10002, 10023: // account resources exceeded, insufficient resources
		return true
	case 10077: // store failed: the stream at a limit, named in the description
		return strings.HasPrefix(apiErr.Description, "maximum ")
	}
	return false
}

// startCommitter runs c until ctx ends and waits until it is ready.
func startCommitter(ctx context.Context, wg *sync.WaitGroup, c *committer.Committer) error {
	errc := make(chan error, 1)
	wg.Add(1)
	go func() { defer wg.Done(); errc <- c.Run(ctx) }()
	for !c.Ready() {
		select {
		case err := <-errc:
			if err == nil {
				err = errors.New("it returned")
			}
			return fmt.Errorf("committer stopped before it was ready: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// streamReplicas returns the number of replicas the server reports for
// stream (0 if it cannot tell).
func streamReplicas(ctx context.Context, js jetstream.JetStream, stream string) int {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx)
	if err != nil || info.Cluster == nil {
		return 0
	}
	return 1 + len(info.Cluster.Replicas)
}

const benchFragments = 256

// run measures one configuration on a fresh dataset: for the committer a
// fresh committer limited to it, for raw JetStream a fresh pair of
// streams and the raw loop.
func (b *bencher) run(ctx context.Context, spec runSpec) (outcome, error) {
	b.runs++
	start := time.Now()
	prefix := fmt.Sprintf("cg%d", b.runs)
	if spec.raw {
		prefix = fmt.Sprintf("raw%d", b.runs)
	}
	sc, _ := subject.NewScheme(prefix)
	ds := fmt.Sprintf("bench%d", b.runs)
	nc, js, err := b.connect()
	if err != nil {
		return outcome{}, err
	}
	defer nc.Close()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	meter := newRunMeter(spec.raw)
	if spec.raw {
		if err := b.startRaw(rctx, &wg, sc, spec.batch, &meter.raw); err != nil {
			return outcome{}, err
		}
	} else {
		cnc, err := nats.Connect(b.url, nats.MaxReconnects(-1))
		if err != nil {
			return outcome{}, err
		}
		defer cnc.Close()
		c, err := committer.New(cnc, committer.Config{
			Prefix: prefix, Logger: b.log, BatchSize: spec.batch, Datasets: []string{ds}, Replicas: b.replicas,
			TakeoverOnStart: true, CheckpointEvery: 10000, TxnMaxBytes: 256 << 20, Partitions: b.partitions, MaxAckPending: b.maxAckPending, Deciders: b.deciders, AtomicBatchMin: b.atomicMin,
			Registerer: meter.reg,
		})
		if err != nil {
			return outcome{}, err
		}
		if err := startCommitter(rctx, &wg, c); err != nil {
			return outcome{}, err
		}
	}
	// Follow decisions on a core subscription.
	tr := newTracker(b.n + 1)
	sub, err := nc.Subscribe(sc.DecOf(ds), tr.onDecision)
	if err != nil {
		return outcome{}, err
	}
	defer sub.Unsubscribe()
	_ = sub.SetPendingLimits(-1, -1)
	// Create the dataset with benchFragments fragments, then measure.
	create := uuid.NewString()
	b.prog.watch("create", tr, 1)
	if err := publish(ctx, js, sc, ds, create, benchCreate(create), tr); err != nil {
		return outcome{}, err
	}
	if err := tr.wait(ctx, 1, time.Minute); err != nil {
		return outcome{}, err
	}
	setup := time.Since(start)
	meter.mark(1)
	tr.reset()
	b.prog.watch("transactions", tr, b.n)
	stopProfile, err := startPhaseProfile(spec.profileName())
	if err != nil {
		return outcome{}, err
	}
	err = b.produce(ctx, js, sc, ds, spec, tr)
	if err == nil {
		err = awaitDecided(ctx, tr, b.n, 5*time.Minute)
	}
	if err = errors.Join(err, stopProfile()); err != nil {
		return outcome{}, err
	}
	b.prog.watch("", nil, 0)
	return outcome{res: tr.result(b.n), timeline: b.timeline(tr), setup: setup, replicas: streamReplicas(ctx, js, sc.DecStream()), meter: meter.since(1 + b.n)}, nil
}

// timeline returns tr's decisions when -timeline is set.
func (b *bencher) timeline(tr *tracker) []sample {
	if b.timelineDir == "" {
		return nil
	}
	return tr.timeline()
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
				id := uuid.NewString()
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

// benchCreate is the creation of a bench table of benchFragments
// fragments, with transaction uuid id and data files named after it: the
// encoding of createTemplate with every occurrence of its placeholder id
// replaced by id (as long, so no length in the encoding changes), which
// keeps the bench's own work out of what a many-datasets set-up
// measures.
func benchCreate(id string) []byte {
	placeholder, tmpl := createTemplate()
	if len(id) != len(placeholder) {
		return encodeCreate(id)
	}
	return bytes.ReplaceAll(tmpl, []byte(placeholder), []byte(id))
}

// createTemplate is encodeCreate of a placeholder uuid, and that uuid.
var createTemplate = sync.OnceValues(func() (string, []byte) {
	const placeholder = "00000000-0000-4000-8000-000000000000"
	return placeholder, encodeCreate(placeholder)
})

// encodeCreate encodes benchCreate's transaction.
func encodeCreate(id string) []byte {
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
