package committer

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// datasetHealth is one dataset's entry in the /readyz body.
type datasetHealth struct {
	Dataset string       `json:"dataset"`
	State   DatasetState `json:"state"`
	Reason  string       `json:"reason,omitempty"`
	Detail  string       `json:"detail,omitempty"`
	Since   time.Time    `json:"since"`
}

// healthy reports whether a dataset in state s counts as ready: its state
// is loaded and deciding, or it was evicted for idleness (it loads again
// when a message arrives).
func healthy(s DatasetState) bool {
	return s == DatasetDeciding || s == DatasetIdle || s == DatasetDeleted
}

// health is what /healthz and /readyz answer, as JSON.
type health struct {
	Status   string          `json:"status"` // "ok", "ready", "starting", "stuck", "not ready", "stopped"
	Detail   string          `json:"detail,omitempty"`
	Datasets []datasetHealth `json:"datasets,omitempty"`
}

// Healthz answers 200 while the process runs normally, and 503 when Run
// has been setting up its streams for longer than StartStuckAfter
// (default 30 s: a stuck start; restart the process) or has returned.
func (c *Committer) Healthz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h, code := c.healthz()
		writeHealth(w, h, code)
	})
}

func (c *Committer) healthz() (health, int) {
	c.phaseMu.Lock()
	phase, since, lastErr := c.phase, c.phaseSince, c.setupErr
	c.phaseMu.Unlock()
	switch {
	case since.IsZero():
		return health{Status: "starting", Detail: "Run not called yet"}, http.StatusOK
	case phase == phaseStarting && time.Since(since) > c.cfg.StartStuckAfter:
		return health{Status: "stuck", Detail: "start-up has not finished after " + time.Since(since).Round(time.Second).String() + lastErrDetail(lastErr)}, http.StatusServiceUnavailable
	case phase == phaseStopped:
		return health{Status: "stopped"}, http.StatusServiceUnavailable
	case phase == phaseStarting:
		return health{Status: "starting", Detail: strings.TrimPrefix(lastErrDetail(lastErr), "; ")}, http.StatusOK
	}
	return health{Status: "ok"}, http.StatusOK
}

func lastErrDetail(err error) string {
	if err == nil {
		return ""
	}
	return "; last error: " + err.Error()
}

// Readyz answers 200 when the committer is set up, connected, consumes
// every partition assigned to it, and every dataset it serves is deciding (or idle: evicted, reloaded on demand);
// 503 otherwise, naming the datasets loading, retrying or stopped. The
// body (JSON) lists each dataset's state.
func (c *Committer) Readyz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h, code := c.readyz()
		writeHealth(w, h, code)
	})
}

func (c *Committer) readyz() (health, int) {
	h := health{Status: "ready"}
	for _, d := range c.DatasetStatuses() {
		h.Datasets = append(h.Datasets, datasetHealth{Dataset: d.Dataset, State: d.State, Reason: d.Reason, Detail: d.Detail, Since: d.Since})
	}
	switch {
	case !c.Ready():
		h.Status, h.Detail = "not ready", "streams not set up (starting or stopped)"
	case !c.nc.IsConnected():
		h.Status, h.Detail = "not ready", "NATS connection down"
	case c.startingPartitions() > 0:
		h.Status, h.Detail = "not ready", fmt.Sprintf("%d partitions of this committer not consuming yet", c.startingPartitions())
	default:
		var waiting []string
		for _, d := range h.Datasets {
			if !healthy(d.State) {
				waiting = append(waiting, d.Dataset+" "+string(d.State))
			}
		}
		if len(waiting) > 0 {
			h.Status, h.Detail = "not ready", "datasets not deciding: "+strings.Join(waiting, ", ")
		}
	}
	if h.Status != "ready" {
		return h, http.StatusServiceUnavailable
	}
	return h, http.StatusOK
}

func writeHealth(w http.ResponseWriter, h health, code int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(h)
}
