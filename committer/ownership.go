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
	mu   sync.Mutex
	last map[string]time.Time
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
		v := 0.0
		if c.owned.owned(ds, now, c.cfg.PinnedTTL) {
			v = 1
		} else {
			c.metrics.head.DeleteLabelValues(ds)
			c.metrics.pending.DeleteLabelValues(ds)
		}
		ch <- prometheus.MustNewConstMetric(oc.desc, prometheus.GaugeValue, v, ds)
	}
}
