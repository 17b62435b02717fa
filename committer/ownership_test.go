package committer

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"cellguard/internal/natstest"
)

// Two replicas serve one dataset: the one its transactions reach exports
// owner=1 and the head version; the other exports owner=0 and no head
// version (no stale per-dataset gauge on a standby).
func TestOwnerGaugeAndPerDatasetSeriesOnOwnerOnly(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	for i, reg := range regs {
		cfg := testConfig()
		cfg.Registerer = reg
		cfg.TakeoverOnStart = i == 0
		cfg.PinnedTTL = time.Minute // no pin move during the test
		start(t, srv.URL(), cfg)
	}
	ds := "owned"
	id := newUUID()
	stage(t, js, ds, id, mustMarshal(t, createTxn(id)))
	waitDecided(t, js, ds, 1, 30*time.Second)

	type view struct{ owner, head float64 }
	read := func(reg *prometheus.Registry) (v view, hasOwner, hasHead bool) {
		for _, mf := range mustGather(t, reg) {
			for _, m := range mf.GetMetric() {
				if len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != ds {
					continue
				}
				switch mf.GetName() {
				case metricOwner:
					v.owner, hasOwner = m.GetGauge().GetValue(), true
				case metricHead:
					v.head, hasHead = m.GetGauge().GetValue(), true
				}
			}
		}
		return v, hasOwner, hasHead
	}
	owners := 0
	deadline := time.Now().Add(30 * time.Second)
	for {
		owners = 0
		for _, reg := range regs {
			if v, _, _ := read(reg); v.owner == 1 {
				owners++
			}
		}
		if owners == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if owners != 1 {
		t.Fatalf("%d replicas own %s, want 1", owners, ds)
	}
	for i, reg := range regs {
		v, _, hasHead := read(reg)
		switch {
		case v.owner == 1 && (!hasHead || v.head != 1):
			t.Errorf("owner %d: head version %v (exported %v), want 1", i, v.head, hasHead)
		case v.owner == 0 && hasHead:
			t.Errorf("standby %d exports head version %v for %s", i, v.head, ds)
		}
	}
}

// With MetricsDatasets 1, the first dataset keeps its own series and the
// second's decisions are counted under dataset="_other", with no gauge.
func TestPerDatasetSeriesAreBounded(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	reg := prometheus.NewRegistry()
	cfg := testConfig()
	cfg.Registerer = reg
	cfg.MetricsDatasets = 1
	r := start(t, srv.URL(), cfg)
	for _, ds := range []string{"first", "second"} {
		id := newUUID()
		stage(t, js, ds, id, mustMarshal(t, createTxn(id)))
		waitDecided(t, js, ds, 1, 30*time.Second)
	}
	deadline := time.Now().Add(30 * time.Second)
	for testutil.ToFloat64(r.c.metrics.decisions.WithLabelValues(otherLabel, "committed", "")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the second dataset's decision is not counted under _other")
		}
		time.Sleep(10 * time.Millisecond)
	}
	labels := map[string]map[string]bool{}
	for _, mf := range mustGather(t, reg) {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "dataset" {
					if labels[mf.GetName()] == nil {
						labels[mf.GetName()] = map[string]bool{}
					}
					labels[mf.GetName()][l.GetValue()] = true
				}
			}
		}
	}
	for name, values := range labels {
		if values["second"] {
			t.Errorf("%s has a series for the dataset beyond the bound", name)
		}
	}
	if !labels[metricDecisions]["first"] {
		t.Error("the first dataset lost its own decisions series")
	}
}
