package namespace

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"cellguard/internal/natsconn"
)

// Error codes of the Lance REST namespace (lance-namespace spec,
// ErrorResponse.code). The client classifies an error by its code only.
const (
	CodeUnsupported            = 0
	CodeNamespaceNotFound      = 1
	CodeTableNotFound          = 4
	CodeTableAlreadyExists     = 5
	CodeTableVersionNotFound   = 11
	CodeInvalidInput           = 13
	CodeConcurrentModification = 14
	CodePermissionDenied       = 15
	CodeUnauthenticated        = 16
	CodeServiceUnavailable     = 17
	CodeInternal               = 18
	CodeInvalidTableState      = 19
)

// Error is a refused request: the HTTP status and the spec's error body.
// Handlers return it; the server writes it as
// `{"error", "code", "detail", "instance"}`.
type Error struct {
	Status int    // HTTP status
	Code   int    // namespace error code
	Msg    string // "error": a short message
	Detail string // "detail": what to do about it, or the fields involved
	// Final marks a decision that retrying cannot change (a permanent
	// rejection): the same request gets the same answer.
	Final bool
	// Reason is the typed reason of a refused commit: a decision's
	// reason (PRECONDITION_FAILED, …) or the server's own
	// (MANIFEST_MISMATCH, INVALID_TRANSACTION); empty otherwise.
	Reason string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("namespace: %d (code %d): %s", e.Status, e.Code, e.Msg)
	}
	return fmt.Sprintf("namespace: %d (code %d): %s: %s", e.Status, e.Code, e.Msg, e.Detail)
}

func errorf(status, code int, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Msg: fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) *Error {
	return errorf(http.StatusBadRequest, CodeInvalidInput, format, args...)
}

func tableNotFound(table string) *Error {
	return errorf(http.StatusNotFound, CodeTableNotFound, "table %q not found", table)
}

// internal is the answer to an error of the server's own (a failed read
// of the decision log, storage): 503 code 17 when NATS is out of reach
// for now (see unavailable), so the client retries; 500 code 18
// otherwise. An *Error passes through.
func internal(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if unavailable(err) {
		return errorf(http.StatusServiceUnavailable, CodeServiceUnavailable, "unavailable, retry: %v", err)
	}
	return errorf(http.StatusInternalServerError, CodeInternal, "%v", err)
}

// unavailable reports whether err says NATS (or the request's time) ran
// out rather than that something is wrong: NATS away for now
// (natsconn.Transient), the request's deadline, or a closed or draining
// connection.
func unavailable(err error) bool {
	return natsconn.Transient(err) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionDraining) ||
		errors.Is(err, jetstream.ErrConnectionClosed)
}

// errorBody is the spec's ErrorResponse.
type errorBody struct {
	Error    string `json:"error"`
	Code     int    `json:"code"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
}

func writeError(w http.ResponseWriter, r *http.Request, e *Error) {
	writeJSON(w, e.Status, errorBody{Error: e.Msg, Code: e.Code, Detail: e.Detail, Instance: r.URL.Path})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":"encode response","code":18}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
