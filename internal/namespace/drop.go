package namespace

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"cellguard/internal/drop"
	"cellguard/internal/natsperm"
	"cellguard/internal/retry"
	"cellguard/proto/cellguardpb"
)

// ReasonDatasetDeleted is the reason of every refusal that concerns a
// dropped table: the name of cellguardpb.Reason_DATASET_DELETED.
var ReasonDatasetDeleted = cellguardpb.Reason_DATASET_DELETED.String()

// dropNote is recorded on the tombstones the namespace writes.
const dropNote = "dropped through the Lance REST namespace"

// checkDropped refuses requests on a dropped table: reads get "not
// found" (404, code 4), as for a table that never existed; writes
// (declare, version/create) get 409 code 19, since the name stays taken
// (the decision log keeps the table's history, and a creating
// transaction of a deleted name is rejected DATASET_DELETED). A
// tombstone is permanent, so once seen it is remembered.
func (s *Server) checkDropped(ctx context.Context, ds string, write bool) *Error {
	dropped, e := s.dropped(ctx, ds)
	if e != nil || !dropped {
		return e
	}
	if write {
		return &Error{Status: http.StatusConflict, Code: CodeInvalidTableState, Final: true, Reason: ReasonDatasetDeleted,
			Msg:    fmt.Sprintf("%s: table %q was dropped, and a dropped table's name cannot be reused", ReasonDatasetDeleted, ds),
			Detail: "choose another name"}
	}
	e = tableNotFound(ds)
	e.Msg += " (dropped)"
	e.Final, e.Reason = true, ReasonDatasetDeleted
	return e
}

// dropped reports whether ds has a tombstone.
func (s *Server) dropped(ctx context.Context, ds string) (bool, *Error) {
	s.mu.Lock()
	t, ok := s.tables[ds]
	s.mu.Unlock()
	if ok {
		t.mu.Lock()
		gone := t.dropped
		t.mu.Unlock()
		if gone {
			return true, nil
		}
	}
	_, gone, err := s.cfg.Log.Tombstone(ctx, ds)
	if err != nil {
		return false, internal(err)
	}
	if gone {
		s.forget(ds)
	}
	return gone, nil
}

// forget marks ds dropped. Its location stays open (requests in flight
// may hold it) until the server closes.
func (s *Server) forget(ds string) {
	t := s.table(ds)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropped, t.declared = true, false
}

// dropTable drops a table. A declared, never-created table is forgotten
// (a worker may). A created table is deleted (an admin token only, so
// never by a server without tokens): its
// tombstone is appended to the decision log with the admin connection,
// and its Lance directory is purged (see dropCreated).
func (s *Server) dropTable(ctx context.Context, r *http.Request) (any, *Error) {
	var req idRequest
	if e := decode(r, &req); e != nil {
		return nil, e
	}
	ds, e := tableName(r, req.ID)
	if e != nil {
		return nil, e
	}
	// A worker may forget a declared table, only an admin drops a
	// created one (checked again in dropCreated); say both.
	if e := s.cfg.Tokens.authorizeAs(r, RoleWorker, ds, "admin, or worker for a declared, never-created table"); e != nil {
		return nil, e
	}
	_, exists, e := s.head(ctx, ds)
	if e != nil {
		return nil, e
	}
	if exists {
		return s.dropCreated(ctx, r, ds)
	}
	t, declared := s.declaredTable(ds)
	if !declared {
		return nil, tableNotFound(ds)
	}
	t.mu.Lock()
	t.declared = false
	t.mu.Unlock()
	return dropResponse{ID: []string{ds}, Location: clientLocation(t.locURL)}, nil
}

// dropResponse is the spec's DropTableResponse.
type dropResponse struct {
	ID       []string `json:"id"`
	Location string   `json:"location,omitempty"`
}

// dropCreated deletes a created table with drop.Dataset: a tombstone in
// the decision log, after which the committer rejects every transaction
// of the table DATASET_DELETED and the publisher stops; then every
// object of its Lance directory is deleted, as the spec's DropTable
// ("drop a table and delete its data") and LanceDB's dropTable expect.
//
// A table with staged, undecided transactions is busy: the drop waits up
// to Config.DropWait for them to be decided, then answers 409 code 19 (nothing
// was dropped; the client may retry). It takes the table's commit lock
// first, so a version/create of this server in progress counts as staged
// work, and one that waits for the lock finds the table dropped.
func (s *Server) dropCreated(ctx context.Context, r *http.Request, ds string) (any, *Error) {
	if s.cfg.Tokens == nil {
		return nil, &Error{Status: http.StatusForbidden, Code: CodePermissionDenied, Final: true,
			Msg:    "dropping a created table needs an admin token, and this server authenticates no one",
			Detail: "serve with --namespace-tokens FILE holding an `admin <token> <tables>` line"}
	}
	if e := s.cfg.Tokens.authorize(r, RoleAdmin, ds); e != nil {
		return nil, e
	}
	if s.cfg.Admin == nil {
		return nil, &Error{Status: http.StatusNotAcceptable, Code: CodeUnsupported, Final: true,
			Msg:    "dropping a created table needs the namespace's admin NATS connection, which this server does not have",
			Detail: "serve with --namespace-admin-creds FILE (an admin user's credentials), or with the embedded NATS server"}
	}
	wctx, cancel := context.WithTimeout(ctx, s.cfg.DropWait)
	defer cancel()
	t := s.table(ds)
	select {
	case t.commit <- struct{}{}:
		defer t.unlock()
	case <-wctx.Done():
		return nil, busy(ds, fmt.Sprintf("a version/create on it still runs after %s", s.cfg.DropWait))
	}
	var res drop.Result
	b := retry.Backoff{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond}
	// wctx bounds the wait for a busy table; the drop itself, a purge of
	// the whole directory included, runs under the request's deadline.
	err := retry.Do(wctx, 1000, b, func(context.Context) (err error) {
		res, err = drop.Dataset(ctx, s.cfg.Admin.JetStream, s.cfg.Admin.Log, ds, drop.Options{Quiet: -1, PurgeData: true, Note: dropNote})
		return err
	}, func(err error) bool { return errors.Is(err, drop.ErrBusy) })
	if res.Seq != 0 {
		s.forget(ds) // the tombstone is in the log, whatever else failed
	}
	if err != nil {
		return nil, s.dropError(ds, err)
	}
	s.cfg.Logger.Info("table dropped", "table", ds, "tombstone", res.Seq, "head", res.Head, "purged", res.Purged, "location", res.Location)
	return dropResponse{ID: []string{ds}, Location: clientLocation(res.Location)}, nil
}

// dropError maps drop.Dataset's errors to the namespace's.
func (s *Server) dropError(ds string, err error) *Error {
	var be *drop.BusyError
	switch {
	case errors.As(err, &be):
		return busy(ds, fmt.Sprintf("%d undecided staged transaction(s) after %s", be.Staged, s.cfg.DropWait))
	case errors.Is(err, drop.ErrNoDataset):
		return tableNotFound(ds)
	case errors.Is(err, natsperm.ErrPermission):
		return errorf(http.StatusInternalServerError, CodeInternal,
			"the namespace's admin NATS connection may not delete datasets (is --namespace-admin-creds an admin user?): %v", err)
	}
	return internal(fmt.Errorf("drop table %q: %w", ds, err))
}

func busy(ds, why string) *Error {
	return &Error{Status: http.StatusConflict, Code: CodeInvalidTableState,
		Msg:    fmt.Sprintf("table %q is busy: %s", ds, why),
		Detail: "nothing was dropped; retry once its writers are done"}
}
