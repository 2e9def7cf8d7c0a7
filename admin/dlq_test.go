package admin_test

import (
	"bytes"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/lanes"
)

// TestDeadListOnASlowServer: a listing whose letters come late, as from a
// loaded server, still lists them all. The service's connection goes
// through a proxy that holds what the server sends for 1.5 s once the
// service asks a consumer for its messages: the no-wait fetch it used
// gave up after the client's 1 s, and the listing came back empty with no
// more to page to.
func TestDeadListOnASlowServer(t *testing.T) {
	t.Parallel()
	b := setupBare(t)
	var want []uint64
	for i := range 3 {
		want = append(want, b.deadLetter(t, "poison", "agent.in.alice", uint64(i+1), `{"text":"boom"}`))
	}
	p := startStallProxy(t, b.nc.ConnectedUrl(), []byte("CONSUMER.MSG.NEXT"), 1500*time.Millisecond)
	nc := natstest.Connect(t, "nats://"+p.addr)
	js, _ := jetstream.New(nc)
	streams, err := lanes.EnsureStreams(b.ctx, js, lanes.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := admin.Serve(nc, admin.Config{JS: js, Inbound: streams.Inbound, Events: streams.Events, Dead: streams.Dead, Runs: b.runs,
		Worker: "w-1", Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	p.arm()
	var page admin.DeadListReply
	if err := b.request(t, admin.OpDeadList, admin.DeadListRequest{}, &page); err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, l := range page.Letters {
		got = append(got, l.Seq)
	}
	if !slices.Equal(got, want) || page.More || !p.stalled() {
		t.Fatalf("listed %v (more %v, stalled %v), want %v", got, page.More, p.stalled(), want)
	}
}

// setupBare is setup without an admin service: the test serves its own.
func setupBare(t *testing.T) *bundle {
	t.Helper()
	b := setup(t, nil)
	if err := b.svc.Stop(); err != nil {
		t.Fatal(err)
	}
	return b
}

// stallProxy forwards one NATS connection; once armed, the first time the
// client sends marker it holds what the server sends back for hold.
type stallProxy struct {
	addr   string
	marker []byte
	hold   time.Duration

	mu    sync.Mutex
	armed bool
	until time.Time // zero until the stall began
}

func startStallProxy(t *testing.T, upstream string, marker []byte, hold time.Duration) *stallProxy {
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
	p := &stallProxy{addr: ln.Addr().String(), marker: marker, hold: hold}
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

// arm makes the next marker start the stall.
func (p *stallProxy) arm() {
	p.mu.Lock()
	p.armed = true
	p.mu.Unlock()
}

// stalled reports whether the stall happened.
func (p *stallProxy) stalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.until.IsZero()
}

// up copies client to server, starting the stall at the marker (before
// the server can see it, so all it answers is held).
func (p *stallProxy) up(c, s net.Conn) {
	buf := make([]byte, 32<<10)
	var tail []byte
	for {
		n, err := c.Read(buf)
		if n > 0 {
			seen := append(tail, buf[:n]...)
			p.mu.Lock()
			if p.armed && p.until.IsZero() && bytes.Contains(seen, p.marker) {
				p.until = time.Now().Add(p.hold)
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
func (p *stallProxy) down(s, c net.Conn) {
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
