package embedded

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

// recordsTo is a slog.Handler that hands records to a channel, dropping
// those it has no room for (the server never waits on the test).
type recordsTo chan slog.Record

func (recordsTo) Enabled(context.Context, slog.Level) bool { return true }
func (h recordsTo) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r:
	default:
	}
	return nil
}
func (h recordsTo) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordsTo) WithGroup(string) slog.Handler      { return h }

// A client that breaks the protocol makes the server log an error: it
// reaches the logger the server was started with, and the notices of a
// healthy start do not.
func TestServerErrorsReachTheLogger(t *testing.T) {
	records := make(recordsTo, 64)
	srv, err := StartNoAuth(t.TempDir(), -1, Always(), slog.New(records))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	select {
	case r := <-records:
		t.Errorf("a healthy start logged %s %q", r.Level, r.Message)
	default:
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.ClientURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("NOT A NATS VERB\r\n")); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case r := <-records:
			if r.Level != slog.LevelError {
				continue
			}
			if !strings.HasPrefix(r.Message, "nats server: ") {
				t.Errorf("server error not marked as the server's: %q", r.Message)
			}
			return
		case <-timeout:
			t.Fatal("no server error logged after a protocol violation")
		}
	}
}
