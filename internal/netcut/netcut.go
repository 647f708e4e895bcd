// Package netcut is a TCP proxy whose link can be cut and restored: a
// stand-in, in tests, for the network between one host and another, where
// the machine allows no network namespaces of the tests' own.
//
// A cut is a partition TCP rides out: nothing crosses the link in either
// direction, nothing is lost, and a connection waits. Bytes sent across a
// cut link are held (those read before the cut by the proxy, the rest in
// the kernel's socket buffers) and delivered in order once the link is
// restored, as TCP's retransmissions deliver them once a partition heals.
// So a write a client sent just before or during the cut reaches the
// server late, after whatever the server did meanwhile. A connection
// opened during the cut is accepted, and its first bytes are held too.
//
// A cut can also wait for a moment the bytes mark (CutAt): the first chunk
// one way that a test's function recognises is held, and the link is cut
// from there. Cutting as the server's answer to a statement inside a
// transaction comes back, say, leaves the server's session idle in that
// transaction, holding its locks, and the client waiting for the answer.
//
// # Usage
//
//	p, err := netcut.Listen("127.0.0.1:5432") // the server's address
//	defer p.Close()
//	dial p.Addr() instead of the server ...
//	p.Cut()
//	<-p.Held()  // a client sent something that the cut holds
//	p.Restore()
//
//	p.CutAt(netcut.ToClient, func(chunk []byte) bool { ... })
//	<-p.Held()  // the chunk recognised is held; the link is cut
package netcut

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// Proxy forwards every connection made to Addr to the target, while its
// link is up. It is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu       sync.Mutex
	cut      bool
	restored chan struct{} // closed when the current cut ends; nil while up
	conns    map[net.Conn]struct{}
	closed   bool
	held     chan struct{} // a pipe holds bytes at a cut (capacity 1)
	wg       sync.WaitGroup
	// at, armed by CutAt, cuts the link at the first chunk crossing it in
	// direction atDir that it recognises; nil once it has.
	at    func([]byte) bool
	atDir Direction
}

// Direction is the way bytes cross the link.
type Direction int

// The directions.
const (
	// ToServer is from the client that dialed Addr to the target.
	ToServer Direction = iota
	// ToClient is from the target back to the client.
	ToClient
)

// Listen starts a proxy on a free port of 127.0.0.1 for target (host:port).
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("netcut: listen: %w", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, held: make(chan struct{}, 1)}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address (host:port) clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut stops everything crossing the link, holding it; a cut link stays
// cut until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cut {
		p.cut = true
		p.restored = make(chan struct{})
	}
}

// Restore brings the link back: what was held is delivered, in order.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		p.cut = false
		close(p.restored)
		p.restored = nil
	}
}

// CutAt arms a cut at a moment the bytes mark: the first chunk (what one
// read of a connection returned) crossing the link in direction dir for
// which match returns true is held, and the link is cut from then on, as
// by Cut, until Restore. match sees each chunk once, from the proxy's
// goroutines, while the link is up. A later CutAt replaces an armed one.
func (p *Proxy) CutAt(dir Direction, match func(chunk []byte) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.at, p.atDir = match, dir
}

// Held receives when bytes reach a cut link (at most one signal waits):
// a client or the server sent something that the cut holds.
func (p *Proxy) Held() <-chan struct{} { return p.held }

// Close stops accepting, closes every connection (restoring the link
// first, so nothing waits on it) and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.Restore()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

// track registers c to be closed by Close; false if the proxy is closed.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

// serve joins one client to a new connection to the target.
func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return // the client sees its connection closed, as a refused one
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client, ToServer); done <- struct{}{} }()
	go func() { p.pipe(client, server, ToClient); done <- struct{}{} }()
	<-done // one side ended: end both
	client.Close()
	server.Close()
	<-done
}

// pipe copies from src to dst, the link's direction dir, holding each
// chunk while the link is cut (and cutting it at a chunk CutAt armed).
func (p *Proxy) pipe(dst, src net.Conn, dir Direction) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.cutAt(dir, buf[:n])
			p.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			if tc, ok := dst.(*net.TCPConn); ok {
				tc.CloseWrite()
			}
			return
		}
	}
}

// cutAt cuts the link if a cut is armed for dir and chunk matches it.
func (p *Proxy) cutAt(dir Direction, chunk []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.at == nil || p.atDir != dir || p.cut || !p.at(chunk) {
		return
	}
	p.at = nil
	p.cut = true
	p.restored = make(chan struct{})
}

// gate waits while the link is cut, saying so on held.
func (p *Proxy) gate() {
	p.mu.Lock()
	restored := p.restored
	p.mu.Unlock()
	if restored == nil {
		return
	}
	select {
	case p.held <- struct{}{}:
	default:
	}
	<-restored
}
