package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"cellguard/committer"
	"cellguard/internal/embedded"
	"cellguard/internal/natsconn"
)

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf connFlags
	cf.register(fs, "")
	dataDir := fs.String("data-dir", envOr("CELLGUARD_DATA_DIR", "./cellguard-data"), "embedded server's data directory (env CELLGUARD_DATA_DIR)")
	port := fs.Int("nats-port", 4222, "embedded server's client port on 127.0.0.1 (-1: random)")
	natsSync := fs.String("nats-sync", envOr("CELLGUARD_NATS_SYNC", embedded.SyncAlways), "embedded server: 'always' syncs every write to disk before acknowledging it; a duration (e.g. 2m) flushes in the background instead, UNSAFE: a power failure can lose acknowledged decisions (env CELLGUARD_NATS_SYNC)")
	httpAddr := fs.String("http", envOr("CELLGUARD_HTTP", "127.0.0.1:9090"), "address for /metrics, /healthz, /readyz (empty: off)")
	logLevel := fs.String("log-level", envOr("CELLGUARD_LOG_LEVEL", "info"), "debug, info, warn or error")
	logJSON := fs.Bool("log-json", false, "log JSON instead of text")
	replicas := fs.Int("replicas", 1, "replicas of the streams the committer creates (3 in a cluster)")
	batch := fs.Int("batch", 256, "most decisions per atomic batch (group commit)")
	cpEvery := fs.Int("checkpoint-every", 1000, "write a checkpoint every K versions")
	window := fs.Int("window", 256, "recent manifests kept in memory")
	retain := fs.Uint64("retain-versions", 0, "reject read versions older than head-N with READ_VERSION_TOO_OLD (0: all)")
	datasetRoot := fs.String("dataset-root", "", "directory holding <dataset>/_deletions (read deletion vectors, write rebased ones)")
	policy := fs.String("deletion-policy", "protected-rows", "precondition deletion policy: protected-rows, strict or ignore")
	pinnedTTL := fs.Duration("pinned-ttl", 12*time.Second, "how long a silent committer keeps a dataset's pin")
	ackWait := fs.Duration("ack-wait", 15*time.Second, "consumer AckWait")
	takeoverAfter := fs.Duration("takeover-after", 1500*time.Millisecond, "unpin a silent committer's datasets after this (fast takeover; negative: wait for --pinned-ttl)")
	takeover := fs.Bool("takeover", false, "take every dataset's pin at start (single-replica deployments; on by default with the embedded server)")
	metricsDatasets := fs.Int("metrics-datasets", 200, "datasets exported with their own metric label; the rest are summed under dataset=\"_other\" (-1: all)")
	datasets := fs.String("datasets", "", "comma-separated datasets to load at start (every dataset is served either way)")
	partitions := fs.Int("partitions", committer.DefaultPartitions, "partition count of a new staging stream (an existing one keeps its own: `cellguard partitions set N`)")
	mem := memoryFlags(fs)
	// Publishing: see publish.go.
	lanceRoot := fs.String("lance-root", envOr("CELLGUARD_LANCE_ROOT", ""), "publish datasets created without --location to <lance-root>/<dataset>.lance (a path or gocloud.dev/blob URL)")
	publishOn := fs.Bool("publish", true, "publish every committed version of datasets that have a location, as Lance versions")
	nsFlags := registerNamespaceFlags(fs) // Lance REST namespace: see namespace.go
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logLevel, *logJSON)
	if err != nil {
		return usageError{err.Error()}
	}
	// Every flag is checked before anything starts: a bad one must not
	// leave an embedded server's data directory, or credentials, behind.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), buildInfo())
	cfg := committer.Config{
		Prefix: cf.prefix, Logger: log, Registerer: reg, Replicas: *replicas, BatchSize: *batch,
		CheckpointEvery: *cpEvery, Window: *window, RetainVersions: *retain, DatasetRoot: *datasetRoot,
		DeletionPolicy: *policy, MetricsDatasets: *metricsDatasets, PinnedTTL: *pinnedTTL, AckWait: *ackWait, Partitions: *partitions,
		TakeoverAfter: *takeoverAfter, LanceRoot: *lanceRoot,
	}
	if *datasets != "" {
		cfg.Datasets = strings.Split(*datasets, ",")
	}
	mem.apply(&cfg)
	if err := cfg.Validate(); err != nil {
		return usageError{err.Error()}
	}
	sync, err := embedded.ParseSync(*natsSync)
	if err != nil {
		return usageError{err.Error()}
	}
	if cf.url != "" && *natsSync != embedded.SyncAlways {
		return usageError{"--nats-sync sets the embedded server's policy; an external server's is its jetstream { sync_interval } (deploy/nats sets always)"}
	}
	restoreLimit, err := setMemoryLimit(*mem.memoryLimit)
	if err != nil {
		return err
	}
	defer restoreLimit()
	url, nsCreds := cf.url, namespaceCreds{}
	if url == "" {
		sync.Announce(log, reg)
		srv, err := embedded.Start(*dataDir, *port, sync, log)
		if err != nil {
			return err
		}
		defer func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		}()
		url = srv.ClientURL()
		*takeover = true
		cf.url = url
		cf.creds = srv.Creds("committer")
		nsCreds = namespaceCreds{worker: srv.Creds("worker"), admin: srv.Creds("admin")} // stages as a worker, drops as an admin
	}
	nc, err := cf.connect("cellguard-committer")
	if err != nil {
		return err
	}
	defer nc.Close()

	cfg.TakeoverOnStart = *takeover
	c, err := committer.New(nc, cfg)
	if err != nil {
		return err
	}
	if *httpAddr != "" {
		stopHTTP, err := serveHTTP(*httpAddr, c, reg, log)
		if err != nil {
			return err
		}
		defer stopHTTP()
	}
	if *publishOn {
		stopPublishing := startPublishing(ctx, nc, cf.prefix, reg, log)
		defer stopPublishing()
	}
	stopNamespace, err := startNamespace(ctx, nsFlags, *lanceRoot, *publishOn, cf, nsCreds, reg, log)
	if err != nil {
		return err
	}
	defer stopNamespace()
	log.Info("serving", "nats", natsconn.Redact(url))
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	err = awaitRun(ctx, done, log)
	if err == nil {
		// Graceful: Run finished the batches in hand; make sure the acks left.
		_ = nc.FlushTimeout(flushGrace)
	}
	log.Info("stopped", "err", err)
	return err
}

// Shutdown budget: serve exits within 2 s of SIGTERM in any state. Run
// gets runGrace to finish the batches in hand; the acks get flushGrace;
// main's watchdog ends the process at 2 s whatever is left.
const (
	runGrace   = 1200 * time.Millisecond
	flushGrace = 300 * time.Millisecond
)

// awaitRun waits for Run's result; once ctx is done it waits at most
// runGrace. Work still in hand then (a long load, a catch-up, a retry)
// is abandoned: nothing unacked is lost, it is redelivered to the next
// committer, and the fenced log keeps a decision from being made twice,
// exactly as after a crash.
func awaitRun(ctx context.Context, done <-chan error, log *slog.Logger) error {
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	t := time.NewTimer(runGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		log.Warn("stopping without waiting for the work in hand; it will be redelivered", "grace", runGrace)
		return nil
	}
}

func serveHTTP(addr string, c *committer.Committer, reg *prometheus.Registry, log *slog.Logger) (func(), error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.Handle("/healthz", c.Healthz())
	mux.Handle("/readyz", c.Readyz())
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	log.Info("http listening", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

func newLogger(w io.Writer, level string, asJSON bool) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	opts := &slog.HandlerOptions{Level: l}
	// Every line passes the redactor: no URL password or nkey seed is logged,
	// whichever package produced the message.
	if asJSON {
		return slog.New(natsconn.RedactingHandler(slog.NewJSONHandler(w, opts))), nil
	}
	return slog.New(natsconn.RedactingHandler(slog.NewTextHandler(w, opts))), nil
}
