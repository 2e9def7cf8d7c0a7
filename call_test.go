package lanefleet

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/lanes/service"
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
	if _, err := nc.Subscribe(service.Subject(tok, op), func(*nats.Msg) {
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
	asked := silentResponder(t, srv.URL, "closing", service.OpEvents)
	nc := natstest.Connect(t, srv.URL)
	c, _ := New(nc)
	// Well under callTimeout: a request that waits out its timeout fails
	// the test with the context's error.
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout/2)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.call(ctx, "closing", service.OpEvents, nil, nil) }()
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
	subj := service.Subject(tok, service.OpSettings)
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
	_, _, doneA, err := x.await(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	inboxB, repliesB, doneB, err := x.await(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	first := replySub(c)
	doneA(true) // A's deadline passed, nothing came
	if replySub(c) != nil || nc.NumSubscriptions() != 1 {
		t.Fatalf("after a silent timeout: current %p, %d subscriptions; want none current, 1 kept for B", replySub(c), nc.NumSubscriptions())
	}
	inboxC, repliesC, doneC, err := x.await(ctx, c) // subscribes anew
	if err != nil {
		t.Fatal(err)
	}
	if replySub(c) == nil || replySub(c) == first {
		t.Fatal("the request after the drop did not subscribe anew")
	}
	_, _, doneD, err := x.await(ctx, c)
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
	seen, _, doneSeen, err := c.replies.await(ctx, c) // a request whose subject the forger saw
	if err != nil {
		t.Fatal(err)
	}
	doneSeen(false)
	inbox, replies, done, err := c.replies.await(ctx, c)
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
