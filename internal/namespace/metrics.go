package namespace

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the namespace endpoint. Decisions themselves are counted by
// the committer like any other (cellguard_decisions_total).
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	refusals *prometheus.CounterVec
	stages   *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellguard_namespace_requests_total",
			Help: "Lance REST namespace requests by route and HTTP status.",
		}, []string{"route", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cellguard_namespace_request_seconds",
			Help:    "Lance REST namespace request latency by route.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"route"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cellguard_namespace_refusals_total",
			Help: "Commits the namespace refused (manifest mismatch, invalid transaction) and staged as refusals for the committer to decide, by dataset and reason.",
		}, []string{"dataset", "reason"}),
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cellguard_namespace_commit_stage_seconds",
			Help:    "Time a version/create spends in each stage: check (head, location, lock), read (the staged manifest), lookup (an earlier decision of the transaction), verify (the table model's manifest), stage (the staged message's ack), decision (until the decision is in the log), publish (until the manifest is in storage), answer.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}, []string{"stage"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.latency, m.refusals, m.stages} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) observe(route string, status int, d time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(route).Observe(d.Seconds())
}

// Requests returns the counter of requests to route answered with status
// (for tests and dashboards).
func (s *Server) Requests(route string, status int) prometheus.Counter {
	return s.metrics.requests.WithLabelValues(route, strconv.Itoa(status))
}

// Refusals returns the counter of commits to ds the namespace refused
// for reason (each staged as a refusal, decided by the committer).
func (s *Server) Refusals(ds, reason string) prometheus.Counter {
	return s.metrics.refusals.WithLabelValues(ds, reason)
}

// stageClock times the stages of one version/create.
type stageClock struct {
	m    *metrics
	last time.Time
}

func (m *metrics) clock() *stageClock { return &stageClock{m: m, last: time.Now()} }

// done records the time since the previous stage ended as stage's.
func (c *stageClock) done(stage string) {
	now := time.Now()
	c.m.stages.WithLabelValues(stage).Observe(now.Sub(c.last).Seconds())
	c.last = now
}

// StageSeconds returns the histogram of version/create's stage (for
// benchmarks and dashboards).
func (s *Server) StageSeconds(stage string) prometheus.Observer {
	return s.metrics.stages.WithLabelValues(stage)
}
