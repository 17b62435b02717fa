package natstest

import (
	"fmt"
	"sync"
	"testing"
)

// serverLog passes a server's warnings and errors to its test's log, so a
// failing test shows why the server refused (a store it could not create,
// say) instead of only the terse API error a client gets. Notices, debug
// and trace lines are dropped, and so is a line after its format has
// been logged maxRepeats times (a killed node's peers retry their routes
// every second). Once the test's servers are stopped it drops everything:
// a server goroutine that logs late must not touch a finished test.
type serverLog struct {
	t      testing.TB
	mu     sync.Mutex
	closed bool
	seen   map[string]int // lines logged per format
}

// maxRepeats is how many lines of one format a test's log gets.
const maxRepeats = 3

func newServerLog(t testing.TB) *serverLog {
	l := &serverLog{t: t, seen: map[string]int{}}
	// Registered before the servers' Stop, so it runs after them.
	t.Cleanup(l.close)
	return l
}

func (l *serverLog) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

func (l *serverLog) printf(level, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.seen[format]++
	switch n := l.seen[format]; {
	case n <= maxRepeats:
		l.t.Logf("nats-server %s: %s", level, fmt.Sprintf(format, v...))
	case n == maxRepeats+1:
		l.t.Logf("nats-server %s: %s (further lines like it not shown)", level, fmt.Sprintf(format, v...))
	}
}

func (l *serverLog) Noticef(string, ...any)         {}
func (l *serverLog) Debugf(string, ...any)          {}
func (l *serverLog) Tracef(string, ...any)          {}
func (l *serverLog) Warnf(format string, v ...any)  { l.printf("warning", format, v...) }
func (l *serverLog) Errorf(format string, v ...any) { l.printf("error", format, v...) }
func (l *serverLog) Fatalf(format string, v ...any) { l.printf("fatal", format, v...) }
