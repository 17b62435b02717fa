package publish

import "github.com/prometheus/client_golang/prometheus"

// Metric names; deploy/grafana and deploy/alerts may key on them.
const (
	metricPublished = "cellguard_publish_published_version"
	metricLag       = "cellguard_publish_lag_versions"
	metricFailures  = "cellguard_publish_failures_total"
	metricStopped   = "cellguard_publish_stopped"
)

// Metrics are the publisher's Prometheus metrics, per dataset. A nil
// *Metrics records nothing.
type Metrics struct {
	published *prometheus.GaugeVec
	lag       *prometheus.GaugeVec
	failures  *prometheus.CounterVec
	stop      *prometheus.GaugeVec
}

// NewMetrics registers the publisher metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		published: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricPublished, Help: "Newest version published to the dataset's location.",
		}, []string{"dataset"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricLag, Help: "Versions committed in the decision log but not yet published (log head - published).",
		}, []string{"dataset"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricFailures, Help: "Failed publish attempts (each is retried).",
		}, []string{"dataset"}),
		stop: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricStopped, Help: "1 when a dataset's publishing stopped: a foreign version in storage, or a version that cannot be laid out as Lance.",
		}, []string{"dataset"}),
	}
	for _, c := range []prometheus.Collector{m.published, m.lag, m.failures, m.stop} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) set(ds string, published, head uint64) {
	if m == nil {
		return
	}
	m.published.WithLabelValues(ds).Set(float64(published))
	m.lag.WithLabelValues(ds).Set(float64(head - min(head, published)))
}

func (m *Metrics) failed(ds string) {
	if m != nil {
		m.failures.WithLabelValues(ds).Inc()
	}
}

func (m *Metrics) stopped(ds string) {
	if m != nil {
		m.stop.WithLabelValues(ds).Set(1)
	}
}

// Lag returns the lag gauge of ds.
func (m *Metrics) Lag(ds string) prometheus.Gauge { return m.lag.WithLabelValues(ds) }

// Failures returns the failed-attempts counter of ds.
func (m *Metrics) Failures(ds string) prometheus.Counter { return m.failures.WithLabelValues(ds) }

// Stopped returns the stopped gauge of ds.
func (m *Metrics) Stopped(ds string) prometheus.Gauge { return m.stop.WithLabelValues(ds) }
