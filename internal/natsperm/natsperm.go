// Package natsperm makes a call that the NATS server refuses for lack of
// permission fail at once with a typed error, instead of waiting out its
// deadline.
//
// The server does not answer a denied publish or request: it drops the
// message and tells the connection, asynchronously, with
// `-ERR 'Permissions Violation for Publish to "SUBJ"'`. A JetStream publish
// or API request therefore just times out. natsperm listens to those
// reports (chained in front of the connection's error handler) and cancels
// the calls that guard a matching subject:
//
//	ctx, done := natsperm.For(nc).Guard(ctx, "cg.txn.orders")
//	_, err := js.Publish(ctx, "cg.txn.orders", body)
//	err = done(err) // a *natsperm.Error matching ErrPermission if refused
package natsperm

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
)

// ErrPermission matches every *Error: the server refused a publish or a
// subscription for lack of permission.
var ErrPermission = errors.New("permission denied")

// Error is one refusal reported by the server.
type Error struct {
	Op      string // "publish" or "subscribe"
	Subject string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s to %q refused by the server (the user's permissions do not allow it)", ErrPermission, e.Op, e.Subject)
}

// Is reports whether target is ErrPermission or nats.ErrPermissionViolation.
func (e *Error) Is(target error) bool {
	return target == ErrPermission || target == nats.ErrPermissionViolation
}

var violationRE = regexp.MustCompile(`(?i)permissions violation for (publish|subscription) to "([^"]+)"`)

// Parse extracts the refusal from an error the connection reported; ok
// is false for other errors.
func Parse(err error) (*Error, bool) {
	if err == nil || !errors.Is(err, nats.ErrPermissionViolation) {
		return nil, false
	}
	m := violationRE.FindStringSubmatch(err.Error())
	if m == nil {
		return nil, false
	}
	op := "publish"
	if strings.EqualFold(m[1], "subscription") {
		op = "subscribe"
	}
	return &Error{Op: op, Subject: m[2]}, true
}

// Watcher fans the refusals of one connection out to the calls guarding
// their subjects.
type Watcher struct {
	mu     sync.Mutex
	next   uint64
	guards map[uint64]guard
}

type guard struct {
	patterns []string
	cancel   context.CancelCauseFunc
}

// JetStream are the JetStream subjects a call's own requests use: the
// whole API except consumer deletions, which nats.go sends on its own in
// the background (an ordered consumer dropping its old consumer) and
// whose refusal must not end an unrelated call.
var JetStream = []string{
	"$JS.API.INFO", "$JS.API.STREAM.>", "$JS.API.DIRECT.>", "$JS.API.CONSUMER.CREATE.>",
	"$JS.API.CONSUMER.DURABLE.>", "$JS.API.CONSUMER.INFO.>", "$JS.API.CONSUMER.MSG.>",
	"$JS.API.CONSUMER.NAMES.>", "$JS.API.CONSUMER.LIST.>", "$JS.API.CONSUMER.PAUSE.>",
	"$JS.ACK.>", "$O.>",
}

var watchers sync.Map // *nats.Conn → *Watcher

// For returns nc's watcher, installing it on first use: its handler runs
// before the handler nc had (which still sees every error).
func For(nc *nats.Conn) *Watcher {
	if w, ok := watchers.Load(nc); ok {
		return w.(*Watcher)
	}
	w := &Watcher{guards: map[uint64]guard{}}
	if actual, loaded := watchers.LoadOrStore(nc, w); loaded {
		return actual.(*Watcher)
	}
	prev := nc.ErrorHandler()
	nc.SetErrorHandler(func(c *nats.Conn, s *nats.Subscription, err error) {
		w.report(err)
		if prev != nil {
			prev(c, s, err)
		}
	})
	prevClosed := nc.ClosedHandler()
	nc.SetClosedHandler(func(c *nats.Conn) {
		watchers.Delete(nc)
		if prevClosed != nil {
			prevClosed(c)
		}
	})
	return w
}

// Guard returns a context that ends, with the refusal as its cause, when
// the server refuses a subject matching one of patterns (NATS wildcards
// allowed; none means any subject) while the call runs. done unregisters
// the guard and returns the refusal if there was one, else err.
func (w *Watcher) Guard(ctx context.Context, patterns ...string) (context.Context, func(err error) error) {
	gctx, cancel := context.WithCancelCause(ctx)
	w.mu.Lock()
	id := w.next
	w.next++
	w.guards[id] = guard{patterns: patterns, cancel: cancel}
	w.mu.Unlock()
	return gctx, func(err error) error {
		w.mu.Lock()
		delete(w.guards, id)
		w.mu.Unlock()
		var perr *Error
		if errors.As(context.Cause(gctx), &perr) {
			cancel(nil)
			return perr
		}
		cancel(nil)
		return err
	}
}

func (w *Watcher) report(err error) {
	perr, ok := Parse(err)
	if !ok {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, g := range w.guards {
		if matchesAny(g.patterns, perr.Subject) {
			g.cancel(perr)
		}
	}
}

func matchesAny(patterns []string, subject string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if Match(p, subject) {
			return true
		}
	}
	return false
}

// Match reports whether subject matches the NATS subject pattern (with
// '*' for one token and a final '>' for one or more).
func Match(pattern, subject string) bool {
	pt := strings.Split(pattern, ".")
	st := strings.Split(subject, ".")
	for i, p := range pt {
		if p == ">" {
			return i < len(st)
		}
		if i >= len(st) || (p != "*" && p != st[i]) {
			return false
		}
	}
	return len(pt) == len(st)
}
