package embedded

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer the server's goroutines may write to
// while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A client that breaks the protocol makes the server log an error: it
// reaches the logger the server was started with, and the notices of a
// healthy start do not.
func TestServerErrorsReachTheLogger(t *testing.T) {
	var out syncBuffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv, err := StartNoAuth(t.TempDir(), -1, Always(), log)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	if got := out.String(); got != "" {
		t.Errorf("a healthy start logged:\n%s", got)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.ClientURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("NOT A NATS VERB\r\n")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "level=ERROR") {
		if time.Now().After(deadline) {
			t.Fatalf("no server error logged after a protocol violation; log:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := out.String(); !strings.Contains(got, "nats server: ") {
		t.Errorf("server error not marked as the server's:\n%s", got)
	}
}
