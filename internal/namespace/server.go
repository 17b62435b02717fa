package namespace

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"cellguard/internal/declog"
	"cellguard/internal/retry"
	"cellguard/internal/subject"
)

// Config configures a Server.
type Config struct {
	// Log is the decision log: heads, versions and decisions are read
	// from it. Required.
	Log *declog.Log
	// JetStream stages transactions on the dataset's subject. Required.
	JetStream jetstream.JetStream
	// LanceRoot is where new tables live: <LanceRoot>/<table>.lance. It
	// must be the committer's LanceRoot. Required.
	LanceRoot string
	// Tokens authorizes requests; nil serves without authentication.
	Tokens *Tokens
	// Admin drops created tables: their tombstones are written as an
	// admin NATS user, the only role that may (deploy/nats/accounts.conf).
	// nil: dropping a created table is refused (406, code 0).
	Admin *Admin
	// Logger logs refused and failed requests (never tokens).
	Logger *slog.Logger
	// Registerer receives the namespace metrics; nil: not exported.
	Registerer prometheus.Registerer

	// RequestTimeout bounds every request but version/create and drop
	// (default 30s).
	RequestTimeout time.Duration
	// CommitTimeout bounds a version/create (staging, the decision and
	// its publication) and a drop (the tombstone and the purge of the
	// table's directory) (default 2m).
	CommitTimeout time.Duration
	// DropWait bounds how long a drop waits for the table's staged
	// transactions to be decided before it answers that the table is
	// busy (default 10s).
	DropWait time.Duration
	// MaxBodyBytes bounds request bodies (default 1 MiB).
	MaxBodyBytes int64
	// MaxManifestBytes bounds the staged manifest and transaction files
	// read from storage (default 64 MiB).
	MaxManifestBytes int64
	// Poll is the backoff between looks at storage while waiting for the
	// publisher (default 10ms doubling to 500ms).
	Poll retry.Backoff
}

// Admin is the namespace's view of the pipeline as an admin NATS user:
// a JetStream context and the decision log opened on it.
type Admin struct {
	JetStream jetstream.JetStream
	Log       *declog.Log
}

func (c Config) withDefaults() (Config, error) {
	if c.Log == nil || c.JetStream == nil {
		return c, errors.New("namespace: Config.Log and Config.JetStream are required")
	}
	if c.Admin != nil && (c.Admin.JetStream == nil || c.Admin.Log == nil) {
		return c, errors.New("namespace: Config.Admin needs both JetStream and Log")
	}
	if c.LanceRoot == "" {
		return c, errors.New("namespace: Config.LanceRoot is required (tables live under it)")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 30 * time.Second
	}
	if c.CommitTimeout <= 0 {
		c.CommitTimeout = 2 * time.Minute
	}
	if c.DropWait <= 0 {
		c.DropWait = 10 * time.Second
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.MaxManifestBytes <= 0 {
		c.MaxManifestBytes = 64 << 20
	}
	if c.Poll.Initial <= 0 {
		c.Poll = retry.Backoff{Initial: 10 * time.Millisecond, Max: 500 * time.Millisecond}
	}
	return c, nil
}

// Server serves the Lance REST namespace over the cellguard pipeline.
// Create it with New; it is an http.Handler.
type Server struct {
	cfg     Config
	sc      subject.Scheme
	mux     *http.ServeMux
	metrics *metrics

	mu      sync.Mutex
	tables  map[string]*tableState
	staging jetstream.Stream // the staging stream, once looked up

	// beforeStage, when set (tests only), runs after a version/create is
	// checked and verified and before it is staged: the window in which
	// another writer's commit moves the version (docs/design.md §9.2).
	beforeStage atomic.Pointer[func(ctx context.Context, ds string)]
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, sc: cfg.Log.Scheme(), metrics: m, tables: map[string]*tableState{}}
	s.routes()
	return s, nil
}

// Close closes the storage locations the server opened.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tables {
		t.feed.close()
		if t.loc != nil {
			_ = t.loc.Close()
		}
	}
	s.tables = map[string]*tableState{}
}

// stopFeeds stops the tables' decision feeds; a later version/create
// starts its table's again.
func (s *Server) stopFeeds() {
	s.mu.Lock()
	ts := make([]*tableState, 0, len(s.tables))
	for _, t := range s.tables {
		ts = append(ts, t)
	}
	s.mu.Unlock()
	for _, t := range ts {
		t.feed.close()
	}
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// handlerFunc is a route: it returns the response body (nil: empty 200)
// or an *Error.
type handlerFunc func(ctx context.Context, r *http.Request) (any, *Error)

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	h := func(pattern, route string, timeout time.Duration, fn handlerFunc) {
		s.mux.Handle(pattern, s.wrap(route, timeout, fn))
	}
	rt, ct := s.cfg.RequestTimeout, s.cfg.CommitTimeout
	h("GET /v1/namespace/{id}/table/list", "table_list", rt, s.listTables)
	h("GET /v1/namespace/{id}/list", "namespace_list", rt, s.listNamespaces)
	h("POST /v1/namespace/{id}/describe", "namespace_describe", rt, s.describeNamespace)
	h("POST /v1/namespace/{id}/exists", "namespace_exists", rt, s.namespaceExists)
	h("POST /v1/namespace/{id}/create", "namespace_create", rt, s.createNamespace)
	h("POST /v1/namespace/{id}/drop", "namespace_drop", rt, s.dropNamespace)
	h("POST /v1/table/{id}/declare", "table_declare", rt, s.declareTable)
	h("POST /v1/table/{id}/describe", "table_describe", rt, s.describeTable)
	h("POST /v1/table/{id}/exists", "table_exists", rt, s.tableExists)
	h("POST /v1/table/{id}/drop", "table_drop", ct, s.dropTable) // purges a directory
	h("POST /v1/table/{id}/create", "table_create", rt, s.createTable)
	h("POST /v1/table/{id}/version/list", "version_list", rt, s.listVersions)
	h("POST /v1/table/{id}/version/describe", "version_describe", rt, s.describeVersion)
	h("POST /v1/table/{id}/version/delete", "version_delete", rt, s.deleteVersions)
	h("POST /v1/table/{id}/version/create", "version_create", ct, s.createVersion)
	s.mux.Handle("/", s.wrap("unknown", rt, func(_ context.Context, r *http.Request) (any, *Error) {
		return nil, errorf(http.StatusNotFound, CodeUnsupported, "no such operation: %s %s", r.Method, r.URL.Path)
	}))
}

// wrap bounds a route in time and body size, and writes its answer.
func (s *Server) wrap(route string, timeout time.Duration, fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		body, e := fn(ctx, r.WithContext(ctx))
		status := http.StatusOK
		if e != nil {
			status = e.Status
			lvl := slog.LevelInfo
			if status >= 500 {
				lvl = slog.LevelWarn
			}
			s.cfg.Logger.Log(ctx, lvl, "namespace request refused", "route", route, "path", r.URL.Path, "status", e.Status, "code", e.Code, "err", e.Msg, "detail", e.Detail)
			writeError(w, r, e)
		} else if body == nil {
			w.WriteHeader(http.StatusOK)
		} else {
			writeJSON(w, http.StatusOK, body)
		}
		s.metrics.observe(route, status, time.Since(start))
	})
}

// decode reads a JSON body into v. An empty body and the literal `null`
// (what ListTableVersions sends) leave v as it is.
func decode(r *http.Request, v any) *Error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return errorf(http.StatusRequestEntityTooLarge, CodeInvalidInput, "request body over %d bytes", mb.Limit)
		}
		return invalid("read body: %v", err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return invalid("malformed JSON body: %v", err)
	}
	return nil
}

// objectID is an id from the path: the parts joined by the delimiter.
func objectID(r *http.Request) []string {
	delim := r.URL.Query().Get("delimiter")
	if delim == "" {
		delim = "$"
	}
	id := r.PathValue("id")
	if id == delim || id == "" {
		return nil // the root namespace
	}
	return strings.Split(id, delim)
}

// tableName returns the dataset a table id names: tables live in the
// root namespace, one part, a valid dataset name. bodyID, when given,
// must equal the path's id.
func tableName(r *http.Request, bodyID []string) (string, *Error) {
	id := objectID(r)
	if bodyID != nil && !equalID(id, bodyID) {
		return "", invalid("body id %q differs from path id %q", bodyID, id)
	}
	switch {
	case len(id) == 0:
		return "", invalid("a table id is required")
	case len(id) > 1:
		return "", errorf(http.StatusNotFound, CodeNamespaceNotFound, "namespace %q not found: tables live in the root namespace", strings.Join(id[:len(id)-1], "$"))
	}
	if err := subject.Validate(id[0]); err != nil {
		return "", invalid("table name: %v", err)
	}
	return id[0], nil
}

func equalID(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Serve serves s on ln until ctx ends, then shuts down gracefully
// (waiting at most 10s for requests in flight). Every connection is
// bounded in time: headers, bodies, answers and idle keep-alives.
func Serve(ctx context.Context, ln net.Listener, s *Server) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      s.cfg.CommitTimeout + time.Minute,
		IdleTimeout:       2 * time.Minute,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-errc
		s.stopFeeds()
		return nil
	}
}
