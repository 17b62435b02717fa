package nemesis

import (
	"bufio"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// echo is an upstream that echoes each line and counts its connections.
func echo(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted = new(atomic.Int64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String(), accepted
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadString('\n')
	if err != nil || got != msg+"\n" {
		t.Fatalf("echo of %q: %q, %v", msg, got, err)
	}
}

// waitUntil polls cond; the proxy's goroutines change its counts.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestProxyCutHeal: the proxy forwards; a cut closes the connection it
// carried and holds a new one without dialing the upstream; a heal closes
// the held one and forwards new ones again.
func TestProxyCutHeal(t *testing.T) {
	up, accepted := echo(t)
	p, err := NewProxy("127.0.0.1:0", up)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	c1, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	r1 := bufio.NewReader(c1)
	roundTrip(t, c1, r1, "one")

	p.Cut()
	if !p.IsCut() {
		t.Fatal("IsCut false after Cut")
	}
	if _, err := r1.ReadString('\n'); err == nil {
		t.Fatal("a connection carried across the cut still reads")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	waitUntil(t, "the new connection held", func() bool { _, held := p.Counts(); return held == 1 })
	if _, err := c2.Write([]byte("lost\n")); err != nil {
		t.Fatal(err)
	}
	if n := accepted.Load(); n != 1 {
		t.Fatalf("upstream accepted %d connections, want 1 (none during the cut)", n)
	}

	p.Heal()
	if _, err := bufio.NewReader(c2).ReadString('\n'); err == nil {
		t.Fatal("a connection held in the cut reads after the heal")
	}
	c3, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	roundTrip(t, c3, bufio.NewReader(c3), "three")
	if n := accepted.Load(); n != 2 {
		t.Fatalf("upstream accepted %d connections, want 2", n)
	}
	if fwd, held := p.Counts(); fwd != 1 || held != 0 {
		t.Fatalf("counts after the heal: %d forwarded, %d held; want 1, 0", fwd, held)
	}
}

// TestProxyUpstreamDown: with no upstream listening, a client's
// connection is closed, as if the server were down.
func TestProxyUpstreamDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p, err := NewProxy("127.0.0.1:0", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
		t.Fatal("read from a proxy whose upstream is down")
	}
}
