// Package demo runs workers, an updater and the committer on an embedded
// server and verifies the data they leave (cellguard demo).
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"cellguard/committer"
	"cellguard/internal/embedded"
	"cellguard/producer"
	"cellguard/proto/lancepb"
	"cellguard/table"
	"cellguard/table/data"
)

// The demo's table: x is the input column, y = f(x) the derived one.
const (
	demoDataset = "demo"
	FieldX      = int32(0)
	FieldY      = int32(1)
)

// demoF is the worker's function: y = f(x).
func demoF(x int64) int64 { return 3*x + 7 }

// Fields are the demo table's columns: x, and y = f(x).
var Fields = []*lancepb.Field{
	{Name: "x", Id: FieldX, ParentId: -1, LogicalType: "int64"},
	{Name: "y", Id: FieldY, ParentId: -1, LogicalType: "int64", Nullable: true},
}

// Options are what a demo run does; the flags of `cellguard demo` set
// them.
type Options struct {
	DataDir     string // empty: a temporary directory, removed at the end
	LanceRoot   string // non-empty: the dataset's files go to LanceRoot/<dataset>.lance
	Fragments   int
	Rows        int
	Workers     int
	Duration    time.Duration // how long the updater runs
	UpdateEvery time.Duration // pause between updates
	WorkTime    time.Duration // how long computing y for a fragment takes
	Settle      time.Duration // how long workers may take to catch up
	Crash       bool          // crash one worker mid-run and restart it
	Unsafe      bool          // stage y without preconditions, to compare
	Seed        uint64
	Quiet       bool // no live progress
	// OnStall, when set, runs once the workers have not caught up within
	// Settle, before they are stopped (tests dump the goroutines there).
	OnStall func()
}

// Defaults are the options of a demo run no flag changes.
func Defaults() Options {
	return Options{
		Fragments: 8, Rows: 1000, Workers: 3, Duration: 20 * time.Second, UpdateEvery: 40 * time.Millisecond,
		WorkTime: 80 * time.Millisecond, Settle: 30 * time.Second, Crash: true,
	}
}

// Check reports an option out of range as an *OptionError.
func (o Options) Check() error {
	if o.Fragments < 1 || o.Rows < 1 || o.Workers < 1 || o.Duration <= 0 || o.UpdateEvery <= 0 {
		return &OptionError{"demo: --fragments, --rows, --workers, --duration and --update-every must be positive"}
	}
	return nil
}

// OptionError is an option the demo cannot run with; the message names
// its flag.
type OptionError struct{ Msg string }

func (e *OptionError) Error() string { return e.Msg }

// Run runs the demo and verifies it: the summary goes to out, and the
// error is not nil unless every check passed. Seed 0 takes one from the
// clock; an empty LanceRoot publishes to a new temporary directory, kept.
func Run(ctx context.Context, o Options, out io.Writer) error {
	if err := o.Check(); err != nil {
		return err
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.LanceRoot == "" {
		dir, err := os.MkdirTemp("", "cellguard-demo-lance-")
		if err != nil {
			return err
		}
		o.LanceRoot = dir
	}
	res, err := runDemo(ctx, o, out)
	if err != nil {
		return err
	}
	if !res.ok() {
		return errors.New("demo: verification failed")
	}
	return nil
}

// demoResult is what a run verified.
type demoResult struct {
	head           uint64
	yTxns          int   // committed transactions that published y
	rowsChecked    int64 // live rows checked at the versions those created
	stalePublished int64 // rows among them with y != f(x)
	headRows       int64 // live rows at the final head
	staleAtHead    int64 // rows at the final head with y != f(x)
	caughtUp       bool
	format         string          // the head's Lance data storage version, as its manifest records it
	headFiles      int             // data files at the head
	foreignFiles   int             // data files at the head that are not Lance files of format
	headOverlays   int             // data overlays at the head (Lance 8 cannot read them)
	manifest       *table.Manifest // the head
	lanceDir       string          // where the versions were published ("" when not published)
	published      uint64          // the last version the publisher laid out there
	publishErr     error           // why publishing did not reach the head
}

func (r demoResult) ok() bool {
	return r.caughtUp && r.stalePublished == 0 && r.staleAtHead == 0 && r.yTxns > 0 && r.headRows > 0 &&
		r.format != "" && r.headFiles > 0 && r.foreignFiles == 0 && r.headOverlays == 0 &&
		(r.lanceDir == "" || r.published == r.head && r.publishErr == nil)
}

// demoRun is one run: the embedded server, the committer, the dataset and
// the statistics the workers and the updater share.
type demoRun struct {
	cfg    Options
	out    io.Writer
	url    string
	srv    *embedded.Server // connect through srv.Connect: the embedded server has the roles of production
	dir    string           // the demo dataset's directory: data/, _deletions/ and, when published, _versions/
	store  *data.Store
	schema *table.Schema
	start  time.Time
	stats  demoStats

	mu         sync.Mutex
	logs       []string // notable events, printed with the progress
	highlights []string // the crash story, repeated in the summary
}

// demoStats are counters shared by all goroutines.
type demoStats struct {
	yCommits    atomic.Int64
	recompStale atomic.Int64 // recomputations after a version made y stale
	recompQueue atomic.Int64 // recomputations from the rejection queue
	skipped     atomic.Int64 // jobs found fresh already
	queueJobs   atomic.Int64
	redelivered atomic.Int64
	recovered   atomic.Int64 // lost outcomes looked up by uuid
	updates     atomic.Int64
	updateRetry atomic.Int64
	mu          sync.Mutex
	rejected    map[string]int64 // y rejections by reason
	updateKinds map[string]int64
}

func (s *demoStats) reject(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rejected[reason]++
}

func (s *demoStats) update(kind string) {
	s.updates.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.updateKinds[kind]++
}

func (d *demoRun) note(format string, args ...any) {
	line := fmt.Sprintf("%5.1fs  » %s", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
	d.mu.Lock()
	defer d.mu.Unlock()
	d.logs = append(d.logs, line)
}

// highlight notes an event that the summary repeats.
func (d *demoRun) highlight(format string, args ...any) {
	line := fmt.Sprintf("%5.1fs  » %s", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
	d.mu.Lock()
	defer d.mu.Unlock()
	d.logs = append(d.logs, line)
	d.highlights = append(d.highlights, line)
}

func (d *demoRun) flushNotes() {
	d.mu.Lock()
	logs := d.logs
	d.logs = nil
	d.mu.Unlock()
	for _, l := range logs {
		fmt.Fprintln(d.out, l)
	}
}

// runDemo runs the whole loop and verifies it.
func runDemo(ctx context.Context, cfg Options, out io.Writer) (demoResult, error) {
	d := &demoRun{cfg: cfg, out: out, start: time.Now()}
	d.stats.rejected = map[string]int64{}
	d.stats.updateKinds = map[string]int64{}
	dir := cfg.DataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "cellguard-demo-")
		if err != nil {
			return demoResult{}, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return demoResult{}, &OptionError{fmt.Sprintf("demo: --data-dir %s is not empty; give the demo an empty or new directory", dir)}
	}
	quiet := slog.New(slog.DiscardHandler)
	srv, err := embedded.Start(dir, -1, embedded.Always(), quiet)
	if err != nil {
		return demoResult{}, err
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	d.url, d.srv = srv.ClientURL(), srv
	root := filepath.Join(dir, "datasets")
	storeAt := filepath.Join(root, demoDataset)
	if cfg.LanceRoot != "" {
		if storeAt, err = prepareLanceRoot(cfg.LanceRoot); err != nil {
			return demoResult{}, err
		}
	} else if err := os.MkdirAll(storeAt, 0o755); err != nil {
		return demoResult{}, err
	}
	d.dir = storeAt
	if d.store, err = data.Open(ctx, storeAt); err != nil {
		return demoResult{}, err
	}
	defer d.store.Close()
	if d.schema, err = table.NewSchema(Fields); err != nil {
		return demoResult{}, err
	}

	fmt.Fprintf(out, "cellguard demo: %d fragments × %d rows, %d workers computing y = 3x+7, an updater changing x for %v\n",
		cfg.Fragments, cfg.Rows, cfg.Workers, cfg.Duration)
	where := dir + " (removed at exit; keep it with --data-dir)"
	if cfg.DataDir != "" {
		where = dir
	}
	fmt.Fprintf(out, "  embedded NATS JetStream at %s, data in %s\n", d.url, where)
	if cfg.LanceRoot != "" {
		fmt.Fprintf(out, "  every committed version is published as a Lance version in %s\n", lanceLocation(cfg.LanceRoot, demoDataset))
	}

	stopCommitter, err := d.runCommitter(ctx, root)
	if err != nil {
		return demoResult{}, err
	}
	defer stopCommitter()
	var pub *demoPublisher
	if cfg.LanceRoot != "" {
		if pub, err = startDemoPublisher(ctx, d.srv); err != nil {
			return demoResult{}, err
		}
		defer pub.stop()
	}
	nc, err := d.srv.Connect("worker", "cellguard-demo")
	if err != nil {
		return demoResult{}, err
	}
	defer nc.Close()
	pc, err := producer.New(nc, producer.Config{})
	if err != nil {
		return demoResult{}, err
	}
	defer pc.Close()
	if err := d.createTable(ctx, pc); err != nil {
		return demoResult{}, err
	}

	res, err := d.loop(ctx, pc)
	if err != nil {
		return res, err
	}
	if err := d.verify(ctx, pc, &res); err != nil {
		return res, err
	}
	if pub != nil {
		res.lanceDir = lanceLocation(d.lanceRootAbs(), demoDataset)
		res.published, res.publishErr = pub.waitFor(ctx, res.head, 30*time.Second)
	}
	d.printSummary(res)
	return res, nil
}

// lanceLocation is where a dataset lives under a --lance-root: the
// directory lancedb.connect(root).openTable(name) opens.
func lanceLocation(root, dataset string) string {
	return filepath.Join(root, dataset+".lance")
}

// lanceRootAbs is the absolute --lance-root, or "" without one.
func (d *demoRun) lanceRootAbs() string {
	if d.cfg.LanceRoot == "" {
		return ""
	}
	abs, err := filepath.Abs(d.cfg.LanceRoot)
	if err != nil {
		return d.cfg.LanceRoot
	}
	return abs
}

// prepareLanceRoot makes the empty directory lanceRoot/demo.lance, where
// the committer (through its LanceRoot) and the publisher place the demo's
// table, and returns its absolute path.
func prepareLanceRoot(lanceRoot string) (string, error) {
	loc, err := filepath.Abs(lanceLocation(lanceRoot, demoDataset))
	if err != nil {
		return "", err
	}
	if entries, err := os.ReadDir(loc); err == nil && len(entries) > 0 {
		return "", &OptionError{fmt.Sprintf("demo: %s is not empty; give --lance-root a directory without a %s.lance table", loc, demoDataset)}
	}
	if err := os.MkdirAll(loc, 0o755); err != nil {
		return "", fmt.Errorf("demo: --lance-root: %w", err)
	}
	return loc, nil
}

// runCommitter starts the committer on its own connection.
func (d *demoRun) runCommitter(ctx context.Context, root string) (func(), error) {
	nc, err := d.srv.Connect("committer", "cellguard-committer")
	if err != nil {
		return nil, err
	}
	c, err := committer.New(nc, committer.Config{
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		Datasets:        []string{demoDataset},
		DatasetRoot:     root,
		LanceRoot:       d.lanceRootAbs(),
		TakeoverOnStart: true,
		CheckpointEvery: 200,
		AckWait:         5 * time.Second,
		PinnedTTL:       6 * time.Second,
		PullExpiry:      time.Second,
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	for !c.Ready() {
		select {
		case err := <-done:
			cancel()
			nc.Close()
			return nil, fmt.Errorf("committer: %w", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return func() {
		cancel()
		<-done
		nc.Close()
	}, nil
}

// createTable writes the fragments of x as Lance files (format 2.2, the
// default of a new table) and commits version 1.
func (d *demoRun) createTable(ctx context.Context, pc *producer.Client) error {
	rng := rand.New(rand.NewPCG(d.cfg.Seed, 1))
	var frags []*lancepb.DataFragment
	for range d.cfg.Fragments {
		xs := make([]int64, d.cfg.Rows)
		for i := range xs {
			xs[i] = rng.Int64N(1_000_000)
		}
		f, err := d.store.WriteFragment(ctx, d.schema, map[int32]arrow.Array{FieldX: Int64Array(xs, nil)})
		if err != nil {
			return err
		}
		frags = append(frags, f)
	}
	if _, err := pc.Commit(ctx, producer.Create(demoDataset, Fields, frags...)); err != nil {
		return fmt.Errorf("create the table: %w", err)
	}
	return nil
}

// Int64Array builds an Arrow int64 array; valid nil means no nulls.
func Int64Array(v []int64, valid []bool) arrow.Array {
	b := array.NewInt64Builder(memory.DefaultAllocator)
	defer b.Release()
	b.AppendValues(v, valid)
	return b.NewArray()
}

// loop runs the workers and the updater, prints progress, stops the
// updater after the configured duration and waits for the workers to
// catch up.
func (d *demoRun) loop(ctx context.Context, pc *producer.Client) (demoResult, error) {
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	pool := newDemoPool(d)
	defer func() {
		stopWorkers()
		pool.wait()
	}()
	if err := pool.start(wctx); err != nil {
		return demoResult{}, err
	}

	uctx, stopUpdater := context.WithTimeout(ctx, d.cfg.Duration)
	defer stopUpdater()
	up := &demoUpdater{d: d, rng: rand.New(rand.NewPCG(d.cfg.Seed, 2))}
	updaterDone := make(chan error, 1)
	go func() { updaterDone <- up.run(uctx) }()
	if d.cfg.Crash && d.cfg.Workers > 1 {
		go pool.crashLater(wctx, d.cfg.Duration*2/5)
	}

	if !d.cfg.Quiet {
		fmt.Fprintln(d.out)
		fmt.Fprintln(d.out, "     t  version  y commits  y rejected (by reason)           recomputed (stale/queue)  x updates")
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	updating := true
	var settleStart time.Time
	var res demoResult
	for {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case err := <-updaterDone:
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				return res, fmt.Errorf("updater: %w", err)
			}
			updating = false
			settleStart = time.Now()
			d.note("updater stopped after %d updates; waiting for the workers to catch up", d.stats.updates.Load())
			updaterDone = nil
		case <-tick.C:
			d.progress(ctx, pc)
		case <-time.After(100 * time.Millisecond):
		}
		if updating {
			continue
		}
		head, caught, err := pool.caughtUp(ctx, pc)
		if err != nil {
			return res, err
		}
		if caught {
			d.progress(ctx, pc)
			d.note("workers caught up at version %d in %.1fs", head, time.Since(settleStart).Seconds())
			d.flushNotes()
			res.caughtUp = true
			return res, nil
		}
		if time.Since(settleStart) > d.cfg.Settle {
			d.progress(ctx, pc)
			d.note("workers did not catch up within %v (head %d)", d.cfg.Settle, head)
			for _, w := range pool.workers() {
				d.note("  %s", w.status(head))
			}
			d.flushNotes()
			if d.cfg.OnStall != nil {
				d.cfg.OnStall()
			}
			return res, nil
		}
	}
}

// progress prints one line of live counters.
func (d *demoRun) progress(ctx context.Context, pc *producer.Client) {
	if d.cfg.Quiet {
		d.mu.Lock()
		d.logs = nil
		d.mu.Unlock()
		return
	}
	d.flushNotes()
	var v uint64
	if snap, err := pc.Latest(ctx, demoDataset); err == nil {
		v = snap.Version()
	}
	s := &d.stats
	fmt.Fprintf(d.out, "%5.1fs  %7d  %9d  %-32s %9d (%d/%d)  %9d\n",
		time.Since(d.start).Seconds(), v, s.yCommits.Load(), s.rejectedSummary(),
		s.recompStale.Load()+s.recompQueue.Load(), s.recompStale.Load(), s.recompQueue.Load(), s.updates.Load())
}

func (s *demoStats) rejectedSummary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var total int64
	var parts []string
	for _, r := range []string{"PRECONDITION_FAILED", "CONFLICT_RETRYABLE"} {
		if n := s.rejected[r]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", shortReason(r), n))
		}
	}
	for r, n := range s.rejected {
		total += n
		if r != "PRECONDITION_FAILED" && r != "CONFLICT_RETRYABLE" {
			parts = append(parts, fmt.Sprintf("%s %d", shortReason(r), n))
		}
	}
	if total == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

func shortReason(r string) string {
	switch r {
	case "PRECONDITION_FAILED":
		return "precondition"
	case "CONFLICT_RETRYABLE":
		return "conflict"
	}
	return strings.ToLower(r)
}

func (d *demoRun) printSummary(r demoResult) {
	s := &d.stats
	s.mu.Lock()
	kinds := fmt.Sprintf("%d point updates and %d x+1 as column rewrites, %d x+1 as column replacements, %d deletes",
		s.updateKinds["point"], s.updateKinds["rewrite"], s.updateKinds["replace"], s.updateKinds["delete"])
	s.mu.Unlock()
	fmt.Fprintln(d.out)
	fmt.Fprintln(d.out, "summary")
	fmt.Fprintf(d.out, "  versions committed:   %d\n", r.head)
	fmt.Fprintf(d.out, "  x updates:            %d (%s; %d retried after a rejection)\n", s.updates.Load(), kinds, s.updateRetry.Load())
	fmt.Fprintf(d.out, "  y commits:            %d\n", s.yCommits.Load())
	fmt.Fprintf(d.out, "  y rejections:         %s\n", s.rejectedSummary())
	fmt.Fprintf(d.out, "  recomputations:       %d after a version made y stale, %d from the rejection queue (%d jobs, %d redelivered), %d found fresh already\n",
		s.recompStale.Load(), s.recompQueue.Load(), s.queueJobs.Load(), s.redelivered.Load(), s.skipped.Load())
	if n := s.recovered.Load(); n > 0 {
		fmt.Fprintf(d.out, "  lost outcomes:        %d, recovered by transaction uuid\n", n)
	}
	d.mu.Lock()
	for i, h := range d.highlights {
		label := "  worker crash:        "
		if i > 0 {
			label = "                       "
		}
		fmt.Fprintln(d.out, label+h)
	}
	d.mu.Unlock()
	fmt.Fprintln(d.out)
	fmt.Fprintln(d.out, "verification, from the Lance files on disk")
	fmt.Fprintf(d.out, "  (a) %d committed transactions published y; %d live rows they wrote, read at the versions they created\n", r.yTxns, r.rowsChecked)
	fmt.Fprintf(d.out, "      stale values published: %d\n", r.stalePublished)
	caught := "after the workers caught up"
	if !r.caughtUp {
		caught = "the workers did NOT catch up"
	}
	fmt.Fprintf(d.out, "  (b) head version %d, %s: %d live rows, rows with y != f(x): %d\n", r.head, caught, r.headRows, r.staleAtHead)
	fmt.Fprintf(d.out, "  (c) head version %d as Lance sees it: %d data files, %d not Lance %s files, %d data overlays\n",
		r.head, r.headFiles, r.foreignFiles, r.format, r.headOverlays)
	if r.lanceDir != "" {
		fmt.Fprintf(d.out, "  (d) versions published as Lance versions in %s: 1 to %d of %d", r.lanceDir, r.published, r.head)
		if r.publishErr != nil {
			fmt.Fprintf(d.out, " (%v)", r.publishErr)
		}
		fmt.Fprintln(d.out)
		fmt.Fprintln(d.out)
		fmt.Fprintln(d.out, "open the table with LanceDB (npm i @lancedb/lancedb), at any version:")
		fmt.Fprintf(d.out, "  node -e 'require(\"@lancedb/lancedb\").connect(%q).then(db => db.openTable(%q)).then(async t => { console.log(await t.version(), await t.countRows(), await t.query().limit(3).toArray()) })'\n",
			filepath.Dir(r.lanceDir), demoDataset)
		fmt.Fprintf(d.out, "  python -c 'import lancedb; t = lancedb.connect(%q).open_table(%q); print(t.version, t.count_rows())'\n",
			filepath.Dir(r.lanceDir), demoDataset)
	}
	if r.ok() {
		fmt.Fprintln(d.out, "PASS")
	} else {
		fmt.Fprintln(d.out, "FAIL")
	}
}
