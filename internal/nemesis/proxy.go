// Package nemesis is the library of the fault suite (TestNemesis in
// cmd/cellguard): a TCP proxy that partitions a link on demand, the
// checker of a run's logs against what its clients observed, and a
// porcupine model of a dataset's history for the per-dataset
// linearizability check.
package nemesis

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Proxy forwards every TCP connection accepted on its listener to one
// upstream address, until Cut: then it closes every connection it carries
// and holds each new one open without reading from it or dialing the
// upstream (a blackhole: the client's bytes go nowhere and nothing comes
// back, as across a partition), until Heal closes the held ones and
// forwarding resumes.
//
//	p, err := nemesis.NewProxy("127.0.0.1:0", upstream)
//	defer p.Close()
//	// clients dial p.Addr()
//	p.Cut()
//	p.Heal()
type Proxy struct {
	ln       net.Listener
	upstream string

	mu     sync.Mutex
	cut    bool
	closed bool
	links  map[*link]struct{} // forwarded
	held   map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// link is one forwarded connection: the client's side and the upstream's.
type link struct{ client, up net.Conn }

func (l *link) close() { l.client.Close(); l.up.Close() }

// NewProxy listens on listen (e.g. "127.0.0.1:0") and forwards to upstream.
func NewProxy(listen, upstream string) (*Proxy, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, upstream: upstream, links: map[*link]struct{}{}, held: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every forwarded connection and blackholes new ones.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for l := range p.links {
		l.close()
		delete(p.links, l)
	}
}

// Heal closes the connections held during the cut (their clients
// reconnect) and forwards again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
	for c := range p.held {
		c.Close()
		delete(p.held, c)
	}
}

// IsCut reports whether the link is cut.
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Counts returns how many connections are forwarded and held now.
func (p *Proxy) Counts() (forwarded, held int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links), len(p.held)
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for l := range p.links {
		l.close()
		delete(p.links, l)
	}
	for c := range p.held {
		c.Close()
		delete(p.held, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.mu.Lock()
		switch {
		case p.closed:
			c.Close()
		case p.cut:
			p.held[c] = struct{}{}
		default:
			p.wg.Add(1)
			go p.forward(c)
		}
		p.mu.Unlock()
	}
}

// forward dials the upstream for c and copies both ways until either side
// closes or the proxy cuts the link.
func (p *Proxy) forward(c net.Conn) {
	defer p.wg.Done()
	up, err := net.Dial("tcp", p.upstream)
	if err != nil { // the upstream is down: the client sees its connection close
		c.Close()
		return
	}
	l := &link{client: c, up: up}
	p.mu.Lock()
	if p.cut || p.closed { // cut while dialing
		p.mu.Unlock()
		l.close()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		l.close()
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}
