// Package nsbench measures unmodified LanceDB committing through the
// cellguard Lance REST namespace against LanceDB committing to a local
// directory, with the same driver (driver.mjs) and in the same run, so
// that the ratio of the two is what the machine's noise leaves alone.
//
// Run starts what `cellguard serve --lance-namespace` runs, in process:
// an embedded JetStream server on loopback (syncing as Options.Sync says:
// every write before it is acknowledged by default, as serve does), the
// committer, the publisher and the namespace on a loopback HTTP server,
// all in a temporary directory. Then, for each LanceDB release (lancedbtest.Versions, from
// the machine's cache), it runs every scenario twice, once against a
// local directory and once through the namespace:
//
//	serial      one handle, Appends adds of one row, one after another
//	append-N    N handles (each its own connection), ConcurrentAppends
//	            adds each, concurrently, on one table
//	mixed-N     N handles doing update / delete / mergeInsert of their
//	            own rows of one table concurrently (MixedOps calls in
//	            all): every commit conflicts with the others', which
//	            LanceDB's optimistic commits retry and the committer
//	            rebases
//
// Each scenario reports its calls per second, the p50 and p99 of a
// call's latency, and the calls that failed (LanceDB gave up).
package nsbench

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"cellguard/committer"
	"cellguard/internal/benchplot"
	"cellguard/internal/declog"
	"cellguard/internal/embedded"
	"cellguard/internal/lancedbtest"
	"cellguard/internal/namespace"
	"cellguard/internal/natstest/loopback"
	"cellguard/internal/publish"
	"cellguard/internal/subject"
)

//go:embed driver.mjs
var driverJS string

// Options configures Run. The zero value runs the full measure.
type Options struct {
	// Versions are the LanceDB releases to run (default
	// lancedbtest.Versions: 0.31 and 0.39).
	Versions []lancedbtest.Version
	// Appends is the serial scenario's number of adds (default 200).
	Appends int
	// AppendHandles are the concurrent append scenarios' handle counts
	// (default [4]).
	AppendHandles []int
	// ConcurrentAppends is each handle's adds in a concurrent append
	// scenario (default 50).
	ConcurrentAppends int
	// MixedHandles are the mixed scenarios' handle counts (default
	// [4, 8, 32]).
	MixedHandles []int
	// MixedOps is a mixed scenario's calls in all, split evenly between
	// its handles and rounded up to whole rotations of three per handle
	// (default 192).
	MixedOps int
	// MixedKeys is the rows of each handle in a mixed scenario (default 4).
	MixedKeys int
	// Check makes each scenario also return the table's rows and
	// versions (Result.Rows, Result.Versions), for correctness checks.
	Check bool
	// Dir holds the run's files (default: a temporary directory, removed
	// at the end).
	Dir string
	// Logger receives progress and the pipeline's logs (default: none).
	Logger *slog.Logger
	// Sync is the embedded server's file store policy (the zero value:
	// embedded.Always, serve's default).
	Sync embedded.SyncPolicy
	// CallTimeout bounds each LanceDB call of the driver (0: 2 minutes);
	// a call without an answer by then counts as failed.
	CallTimeout time.Duration
	// Progress, when set, is told each scenario's result as it ends.
	Progress func(v lancedbtest.Version, s Scenario)
}

func (o Options) withDefaults() Options {
	if len(o.Versions) == 0 {
		o.Versions = lancedbtest.Versions
	}
	if o.Appends <= 0 {
		o.Appends = 200
	}
	if o.AppendHandles == nil {
		o.AppendHandles = []int{4}
	}
	if o.ConcurrentAppends <= 0 {
		o.ConcurrentAppends = 50
	}
	if o.MixedHandles == nil {
		o.MixedHandles = []int{4, 8, 32}
	}
	if o.MixedOps <= 0 {
		o.MixedOps = 192
	}
	if o.MixedKeys <= 0 {
		o.MixedKeys = 4
	}
	if o.Sync == (embedded.SyncPolicy{}) {
		o.Sync = embedded.Always()
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 2 * time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Report is a Run's result: one VersionReport per LanceDB release.
type Report struct {
	Sync     string // the embedded server's sync policy
	Versions []VersionReport
}

// VersionReport is every scenario run with one LanceDB release.
type VersionReport struct {
	LanceDB, Lance string
	Scenarios      []Scenario
}

// Scenario is one workload run against a local directory and through
// the namespace.
type Scenario struct {
	Name    string
	Kind    string // "append" or "mixed"
	Handles int
	// OpsPerHandle is each handle's calls.
	OpsPerHandle     int
	Local, Namespace Result
}

// Ratio is the namespace's rate over the local directory's.
func (s Scenario) Ratio() float64 {
	if s.Local.Rate == 0 {
		return math.Inf(1)
	}
	return s.Namespace.Rate / s.Local.Rate
}

// Result is one scenario against one target.
type Result struct {
	Calls   int           // calls that succeeded
	Failed  int           // calls LanceDB gave up on
	Errors  []string      // the first few failures' messages
	Elapsed time.Duration // from the first call to the last answer
	Rate    float64       // successful calls per second
	P50     time.Duration
	P99     time.Duration
	Count   int // the table's rows at the end
	// Rows (id → x) and Versions are the table's at the end, with
	// Options.Check.
	Rows     map[int64]int64
	Versions []uint64
	// Stages is, through the namespace, the mean time a version/create
	// spent in each of its stages (cellguard_namespace_commit_stage_seconds).
	Stages map[string]time.Duration
}

// Run runs the measure: see the package documentation.
func Run(ctx context.Context, opts Options) (Report, error) {
	opts = opts.withDefaults()
	dir := opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "cellguard-nsbench-")
		if err != nil {
			return Report{}, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	for _, v := range opts.Versions {
		if _, err := v.Install(); err != nil {
			return Report{}, err
		}
	}
	p, err := startPipeline(ctx, filepath.Join(dir, "serve"), opts.Sync, opts.Logger)
	if err != nil {
		return Report{}, err
	}
	defer p.stop()
	rep := Report{Sync: opts.Sync.String()}
	for _, v := range opts.Versions {
		vr := VersionReport{LanceDB: v.LanceDB, Lance: v.Lance}
		for _, sc := range scenarios(opts) {
			for _, target := range []string{"local", "namespace"} {
				var t map[string]any
				if target == "local" {
					local := filepath.Join(dir, "local", v.Name, sc.Name)
					if err := os.MkdirAll(local, 0o755); err != nil {
						return rep, err
					}
					t = map[string]any{"dir": local}
				} else {
					t = map[string]any{"uri": p.url}
				}
				before := p.stages()
				res, err := runOne(ctx, v, filepath.Join(dir, "work"), t, strings.ReplaceAll(v.Name, ".", "_")+"_", sc, opts)
				if target == "namespace" {
					res.Stages = meanStages(before, p.stages())
				}
				if err != nil {
					return rep, fmt.Errorf("nsbench: LanceDB %s, %s, %s: %w", v.LanceDB, sc.Name, target, err)
				}
				if target == "local" {
					sc.Local = res
				} else {
					sc.Namespace = res
				}
			}
			opts.Logger.Info("nsbench scenario", "lancedb", v.LanceDB, "scenario", sc.Name,
				"local_rate", sc.Local.Rate, "namespace_rate", sc.Namespace.Rate, "ratio", sc.Ratio(),
				"namespace_p50", sc.Namespace.P50, "namespace_failed", sc.Namespace.Failed, "local_failed", sc.Local.Failed)
			if opts.Progress != nil {
				opts.Progress(v, sc)
			}
			vr.Scenarios = append(vr.Scenarios, sc)
		}
		rep.Versions = append(rep.Versions, vr)
	}
	return rep, nil
}

// scenarios lists the workloads opts asks for.
func scenarios(opts Options) []Scenario {
	out := []Scenario{{Name: "serial", Kind: "append", Handles: 1, OpsPerHandle: opts.Appends}}
	for _, n := range opts.AppendHandles {
		out = append(out, Scenario{Name: fmt.Sprintf("append-%d", n), Kind: "append", Handles: n, OpsPerHandle: opts.ConcurrentAppends})
	}
	for _, n := range opts.MixedHandles {
		per := (opts.MixedOps + n - 1) / n
		per = (per + 2) / 3 * 3
		out = append(out, Scenario{Name: fmt.Sprintf("mixed-%d", n), Kind: "mixed", Handles: n, OpsPerHandle: per})
	}
	return out
}

type driverOut struct {
	Scenarios []struct {
		Name      string    `json:"name"`
		Ms        float64   `json:"ms"`
		OK        int       `json:"ok"`
		Failed    int       `json:"failed"`
		Errors    []string  `json:"errors"`
		Latencies []float64 `json:"latencies"`
		Count     int       `json:"count"`
		Rows      []struct {
			ID int64 `json:"id"`
			X  int64 `json:"x"`
		} `json:"rows"`
		Versions []uint64 `json:"versions"`
	} `json:"scenarios"`
}

// runOne runs scenario sc with LanceDB v against target.
func runOne(ctx context.Context, v lancedbtest.Version, workRoot string, target map[string]any, prefix string, sc Scenario, opts Options) (Result, error) {
	if err := os.MkdirAll(workRoot, 0o755); err != nil {
		return Result{}, err
	}
	work, err := os.MkdirTemp(workRoot, "run-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(work)
	in := map[string]any{
		"target": target, "prefix": prefix, "check": opts.Check, "callTimeoutMs": opts.CallTimeout.Milliseconds(),
		"scenarios": []map[string]any{{"name": strings.ReplaceAll(sc.Name, "-", "_"), "kind": sc.Kind, "handles": sc.Handles, "ops": sc.OpsPerHandle, "keys": opts.MixedKeys}},
	}
	stdout, err := v.Exec(ctx, work, lancedbtest.Prelude+driverJS, in)
	if err != nil {
		return Result{}, err
	}
	var out driverOut
	if err := json.Unmarshal(stdout, &out); err != nil || len(out.Scenarios) != 1 {
		return Result{}, fmt.Errorf("driver output: %v (%d scenarios)", err, len(out.Scenarios))
	}
	o := out.Scenarios[0]
	res := Result{
		Calls: o.OK, Failed: o.Failed, Errors: o.Errors, Count: o.Count, Versions: o.Versions,
		Elapsed: time.Duration(o.Ms * float64(time.Millisecond)),
	}
	if o.Ms > 0 {
		res.Rate = float64(o.OK) / (o.Ms / 1000)
	}
	res.P50, res.P99 = quantile(o.Latencies, 0.50), quantile(o.Latencies, 0.99)
	if opts.Check {
		res.Rows = map[int64]int64{}
		for _, r := range o.Rows {
			res.Rows[r.ID] = r.X
		}
	}
	return res, nil
}

// quantile is the q-quantile of ms (milliseconds), nearest rank.
func quantile(ms []float64, q float64) time.Duration {
	if len(ms) == 0 {
		return 0
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	i = max(0, min(i, len(s)-1))
	return time.Duration(s[i] * float64(time.Millisecond))
}

// pipeline is `serve --lance-namespace` in process.
type pipeline struct {
	url     string
	reg     *prometheus.Registry
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	closers []func()
}

func (p *pipeline) stop() {
	p.cancel()
	p.wg.Wait()
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

func (p *pipeline) run(ctx context.Context, fn func(context.Context) error) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		_ = fn(ctx)
	}()
}

// startPipeline starts the embedded JetStream server, the committer, the
// publisher and the namespace under dir.
func startPipeline(ctx context.Context, dir string, policy embedded.SyncPolicy, log *slog.Logger) (_ *pipeline, err error) {
	p := &pipeline{}
	rctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	defer func() {
		if err != nil {
			p.stop()
		}
	}()
	lanceRoot := filepath.Join(dir, "lance")
	if err := os.MkdirAll(lanceRoot, 0o755); err != nil {
		return nil, err
	}
	sopts := loopback.Options(filepath.Join(dir, "jetstream"))
	policy.Apply(sopts)
	srv, err := loopback.Start(sopts)
	if err != nil {
		return nil, err
	}
	p.closers = append(p.closers, func() { srv.Shutdown(); srv.WaitForShutdown() })
	connect := func(name string) (*nats.Conn, jetstream.JetStream, error) {
		nc, err := nats.Connect(srv.ClientURL(), nats.Name(name), nats.MaxReconnects(-1))
		if err != nil {
			return nil, nil, err
		}
		p.closers = append(p.closers, nc.Close)
		js, err := jetstream.New(nc)
		return nc, js, err
	}
	cnc, _, err := connect("nsbench-committer")
	if err != nil {
		return nil, err
	}
	cm, err := committer.New(cnc, committer.Config{Logger: log, DiscoverEvery: 20 * time.Millisecond, TakeoverOnStart: true, LanceRoot: lanceRoot})
	if err != nil {
		return nil, err
	}
	p.run(rctx, cm.Run)
	if err := waitReady(ctx, cm.Ready); err != nil {
		return nil, err
	}
	_, js, err := connect("nsbench-namespace")
	if err != nil {
		return nil, err
	}
	sc, err := subject.NewScheme("")
	if err != nil {
		return nil, err
	}
	l, err := declog.Open(ctx, js, sc, declog.Options{RequestTimeout: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	pub := publish.NewManager(l, publish.ManagerOptions{Logger: log, DiscoverEvery: 20 * time.Millisecond})
	p.run(rctx, pub.Run)
	p.reg = prometheus.NewRegistry()
	ns, err := namespace.New(namespace.Config{Log: l, JetStream: js, LanceRoot: lanceRoot, Logger: log, Registerer: p.reg})
	if err != nil {
		return nil, err
	}
	p.closers = append(p.closers, ns.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.url = "http://" + ln.Addr().String()
	p.run(rctx, func(ctx context.Context) error { return namespace.Serve(ctx, ln, ns) })
	return p, nil
}

func waitReady(ctx context.Context, ready func() bool) error {
	deadline := time.Now().Add(2 * time.Minute)
	for !ready() {
		if time.Now().After(deadline) {
			return errors.New("nsbench: committer not ready after 2m")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// WriteText writes the report as a table, one line per scenario.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, v := range r.Versions {
		fmt.Fprintf(&b, "LanceDB %s (Lance %s), JetStream sync %s\n", v.LanceDB, v.Lance, r.Sync)
		fmt.Fprintf(&b, "  %-11s %7s %14s %16s %8s %21s %21s\n", "scenario", "calls", "local calls/s", "namespace /s", "ratio", "p50 local/namespace", "p99 local/namespace")
		for _, s := range v.Scenarios {
			fmt.Fprintf(&b, "  %-11s %7d %14.1f %16.1f %7.2fx %10s/%-10s %10s/%-10s", s.Name, s.Handles*s.OpsPerHandle,
				s.Local.Rate, s.Namespace.Rate, s.Ratio(), ms(s.Local.P50), ms(s.Namespace.P50), ms(s.Local.P99), ms(s.Namespace.P99))
			if s.Local.Failed+s.Namespace.Failed > 0 {
				fmt.Fprintf(&b, "  failed: local %d, namespace %d", s.Local.Failed, s.Namespace.Failed)
			}
			b.WriteString("\n")
			for _, e := range append(s.Local.Errors, s.Namespace.Errors...) {
				fmt.Fprintf(&b, "              error: %.300s\n", strings.ReplaceAll(e, "\n", " "))
			}
			if len(s.Namespace.Stages) > 0 {
				b.WriteString("              stages:")
				for _, st := range StageOrder {
					if d, ok := s.Namespace.Stages[st]; ok {
						fmt.Fprintf(&b, " %s %s", st, ms(d))
					}
				}
				b.WriteString("\n")
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

type stageTotal struct {
	sum   float64
	count uint64
}

// stages reads the namespace's stage histograms.
func (p *pipeline) stages() map[string]stageTotal {
	out := map[string]stageTotal{}
	mfs, err := p.reg.Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != "cellguard_namespace_commit_stage_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "stage" {
					out[l.GetValue()] = stageTotal{sum: m.GetHistogram().GetSampleSum(), count: m.GetHistogram().GetSampleCount()}
				}
			}
		}
	}
	return out
}

// meanStages is each stage's mean time between two readings.
func meanStages(before, after map[string]stageTotal) map[string]time.Duration {
	out := map[string]time.Duration{}
	for stage, a := range after {
		b := before[stage]
		if n := a.count - b.count; n > 0 {
			out[stage] = time.Duration((a.sum - b.sum) / float64(n) * float64(time.Second))
		}
	}
	return out
}

// StageOrder lists version/create's stages in the order they run.
var StageOrder = []string{"check", "read", "lookup", "verify", "stage", "decision", "publish", "answer"}

// Figure draws the report: for each LanceDB release, calls per second
// by handle count, local directory against the namespace, for appends
// (serial and concurrent) and for the mixed update / delete /
// mergeInsert workload.
func (r Report) Figure() benchplot.Figure {
	fig := benchplot.Figure{Title: "LanceDB through the cellguard namespace vs a local directory", Columns: 2}
	for _, v := range r.Versions {
		for _, kind := range []string{"append", "mixed"} {
			title := "appends, LanceDB " + v.LanceDB
			if kind == "mixed" {
				title = "update/delete/mergeInsert on one table, LanceDB " + v.LanceDB
			}
			local := benchplot.Series{Name: "local directory", Dashed: true}
			ns := benchplot.Series{Name: "through the namespace"}
			for _, s := range v.Scenarios {
				if s.Kind != kind || s.Local.Rate <= 0 || s.Namespace.Rate <= 0 {
					continue
				}
				local.Points = append(local.Points, benchplot.Point{X: float64(s.Handles), Y: s.Local.Rate})
				ns.Points = append(ns.Points, benchplot.Point{X: float64(s.Handles), Y: s.Namespace.Rate})
			}
			if len(local.Points) == 0 {
				continue
			}
			fig.Charts = append(fig.Charts, benchplot.Chart{
				Title: title, XLabel: "handles", YLabel: "calls/s", LogX: true,
				Series: []benchplot.Series{local, ns},
			})
		}
	}
	return fig
}
