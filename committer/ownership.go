package committer

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const metricOwner = "cellguard_committer_dataset_owner"

// ownership records when each dataset's staged transactions last reached
// this committer. The consumer delivers a dataset to its pinned committer
// only, so a delivery within PinnedTTL means this replica owns the
// dataset; a standby's deliveries stop when the pin moves away. A dataset
// with no traffic for PinnedTTL is owned by no replica (and needs none).
type ownership struct {
	mu       sync.Mutex
	last     map[string]time.Time
	labelled map[string]bool // datasets admitted to their own metric label
}

// otherLabel is the dataset label of the datasets beyond MetricsDatasets.
const otherLabel = "_other"

// label returns the dataset label of ds's series: ds itself for the first
// max datasets seen (max < 0: all), otherLabel after that; own reports
// which.
func (o *ownership) label(ds string, max int) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.labelled == nil {
		o.labelled = map[string]bool{}
	}
	if o.labelled[ds] {
		return ds, true
	}
	if max >= 0 && len(o.labelled) >= max {
		return otherLabel, false
	}
	o.labelled[ds] = true
	return ds, true
}

// delivered notes a batch of ds delivered to this committer.
func (o *ownership) delivered(ds string, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.last == nil {
		o.last = map[string]time.Time{}
	}
	o.last[ds] = now
}

// owned reports whether ds was delivered here within ttl of now.
func (o *ownership) owned(ds string, now time.Time, ttl time.Duration) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	t, ok := o.last[ds]
	return ok && now.Sub(t) < ttl
}

// ownerCollector exports cellguard_committer_dataset_owner (1 on the
// replica that owns the dataset, 0 on the others) for every dataset with
// a worker here, and withdraws the per-dataset gauges (head version,
// pending) of datasets this replica does not own, so that a standby never
// exports stale values: per-dataset series come from the owner only.
type ownerCollector struct {
	c    *Committer
	desc *prometheus.Desc
}

func newOwnerCollector(c *Committer) *ownerCollector {
	return &ownerCollector{c: c, desc: prometheus.NewDesc(metricOwner,
		"1 while this committer owns the dataset (was delivered its transactions within the pinned TTL), else 0.",
		[]string{"dataset"}, nil)}
}

func (oc *ownerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- oc.desc }

func (oc *ownerCollector) Collect(ch chan<- prometheus.Metric) {
	c := oc.c
	c.mu.Lock()
	datasets := make([]string, 0, len(c.workers))
	for ds := range c.workers {
		datasets = append(datasets, ds)
	}
	c.mu.Unlock()
	now := time.Now()
	for _, ds := range datasets {
		if _, own := c.owned.label(ds, c.cfg.MetricsDatasets); !own {
			continue // bounded: beyond MetricsDatasets, no per-dataset series
		}
		v := 0.0
		if c.owned.owned(ds, now, c.cfg.PinnedTTL) {
			v = 1
		} else {
			c.metrics.head.DeleteLabelValues(ds)
		}
		ch <- prometheus.MustNewConstMetric(oc.desc, prometheus.GaugeValue, v, ds)
	}
}

// dsLabel is the dataset label for ds's counters (ds or "_other").
func (c *Committer) dsLabel(ds string) string {
	l, _ := c.owned.label(ds, c.cfg.MetricsDatasets)
	return l
}

// setGauge sets a per-dataset gauge, for datasets with their own label
// only (a gauge summed over datasets means nothing).
func (c *Committer) setGauge(g *prometheus.GaugeVec, ds string, v float64) {
	if _, own := c.owned.label(ds, c.cfg.MetricsDatasets); own {
		g.WithLabelValues(ds).Set(v)
	}
}
