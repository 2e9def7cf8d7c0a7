package lanefleet

import (
	"context"
	"errors"
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
