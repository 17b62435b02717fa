package namespace

import (
	"context"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/declog"
	"cellguard/internal/publish"
	"cellguard/internal/subject"
	"cellguard/proto/cellguardpb"
)

// tableState is what the server keeps per table: the lock that orders
// its version commits, and its open location.
type tableState struct {
	commit chan struct{}   // held (1 token) while a version/create runs
	recent recentManifests // used under commit
	feed   decisionFeed
	// stored is the newest version known to be in storage (used under
	// commit).
	stored uint64

	mu       sync.Mutex
	locURL   string
	loc      *publish.Location
	dsCfg    *cellguardpb.DatasetConfig // from the log's creation record, once read
	declared bool                       // declared through this server, not yet created
	dropped  bool                       // its tombstone was seen: dropped for good
}

func (s *Server) table(ds string) *tableState {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tables[ds]
	if !ok {
		t = &tableState{commit: make(chan struct{}, 1)}
		s.tables[ds] = t
	}
	return t
}

// lock takes the table's commit lock, or gives up when ctx ends.
func (t *tableState) lock(ctx context.Context) *Error {
	select {
	case t.commit <- struct{}{}:
		return nil
	case <-ctx.Done():
		return errorf(http.StatusServiceUnavailable, CodeServiceUnavailable, "table busy: %v", ctx.Err())
	}
}

func (t *tableState) unlock() { <-t.commit }

// head returns the committed head of ds from the decision log; ok is
// false when the dataset does not exist yet. A dropped table is not
// found (404, code 4): see dropped.
func (s *Server) head(ctx context.Context, ds string) (declog.Record, bool, *Error) {
	return s.headFor(ctx, ds, false)
}

// headToWrite is head for requests that would create or change ds: a
// dropped table's name cannot be reused (409, code 19).
func (s *Server) headToWrite(ctx context.Context, ds string) (declog.Record, bool, *Error) {
	return s.headFor(ctx, ds, true)
}

func (s *Server) headFor(ctx context.Context, ds string, write bool) (declog.Record, bool, *Error) {
	if e := s.checkDropped(ctx, ds, write); e != nil {
		return declog.Record{}, false, e
	}
	return s.lastCommitted(ctx, ds)
}

// lastCommitted is head without the tombstone check.
func (s *Server) lastCommitted(ctx context.Context, ds string) (declog.Record, bool, *Error) {
	r, ok, err := s.cfg.Log.Last(ctx, s.sc.Dec(ds, subject.Committed))
	if err != nil {
		return declog.Record{}, false, internal(err)
	}
	return r, ok, nil
}

// openTable returns the table's state and whether its location is
// open.
func (s *Server) openTable(ds string) (*tableState, bool) {
	t := s.table(ds)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t, t.loc != nil
}

// location opens the table's location: the one its creation record names
// for an existing dataset, <LanceRoot>/<ds>.lance for a new one.
func (s *Server) location(ctx context.Context, ds string, exists bool) (*tableState, *Error) {
	t := s.table(ds)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.loc != nil {
		return t, nil
	}
	var u string
	if exists {
		cfg, err := s.cfg.Log.Config(ctx, ds)
		if err != nil {
			return nil, internal(err)
		}
		if cfg.GetLocation() == "" {
			return nil, &Error{Status: http.StatusConflict, Code: CodeInvalidTableState, Final: true,
				Msg: "dataset " + ds + " has no Lance location: it is not published, so Lance clients cannot use it"}
		}
		u = cfg.GetLocation()
		t.dsCfg = cfg
	} else {
		var err error
		if u, err = publish.DatasetLocation(s.cfg.LanceRoot, ds); err != nil {
			return nil, internal(err)
		}
	}
	loc, err := publish.OpenLocation(ctx, u, true)
	if err != nil {
		return nil, internal(err)
	}
	t.locURL, t.loc = u, loc
	return t, nil
}

// declaredLocation names the location of a table being declared,
// <LanceRoot>/<ds>.lance, without creating anything in storage: LanceDB
// writes the table's files there itself, and the location is opened (a
// local directory created) at its first version/create. A declaration
// that is dropped or never committed leaves nothing behind.
func (s *Server) declaredLocation(ds string) (*tableState, *Error) {
	t := s.table(ds)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.locURL == "" {
		u, err := publish.DatasetLocation(s.cfg.LanceRoot, ds)
		if err != nil {
			return nil, internal(err)
		}
		t.locURL = u
	}
	return t, nil
}

// objectPath is how the Lance client names key inside location u: an
// object-store path, without scheme, bucket or leading slash.
func objectPath(u, key string) string {
	var p string
	if !strings.Contains(u, "://") {
		abs, err := filepath.Abs(u)
		if err != nil {
			abs = u
		}
		p = filepath.ToSlash(abs)
	} else if pu, err := url.Parse(u); err == nil {
		p = pu.Path
	}
	return strings.Trim(p, "/") + "/" + key
}

// clientLocation is the table location as the client opens it: a plain
// path for local tables, the URL otherwise.
func clientLocation(u string) string {
	if pu, err := url.Parse(u); err == nil && pu.Scheme == "file" {
		return pu.Path
	}
	if !strings.Contains(u, "://") {
		if abs, err := filepath.Abs(u); err == nil {
			return abs
		}
	}
	return u
}

type idRequest struct {
	ID       []string `json:"id"`
	Location string   `json:"location"`
	Version  *uint64  `json:"version"`
}

type tableResponse struct {
	Location          string `json:"location"`
	ManagedVersioning bool   `json:"managed_versioning"`
	Version           uint64 `json:"version,omitempty"`
	IsOnlyDeclared    bool   `json:"is_only_declared,omitempty"`
}

func (s *Server) declareTable(ctx context.Context, r *http.Request) (any, *Error) {
	var req idRequest
	if e := decode(r, &req); e != nil {
		return nil, e
	}
	ds, e := tableName(r, req.ID)
	if e != nil {
		return nil, e
	}
	if e := s.cfg.Tokens.authorize(r, RoleWorker, ds); e != nil {
		return nil, e
	}
	_, exists, e := s.headToWrite(ctx, ds)
	if e != nil {
		return nil, e
	}
	if exists {
		return nil, errorf(http.StatusConflict, CodeTableAlreadyExists, "table %q already exists", ds)
	}
	t, e := s.declaredLocation(ds)
	if e != nil {
		return nil, e
	}
	if req.Location != "" && req.Location != clientLocation(t.locURL) {
		return nil, invalid("location %q: tables live at %s", req.Location, clientLocation(t.locURL))
	}
	t.mu.Lock()
	t.declared = true
	t.mu.Unlock()
	return tableResponse{Location: clientLocation(t.locURL), ManagedVersioning: true}, nil
}

// describe returns the table's state; version, when given, must exist.
func (s *Server) describe(ctx context.Context, r *http.Request, bodyID []string, version *uint64) (*tableResponse, *Error) {
	ds, e := tableName(r, bodyID)
	if e != nil {
		return nil, e
	}
	if e := s.cfg.Tokens.authorize(r, RoleReader, ds); e != nil {
		return nil, e
	}
	h, exists, e := s.head(ctx, ds)
	if e != nil {
		return nil, e
	}
	if !exists {
		// Reads never create anything: only a declared table has a state.
		if t, ok := s.declaredTable(ds); ok {
			return &tableResponse{Location: clientLocation(t.locURL), ManagedVersioning: true, IsOnlyDeclared: true}, nil
		}
		return nil, tableNotFound(ds)
	}
	t, e := s.location(ctx, ds, true)
	if e != nil {
		return nil, e
	}
	if version != nil && (*version == 0 || *version > h.Version) {
		return nil, errorf(http.StatusNotFound, CodeTableVersionNotFound, "table %q has no version %d (head %d)", ds, *version, h.Version)
	}
	return &tableResponse{Location: clientLocation(t.locURL), ManagedVersioning: true, Version: h.Version}, nil
}

// declaredTable returns the state of ds if it was declared here and not
// created yet, without creating one.
func (s *Server) declaredTable(ds string) (*tableState, bool) {
	s.mu.Lock()
	t, ok := s.tables[ds]
	s.mu.Unlock()
	if !ok {
		return nil, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t, t.declared
}

func (s *Server) describeTable(ctx context.Context, r *http.Request) (any, *Error) {
	var req idRequest
	if e := decode(r, &req); e != nil {
		return nil, e
	}
	return s.describe(ctx, r, req.ID, req.Version)
}

func (s *Server) tableExists(ctx context.Context, r *http.Request) (any, *Error) {
	var req idRequest
	if e := decode(r, &req); e != nil {
		return nil, e
	}
	if _, e := s.describe(ctx, r, req.ID, req.Version); e != nil {
		return nil, e
	}
	return nil, nil
}

func (s *Server) createTable(_ context.Context, r *http.Request) (any, *Error) {
	return nil, errorf(http.StatusNotAcceptable, CodeUnsupported, "CreateTable with an Arrow IPC body is not supported: declare the table and commit versions")
}

type listTablesResponse struct {
	Tables    []string `json:"tables"`
	PageToken string   `json:"page_token,omitempty"`
}

// listTables lists the created tables (datasets with a committed
// version and no tombstone) the token may see, by name, paged by limit and page_token
// (the last name of the previous page).
func (s *Server) listTables(ctx context.Context, r *http.Request) (any, *Error) {
	if len(objectID(r)) > 0 {
		return nil, errorf(http.StatusNotFound, CodeNamespaceNotFound, "namespace %q not found: only the root namespace exists", r.PathValue("id"))
	}
	if e := s.cfg.Tokens.authorize(r, RoleReader, ""); e != nil {
		return nil, e
	}
	limit, after, e := paging(r)
	if e != nil {
		return nil, e
	}
	info, err := s.cfg.Log.Stream().Info(ctx, jetstream.WithSubjectFilter(s.sc.Dec("*", subject.Committed)))
	if err != nil {
		return nil, internal(err)
	}
	dropped, err := s.cfg.Log.Stream().Info(ctx, jetstream.WithSubjectFilter(s.sc.Dec("*", subject.Deleted)))
	if err != nil {
		return nil, internal(err)
	}
	names := []string{}
	for subj := range info.State.Subjects {
		ds, _, err := s.sc.ParseDec(subj)
		if _, gone := dropped.State.Subjects[s.sc.Dec(ds, subject.Deleted)]; err == nil && !gone && ds > after && s.cfg.Tokens.visible(r, ds) {
			names = append(names, ds)
		}
	}
	slices.Sort(names)
	resp := listTablesResponse{Tables: names}
	if limit > 0 && len(names) > limit {
		resp.Tables = names[:limit]
		resp.PageToken = names[limit-1]
	}
	return resp, nil
}

// paging reads the limit and page_token query parameters.
func paging(r *http.Request) (int, string, *Error) {
	q := r.URL.Query()
	limit := 0
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			return 0, "", invalid("limit %q is not a non-negative integer", l)
		}
		limit = n
	}
	return limit, q.Get("page_token"), nil
}

func (s *Server) rootOnly(r *http.Request) *Error {
	if e := s.cfg.Tokens.authorize(r, RoleReader, ""); e != nil {
		return e
	}
	if id := objectID(r); len(id) > 0 {
		return errorf(http.StatusNotFound, CodeNamespaceNotFound, "namespace %q not found: only the root namespace exists", strings.Join(id, "$"))
	}
	return nil
}

func (s *Server) listNamespaces(_ context.Context, r *http.Request) (any, *Error) {
	if e := s.rootOnly(r); e != nil {
		return nil, e
	}
	return map[string]any{"namespaces": []string{}}, nil
}

func (s *Server) describeNamespace(_ context.Context, r *http.Request) (any, *Error) {
	if e := s.rootOnly(r); e != nil {
		return nil, e
	}
	return map[string]any{"properties": map[string]string{}}, nil
}

func (s *Server) namespaceExists(_ context.Context, r *http.Request) (any, *Error) {
	if e := s.rootOnly(r); e != nil {
		return nil, e
	}
	return nil, nil
}

func (s *Server) createNamespace(_ context.Context, r *http.Request) (any, *Error) {
	if len(objectID(r)) == 0 {
		return nil, errorf(http.StatusConflict, 2, "the root namespace exists")
	}
	return nil, errorf(http.StatusNotAcceptable, CodeUnsupported, "child namespaces are not supported: tables live in the root namespace")
}

func (s *Server) dropNamespace(_ context.Context, r *http.Request) (any, *Error) {
	return nil, errorf(http.StatusNotAcceptable, CodeUnsupported, "dropping namespaces is not supported")
}

// datasetConfig returns ds's configuration from its creation record
// (it never changes), read once.
func (s *Server) datasetConfig(ctx context.Context, t *tableState, ds string) (*cellguardpb.DatasetConfig, error) {
	t.mu.Lock()
	cfg := t.dsCfg
	t.mu.Unlock()
	if cfg != nil {
		return cfg, nil
	}
	cfg, err := s.cfg.Log.Config(ctx, ds)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.dsCfg = cfg
	t.mu.Unlock()
	return cfg, nil
}
