package committer

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"cellguard/internal/natstest"
)

func TestMetricsAndProbes(t *testing.T) {
	srv := natstest.RunServer(t)
	_, js := natstest.Connect(t, srv.URL())
	reg := prometheus.NewRegistry()
	cfg := testConfig()
	cfg.Registerer = reg
	r := start(t, srv.URL(), cfg)
	ds := "metered"
	create := newUUID()
	stage(t, js, ds, create, mustMarshal(t, createTxn(create)))
	stage(t, js, ds, "junk-1", []byte("junk"))
	waitDecided(t, js, ds, 2, 10*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(r.c.metrics.decisions.WithLabelValues(ds, "rejected", "INVALID_TRANSACTION")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("rejection not counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := testutil.ToFloat64(r.c.metrics.decisions.WithLabelValues(ds, "committed", "")); got != 1 {
		t.Errorf("committed decisions = %v, want 1", got)
	}
	if got := testutil.ToFloat64(r.c.metrics.head.WithLabelValues(ds)); got != 1 {
		t.Errorf("head version = %v, want 1", got)
	}
	problems, err := promlint.NewWithMetricFamilies(mustGather(t, reg)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	// Ready once every partition of the committer consumes: deciding the
	// dataset's partition says nothing of the others, which may still be
	// starting on a loaded machine.
	deadline = time.Now().Add(10 * time.Second)
	for {
		rec := httptest.NewRecorder()
		r.c.Readyz().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		if rec.Code == 200 && strings.Contains(rec.Body.String(), "ready") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %q", rec.Code, rec.Body.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = r.stop(t)
	rec := httptest.NewRecorder()
	r.c.Readyz().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 503 {
		t.Errorf("/readyz after stop = %d, want 503", rec.Code)
	}
}

func mustGather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}
