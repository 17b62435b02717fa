package committer

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// DatasetState is where a dataset's worker is.
type DatasetState string

// Dataset states, as /readyz reports them.
const (
	// StateLoading: the worker is building the dataset's state from its
	// checkpoint and the decision log (at start, or after a restart).
	StateLoading DatasetState = "loading"
	// StateDeciding: the state is loaded and the worker consumes and
	// decides the dataset's staged transactions.
	StateDeciding DatasetState = "deciding"
	// StateFailed: the worker stopped on an error and restarts after a
	// pause; Err says why.
	StateFailed DatasetState = "failed"
)

// DatasetStatus is one dataset's entry in Status.
type DatasetStatus struct {
	Dataset string       `json:"dataset"`
	State   DatasetState `json:"state"`
	Err     string       `json:"error,omitempty"`
	Since   time.Time    `json:"since"`
}

// status is a worker's DatasetStatus, safe to read from other goroutines.
type status struct {
	mu sync.Mutex
	s  DatasetStatus
}

func (st *status) set(s DatasetState, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.s.State == s && err == nil {
		return
	}
	st.s.State, st.s.Err, st.s.Since = s, "", time.Now()
	if err != nil {
		st.s.Err = err.Error()
	}
}

func (st *status) get() DatasetStatus {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.s
}

// Status returns the state of every dataset this committer serves,
// sorted by name.
func (c *Committer) Status() []DatasetStatus {
	c.mu.Lock()
	out := make([]DatasetStatus, 0, len(c.workers))
	for ds, w := range c.workers {
		s := w.status.get()
		s.Dataset = ds
		out = append(out, s)
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b DatasetStatus) int { return strings.Compare(a.Dataset, b.Dataset) })
	return out
}

// health is what /healthz and /readyz answer, as JSON.
type health struct {
	Status   string          `json:"status"` // "ok", "ready", "starting", "stuck", "not ready", "stopped"
	Detail   string          `json:"detail,omitempty"`
	Datasets []DatasetStatus `json:"datasets,omitempty"`
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
		return health{Status: "starting", Detail: lastErrDetail(lastErr)}, http.StatusOK
	}
	return health{Status: "ok"}, http.StatusOK
}

func lastErrDetail(err error) string {
	if err == nil {
		return ""
	}
	return "; last error: " + err.Error()
}

// Readyz answers 200 when the committer is set up, connected, and every
// dataset it serves has loaded its state and is deciding; 503 otherwise.
// The body (JSON) lists each dataset's state.
func (c *Committer) Readyz() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h, code := c.readyz()
		writeHealth(w, h, code)
	})
}

func (c *Committer) readyz() (health, int) {
	h := health{Status: "ready", Datasets: c.Status()}
	switch {
	case !c.Ready():
		h.Status, h.Detail = "not ready", "streams not set up (starting or stopped)"
	case !c.nc.IsConnected():
		h.Status, h.Detail = "not ready", "NATS connection down"
	default:
		var waiting []string
		for _, d := range h.Datasets {
			if d.State != StateDeciding {
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
