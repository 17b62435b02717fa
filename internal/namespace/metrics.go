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
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.requests, m.latency, m.refusals} {
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
