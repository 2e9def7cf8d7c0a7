package lanefleet

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
)

// silentResponder subscribes, on its own connection, to op of session's
// lane service and never answers; each request it gets is signalled on the
// returned channel.
func silentResponder(t *testing.T, url, session, op string) <-chan struct{} {
	t.Helper()
	tok, err := events.KeyToken(session)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan struct{}, 16)
	nc := natstest.Connect(t, url)
	if _, err := nc.Subscribe(sessionsvc.Subject(tok, op), func(*nats.Msg) {
		select {
		case got <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestCloseEndsRequestsInFlight: Close on a connection given to New ends a
// request waiting for its reply at once, with nats.ErrConnectionClosed (not
// retried: a retry would subscribe anew after Close), and leaves no
// subscription on the connection.
func TestCloseEndsRequestsInFlight(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	asked := silentResponder(t, srv.URL, "closing", sessionsvc.OpEvents)
	nc := natstest.Connect(t, srv.URL)
	c, _ := New(nc)
	// Well under callTimeout: a request that waits out its timeout fails
	// the test with the context's error.
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout/2)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.call(ctx, "closing", sessionsvc.OpEvents, nil, nil) }()
	select {
	case <-asked:
	case <-ctx.Done():
		t.Fatal("the request never reached the responder")
	}
	c.Close()
	if err := <-done; !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("call in flight at Close: %v, want nats.ErrConnectionClosed", err)
	}
	if n := nc.NumSubscriptions(); n != 0 {
		t.Fatalf("%d subscriptions after Close", n)
	}
}

// TestReplySubscriptionRemovedByTheServer: when the server drops the
// client's reply subscription (here a permission reload takes the user's
// inboxes away; a reconnect to a server that refuses it is the same) with
// no refusal the client saw at subscribe time, a request that then hears
// nothing drops the subscription, and the next one subscribes anew and gets
// ErrPermission at once instead of timing out for ever.
func TestReplySubscriptionRemovedByTheServer(t *testing.T) {
	t.Parallel()
	erin := func(inboxes bool) *server.User {
		sub := []string{"agent.ev.erin.>"}
		if inboxes {
			sub = append(sub, "_INBOX.>")
		}
		return &server.User{Username: "erin", Password: "erin", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"agent.svc.erin.>"}},
			Subscribe: &server.SubjectPermission{Allow: sub},
		}}
	}
	opts := &server.Options{ServerName: "reload", Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		Users: []*server.User{{Username: "worker", Password: "w"}, erin(true)}}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	tok, _ := events.KeyToken("erin")
	subj := sessionsvc.Subject(tok, sessionsvc.OpSettings)
	worker := natstest.Connect(t, s.ClientURL(), nats.UserInfo("worker", "w"))
	if _, err := worker.Subscribe(subj, func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	if err := worker.Flush(); err != nil {
		t.Fatal(err)
	}
	nc := natstest.Connect(t, s.ClientURL(), nats.UserInfo("erin", "erin"))
	c, _ := New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if data, err := c.requestMsg(ctx, nats.NewMsg(subj), time.Minute); err != nil || string(data) != "ok" {
		t.Fatalf("request before the reload: %q, %v", data, err)
	}
	reload := *opts
	reload.Users = []*server.User{{Username: "worker", Password: "w"}, erin(false)}
	if err := s.ReloadOptions(&reload); err != nil {
		t.Fatal(err)
	}
	// The subscription is gone from the server: this request hears
	// nothing, whatever its timeout.
	if _, err := c.requestMsg(ctx, nats.NewMsg(subj), 500*time.Millisecond); !isTimeout(err) {
		t.Fatalf("request after the reload: %v, want a timeout", err)
	}
	if _, err := c.requestMsg(ctx, nats.NewMsg(subj), time.Minute); !errors.Is(err, ErrPermission) {
		t.Fatalf("request after the timeout: %v, want ErrPermission", err)
	}
}

// TestDroppedReplySubscriptionServesItsWaiters: a reply subscription that a
// request's timeout drops takes no new requests but stays until the
// requests waiting on it end, so their replies still reach them; a timeout
// while it handed over replies drops nothing.
func TestDroppedReplySubscriptionServesItsWaiters(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	c, _ := New(nc)
	x := &c.replies
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, _, doneA, _, err := x.await(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	inboxB, repliesB, doneB, _, err := x.await(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	first := replySub(c)
	doneA(true) // A's deadline passed, nothing came
	if replySub(c) != nil || nc.NumSubscriptions() != 1 {
		t.Fatalf("after a silent timeout: current %p, %d subscriptions; want none current, 1 kept for B", replySub(c), nc.NumSubscriptions())
	}
	inboxC, repliesC, doneC, _, err := x.await(ctx, c) // subscribes anew
	if err != nil {
		t.Fatal(err)
	}
	if replySub(c) == nil || replySub(c) == first {
		t.Fatal("the request after the drop did not subscribe anew")
	}
	_, _, doneD, _, err := x.await(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, inbox := range []string{inboxB, inboxC} {
		if err := nc.Publish(inbox, []byte(inbox)); err != nil {
			t.Fatal(err)
		}
	}
	for _, ch := range []chan *nats.Msg{repliesB, repliesC} {
		select {
		case m := <-ch:
			if m.Subject != string(m.Data) {
				t.Fatalf("reply for %s came to %s", m.Data, m.Subject)
			}
		case <-ctx.Done():
			t.Fatal("a reply was lost")
		}
	}
	doneB(false)
	if n := nc.NumSubscriptions(); n != 1 {
		t.Fatalf("%d subscriptions after the dropped one's last waiter left, want 1", n)
	}
	doneC(false)
	doneD(true) // C's reply came while D waited: not silent
	if replySub(c) == nil {
		t.Fatal("a timeout dropped a subscription that handed over a reply during the wait")
	}
}

// TestReplyTokensAreUnguessable: who knows the client's reply prefix (any
// responder sees it) and may publish under it cannot answer a request in
// flight by guessing its token: a forged reply to each of the first
// thousand counter values, and to the neighbours of a seen token, reaches
// no request.
func TestReplyTokensAreUnguessable(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	forger := natstest.Connect(t, srv.URL)
	c, _ := New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	seen, _, doneSeen, _, err := c.replies.await(ctx, c) // a request whose subject the forger saw
	if err != nil {
		t.Fatal(err)
	}
	doneSeen(false)
	inbox, replies, done, _, err := c.replies.await(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer done(false)
	prefix := seen[:strings.LastIndexByte(seen, '.')+1]
	guesses := []string{seen + "0", seen[:len(seen)-1]}
	for n := range uint64(1000) {
		guesses = append(guesses, prefix+strconv.FormatUint(n, 36), prefix+strconv.FormatUint(n, 10))
	}
	guesses = append(guesses, nuidNext(seen[len(prefix):], prefix)...)
	for _, g := range guesses {
		if g == inbox {
			t.Fatalf("the request's reply subject %s was guessed", inbox)
		}
		if err := forger.Publish(g, []byte("forged")); err != nil {
			t.Fatal(err)
		}
	}
	if err := forger.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the forged replies came before the PONG
		t.Fatal(err)
	}
	if err := forger.Publish(inbox, []byte("real")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-replies:
		if string(m.Data) != "real" {
			t.Fatalf("the request took a forged reply on %s", m.Subject)
		}
	case <-ctx.Done():
		t.Fatal("no reply")
	}
}

// nuidNext returns what could follow tok were it a NUID (22 base-62
// characters: a fixed 12-character prefix, then a sequence that grows by
// 33 to 332 a draw), under prefix: unique ids, not secret ones.
func nuidNext(tok, prefix string) []string {
	const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	if len(tok) != 22 {
		return nil
	}
	var seq int64
	for _, ch := range tok[12:] {
		seq = seq*62 + int64(strings.IndexRune(digits, ch))
	}
	var out []string
	for inc := int64(33); inc < 333; inc++ {
		b := []byte(tok)
		for i, l := len(b), seq+inc; i > 12; l /= 62 {
			i--
			b[i] = digits[l%62]
		}
		out = append(out, prefix+string(b))
	}
	return out
}

// stallProxy forwards TCP connections to a server. While stalled, what
// clients send waits in the proxy (the server's answers still flow) and
// held is signalled once something waits: a flush then hangs for as long
// as the test says.
type stallProxy struct {
	addr string
	held chan struct{}

	mu     sync.Mutex
	resume chan struct{} // nil: not stalled
}

func startStallProxy(t *testing.T, serverURL string) *stallProxy {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{addr: ln.Addr().String(), held: make(chan struct{}, 1)}
	var wg sync.WaitGroup
	var conns []net.Conn
	var connsMu sync.Mutex
	t.Cleanup(func() {
		_ = ln.Close()
		p.unstall()
		connsMu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		connsMu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			srv, err := net.Dial("tcp", u.Host)
			if err != nil {
				_ = client.Close()
				continue
			}
			connsMu.Lock()
			conns = append(conns, client, srv)
			connsMu.Unlock()
			wg.Go(func() { _, _ = io.Copy(client, srv); _ = client.Close() })
			wg.Go(func() {
				defer func() { _ = srv.Close() }()
				buf := make([]byte, 32<<10)
				for {
					n, err := client.Read(buf)
					if n > 0 {
						p.wait()
						if _, werr := srv.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	return p
}

func (p *stallProxy) stall() {
	p.mu.Lock()
	p.resume = make(chan struct{})
	p.mu.Unlock()
}

func (p *stallProxy) unstall() {
	p.mu.Lock()
	if p.resume != nil {
		close(p.resume)
		p.resume = nil
	}
	p.mu.Unlock()
}

// wait holds what a client sent while the proxy is stalled.
func (p *stallProxy) wait() {
	p.mu.Lock()
	r := p.resume
	p.mu.Unlock()
	if r == nil {
		return
	}
	select {
	case p.held <- struct{}{}:
	default:
	}
	<-r
}

// TestSubscribingBlocksNoReply: while a request makes the reply
// subscription and waits for the server to take it (a flush, a round trip
// that a slow link can make long), replies to requests waiting on an
// earlier subscription still reach them and those requests can end; a
// request that needs the new subscription waits for it instead of making
// one more, and both use it once the server took it.
func TestSubscribingBlocksNoReply(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	p := startStallProxy(t, srv.URL)
	nc := natstest.Connect(t, "nats://"+p.addr)
	direct := natstest.Connect(t, srv.URL)
	c, _ := New(nc)
	x := &c.replies
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, _, doneA, _, err := x.await(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	inboxB, repliesB, doneB, _, err := x.await(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	doneA(true) // silent: the next request subscribes anew; B keeps the old one
	if replySub(c) != nil {
		t.Fatal("a silent timeout left the subscription current")
	}

	type awaited struct {
		inbox string
		done  func(bool)
		err   error
	}
	results := make(chan awaited, 2)
	awaitBg := func() {
		inbox, _, done, _, err := x.await(ctx, c)
		results <- awaited{inbox, done, err}
	}
	p.stall()
	go awaitBg() // C subscribes; its flush waits in the proxy
	select {
	case <-p.held:
	case <-ctx.Done():
		t.Fatal("the new subscription never went out")
	}
	go awaitBg() // D needs the same subscription
	// D must be waiting in await (at the gate) before C's subscription
	// is taken, or D would only reuse it and prove nothing.
	buf := make([]byte, 1<<20)
	for n := 0; n < 2; {
		n = strings.Count(string(buf[:runtime.Stack(buf, true)]), "lanefleet.(*replyMux).await(")
		if ctx.Err() != nil {
			t.Fatalf("%d requests waiting in await, want C and D", n)
		}
		runtime.Gosched()
	}

	// B's reply comes (the server's side of the link flows) and B ends,
	// while C's flush still waits.
	if err := direct.Publish(inboxB, []byte("b")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-repliesB:
		if string(m.Data) != "b" {
			t.Fatalf("B's reply: %q", m.Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("B's reply waited for another request's subscription")
	}
	ended := make(chan struct{})
	go func() { doneB(false); close(ended) }()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("B's end waited for another request's subscription")
	}
	select {
	case r := <-results:
		t.Fatalf("a request got its inbox before the server took the subscription: %+v", r)
	default:
	}

	p.unstall()
	var prefixes []string
	for range 2 {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		defer r.done(false)
		prefixes = append(prefixes, r.inbox[:strings.LastIndexByte(r.inbox, '.')])
	}
	if prefixes[0] != prefixes[1] || nc.NumSubscriptions() != 1 {
		t.Fatalf("C and D under %q, %d subscriptions; want one shared subscription", prefixes, nc.NumSubscriptions())
	}
}

// TestCloseWhileSubscribing: Close does not wait for a reply subscription
// under way, and the request making it ends with nats.ErrConnectionClosed,
// leaving no subscription behind; a request after Close subscribes anew.
func TestCloseWhileSubscribing(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	p := startStallProxy(t, srv.URL)
	nc := natstest.Connect(t, "nats://"+p.addr)
	c, _ := New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p.stall()
	errs := make(chan error, 1)
	go func() {
		_, _, done, _, err := c.replies.await(ctx, c)
		if err == nil {
			done(false)
		}
		errs <- err
	}()
	select {
	case <-p.held:
	case <-ctx.Done():
		t.Fatal("the subscription never went out")
	}
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for a subscription under way")
	}
	p.unstall()
	if err := <-errs; !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("request across Close: %v, want nats.ErrConnectionClosed", err)
	}
	if n := nc.NumSubscriptions(); n != 0 {
		t.Fatalf("%d subscriptions after Close", n)
	}
	_, _, done, _, err := c.replies.await(ctx, c)
	if err != nil || replySub(c) == nil {
		t.Fatalf("request after Close: %v, subscription %v", err, replySub(c))
	}
	done(false)
}
