package committer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names; deploy/grafana and deploy/alerts key on them.
const (
	metricDecisions   = "cellguard_committer_decisions_total"
	metricLatency     = "cellguard_committer_decision_latency_seconds"
	metricBatch       = "cellguard_committer_batch_size"
	metricAppend      = "cellguard_committer_append_seconds"
	metricReadLag     = "cellguard_committer_read_lag_versions"
	metricHead        = "cellguard_committer_head_version"
	metricFencing     = "cellguard_committer_fencing_events_total"
	metricAppendErr   = "cellguard_committer_append_errors_total"
	metricCheckpoints = "cellguard_committer_checkpoints_total"
	metricDatasets    = "cellguard_committer_active_datasets"
	metricResyncs     = "cellguard_committer_resyncs_total"
	metricStopped     = "cellguard_committer_dataset_stopped"
	metricEvictions   = "cellguard_committer_idle_evictions_total"
	metricHistLoads   = "cellguard_committer_history_rebuilds_total"
	metricHistReads   = "cellguard_committer_history_reads_total"
	metricRereads     = "cellguard_committer_leader_rereads_total"
	metricPartitions  = "cellguard_committer_partitions"
	metricPartPending = "cellguard_committer_partition_pending_staged"
	metricAppendDS    = "cellguard_committer_append_datasets"
	metricSharedRef   = "cellguard_committer_shared_append_refusals_total"
	metricHeld        = "cellguard_committer_held_messages"
	metricInProgress  = "cellguard_committer_in_progress_total"
)

type metrics struct {
	decisions *prometheus.CounterVec // dataset, outcome, reason
	latency   prometheus.Histogram   // staged (server timestamp) → decision appended
	batch     prometheus.Histogram   // decisions per dataset group appended
	// appendTime is how long one group of decisions takes to reach the
	// log, by mode (atomic: one atomic batch; chain: single fenced
	// appends one after the other): a dataset's decision cycle.
	appendTime *prometheus.HistogramVec // mode
	// appendDatasets is how many datasets' groups one append carried;
	// sharedRefused counts shared appends refused whole, whose groups
	// were then appended each alone.
	appendDatasets prometheus.Histogram
	sharedRefused  prometheus.Counter
	readLag        prometheus.Histogram   // head - read_version at decision time
	head           *prometheus.GaugeVec   // dataset
	fencing        *prometheus.CounterVec // dataset
	appendErr      *prometheus.CounterVec // dataset
	checkpoints    *prometheus.CounterVec // dataset, result
	datasets       prometheus.Gauge
	resyncs        *prometheus.CounterVec // dataset
	stopped        *prometheus.GaugeVec   // dataset, reason: 1 while stopped
	evictions      *prometheus.CounterVec // dataset
	// historyLoads and historyReads count old manifests rebuilt from a
	// checkpoint and the log, and the log records read to do it or to
	// land a stale read: the work stale transactions cost.
	historyLoads *prometheus.CounterVec // dataset
	historyReads *prometheus.CounterVec // dataset
	// leaderRereads counts log reads done again at the stream leader
	// because a replica's records did not follow each other.
	leaderRereads prometheus.Counter
	// partitions is how many partitions this committer consumes;
	// partitionPending the messages not yet delivered, per partition.
	partitions       prometheus.Gauge
	partitionPending *prometheus.GaugeVec // partition
	// held is how many delivered messages the committer holds undecided
	// and keeps in progress; inProgress counts the InProgress acks sent
	// for them (hold.go).
	held       prometheus.Gauge
	inProgress prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricDecisions, Help: "Decisions appended to the decision log, by dataset, outcome and rejection reason.",
		}, []string{"dataset", "outcome", "reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    metricLatency,
			Help:    "Time from a transaction being staged (server timestamp) to its decision being appended.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18), // 100µs .. 13s
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metricBatch, Help: "Decisions of one dataset appended together (its group; several datasets' groups may share one append: cellguard_committer_append_datasets).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11), // 1 .. 1024
		}),
		appendTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metricAppend, Help: "Time one append takes to reach the decision log, by mode: shared (one atomic batch of several datasets' groups), atomic (one dataset's group as one atomic batch) or chain (one dataset's group as single fenced appends, one after the other).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16), // 50µs .. 1.6s
		}, []string{"mode"}),
		readLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metricReadLag, Help: "Versions between a transaction's read version and the head it was decided against.",
			Buckets: []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096},
		}),
		head: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricHead, Help: "Latest committed version, per dataset.",
		}, []string{"dataset"}),
		fencing: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricFencing, Help: "Decision appends refused because another committer appended first.",
		}, []string{"dataset"}),
		appendErr: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricAppendErr, Help: "Decision appends that failed for reasons other than fencing (timeouts, leader changes).",
		}, []string{"dataset"}),
		checkpoints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricCheckpoints, Help: "Checkpoints written, by result (ok, error).",
		}, []string{"dataset", "result"}),
		datasets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metricDatasets, Help: "Datasets with a running worker in this committer.",
		}),
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricResyncs, Help: "Times a dataset's state was reloaded from the decision log after a fence or append error.",
		}, []string{"dataset"}),
		stopped: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricStopped, Help: "1 while a dataset is stopped because its decision log holds a record the committer cannot trust (reason untrusted-log): nothing is decided or acked for it.",
		}, []string{"dataset", "reason"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricEvictions, Help: "Times an idle dataset's state was dropped from memory (it is reloaded from the checkpoint and the log on its next message).",
		}, []string{"dataset"}),
		historyLoads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricHistLoads, Help: "Old manifests rebuilt from a checkpoint and the decision log (to pin a read version no longer in memory).",
		}, []string{"dataset"}),
		historyReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricHistReads, Help: "Committed transactions read back from the decision log (rebuilding old manifests, landing stale reads).",
		}, []string{"dataset"}),
	}
	m.leaderRereads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: metricRereads, Help: "Decision log reads done again at the stream leader because the records a replica served did not follow each other (a replica that lost records).",
	})
	m.appendDatasets = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: metricAppendDS, Help: "Datasets whose groups of decisions one append to the decision log carried (group commit across datasets).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 11), // 1 .. 1024
	})
	m.sharedRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: metricSharedRef, Help: "Shared appends the server refused whole (a dataset's fence, a duplicate, no room), whose groups were then appended each alone.",
	})
	m.partitions = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: metricPartitions, Help: "Partitions of the staging stream this committer consumes.",
	})
	m.partitionPending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: metricPartPending, Help: "Staged transactions not yet delivered to the committer, per partition it consumes.",
	}, []string{"partition"})
	m.held = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: metricHeld, Help: "Delivered staged messages this committer holds undecided (queued or being decided) and keeps in progress at the server, so that they are not redelivered.",
	})
	m.inProgress = prometheus.NewCounter(prometheus.CounterOpts{
		Name: metricInProgress, Help: "In-progress acknowledgements sent for held staged messages, each resetting the message's AckWait at the server.",
	})
	for _, c := range []prometheus.Collector{m.held, m.inProgress, m.partitions, m.partitionPending, m.decisions, m.latency, m.batch, m.appendTime, m.readLag, m.head,
		m.fencing, m.appendErr, m.checkpoints, m.datasets, m.resyncs, m.stopped, m.evictions, m.historyLoads, m.historyReads, m.leaderRereads, m.appendDatasets, m.sharedRefused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// appended records an append of one group, in mode, begun at start.
func (m *metrics) appended(mode string, start time.Time) {
	m.appendTime.WithLabelValues(mode).Observe(time.Since(start).Seconds())
}
