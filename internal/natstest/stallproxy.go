package natstest

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"
)

// StallProxy forwards NATS connections to a server; once armed, the first
// time a client sends marker it holds what the server sends back for hold:
// a slow or loaded server, for tests of what a client does when answers
// come late.
type StallProxy struct {
	Addr   string // host:port to connect to
	marker []byte
	hold   time.Duration

	began chan struct{} // closed when the stall begins

	mu    sync.Mutex
	armed bool
	until time.Time // zero until the stall began
}

// StartStallProxy starts a proxy to upstream (a nats:// URL or host:port),
// closed when the test ends.
func StartStallProxy(t testing.TB, upstream string, marker []byte, hold time.Duration) *StallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	host := upstream
	if u, ok := bytes.CutPrefix([]byte(upstream), []byte("nats://")); ok {
		host = string(u)
	}
	p := &StallProxy{Addr: ln.Addr().String(), marker: marker, hold: hold, began: make(chan struct{})}
	var wg sync.WaitGroup
	var conns []net.Conn
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", host)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			conns = append(conns, c, s)
			p.mu.Unlock()
			wg.Go(func() { p.up(c, s) })
			wg.Go(func() { p.down(s, c) })
		}
	})
	return p
}

// Arm makes the next marker start the stall.
func (p *StallProxy) Arm() {
	p.mu.Lock()
	p.armed = true
	p.mu.Unlock()
}

// Stalled reports whether the stall happened.
func (p *StallProxy) Stalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.until.IsZero()
}

// Began is closed when the stall begins (the client sent the marker).
func (p *StallProxy) Began() <-chan struct{} { return p.began }

// up copies client to server, starting the stall at the marker (before
// the server can see it, so all it answers is held).
func (p *StallProxy) up(c, s net.Conn) {
	buf := make([]byte, 32<<10)
	var tail []byte
	for {
		n, err := c.Read(buf)
		if n > 0 {
			seen := append(tail, buf[:n]...)
			p.mu.Lock()
			if p.armed && p.until.IsZero() && bytes.Contains(seen, p.marker) {
				p.until = time.Now().Add(p.hold)
				close(p.began)
			}
			p.mu.Unlock()
			tail = append([]byte(nil), seen[max(0, len(seen)-len(p.marker)):]...)
			if _, err := s.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			_ = s.Close()
			return
		}
	}
}

// down copies server to client, holding each read while the stall lasts.
func (p *StallProxy) down(s, c net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			p.mu.Lock()
			until := p.until
			p.mu.Unlock()
			if d := time.Until(until); d > 0 {
				time.Sleep(d) // the slow server this test is about
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			_ = c.Close()
			return
		}
	}
}
