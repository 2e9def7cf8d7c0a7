package reply_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/internal/reply"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		subject string
		ok      bool
	}{
		{"_INBOX.abc", true},                                 // nats.go's default prefix
		{"_INBOX.abc.def", true},                             // the muxed form: prefix, nuid, token
		{"_INBOX_alice.x.y", true},                           // the per-user prefix of the permission model
		{"_INBOX_worker-1.n", true},                          // user names carry '-' and '_'
		{"", false},                                          // Handler treats "no reply" on its own
		{"_INBOX", false},                                    // no token after the prefix
		{"_INBOX.", false},                                   // empty token
		{"_INBOX_.x", false},                                 // a user prefix without a user
		{"_INBOX_alice", false},                              // the prefix alone
		{"_INBOX..x", false},                                 // empty token
		{"_INBOX.x.", false},                                 // trailing dot
		{"_INBOX.*", false},                                  // wildcards are never a reply
		{"_INBOX.>", false},                                  //
		{"_INBOX.a b", false},                                // whitespace
		{"_INBOX.a\x00b", false},                             // control bytes
		{"_INBOXES.x", false},                                // not the prefix
		{"_inbox.x", false},                                  // subjects are case-sensitive
		{"$JS.API.STREAM.DELETE.AGENT_IN", false},            // the attack of the re-test
		{"$JS.API.STREAM.PURGE.KV_lanes", false},             //
		{"$KV.lanes.lease.abc", false},                       //
		{"agent.in.other", false},                            //
		{"$JS.API.CONSUMER.DELETE.AGENT_IN.dispatch", false}, //
		{"x._INBOX.y", false},                                // an inbox token later in a subject
		{"_INBOX." + strings.Repeat("a", reply.MaxSubject), false}, // too long
	}
	for _, tt := range tests {
		err := reply.Check(tt.subject)
		if (err == nil) != tt.ok {
			t.Errorf("Check(%q) = %v, want ok=%v", tt.subject, err, tt.ok)
		}
		if err != nil && !errors.Is(err, reply.ErrNotInbox) {
			t.Errorf("Check(%q) = %v, not ErrNotInbox", tt.subject, err)
		}
	}
}

// FuzzCheck: whatever Check accepts starts with an inbox prefix, has no
// wildcard or empty token and is bounded.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"_INBOX.a", "_INBOX_u.a.b", "$JS.API.STREAM.DELETE.X", "_INBOX.*", "_INBOX_.a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if reply.Check(s) != nil {
			return
		}
		if !strings.HasPrefix(s, "_INBOX.") && !strings.HasPrefix(s, "_INBOX_") {
			t.Fatalf("accepted %q: not an inbox", s)
		}
		if len(s) > reply.MaxSubject {
			t.Fatalf("accepted %d bytes", len(s))
		}
		for _, tok := range strings.Split(s, ".") {
			if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
				t.Fatalf("accepted %q: token %q", s, tok)
			}
		}
	})
}

// TestGuard drives a real micro endpoint through a Guard: an inbox request
// is handled and answered, a publish without a reply is handled and not
// answered, and a request naming any other reply subject is neither
// handled nor answered (nothing at all reaches that subject) and is
// logged once.
func TestGuard(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	logs := &syncWriter{w: &bytes.Buffer{}}
	g := &reply.Guard{NC: nc, Log: zerolog.New(logs), Service: "test service"}
	var handled atomic.Int64
	done := make(chan struct{}, 16)
	svc, err := micro.AddService(nc, micro.Config{Name: "guarded", Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	err = svc.AddEndpoint("echo", g.Handler("echo", func(req *reply.Request) {
		handled.Add(1)
		if err := g.Send(req.To, &nats.Msg{Data: append([]byte("echo "), req.Data...)}); err != nil {
			t.Error(err)
		}
		done <- struct{}{}
	}), micro.WithEndpointSubject("svc.echo"))
	if err != nil {
		t.Fatal(err)
	}

	// The endpoint's subscription is on the server before any request:
	// the spy below also listens on svc.echo, so a request sent too soon
	// gets no "no responders" answer, only a timeout.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// A watcher of every subject but the inbox of its own connection.
	spy := natstest.Connect(t, srv.URL)
	seen := make(chan *nats.Msg, 64)
	sub, err := spy.ChanSubscribe(">", seen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}

	client := natstest.Connect(t, srv.URL)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	msg, err := client.RequestWithContext(ctx, "svc.echo", []byte("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if string(msg.Data) != "echo hi" {
		t.Fatalf("reply = %q", msg.Data)
	}

	hostile := []string{"$JS.API.STREAM.DELETE.AGENT_IN", "$KV.lanes.lease.x", "agent.in.other", "_INBOX.*"}
	for _, to := range hostile {
		if err := client.PublishMsg(&nats.Msg{Subject: "svc.echo", Reply: to, Data: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	// A plain publish runs the handler (nothing to answer); once it ran,
	// the hostile requests sent before it on the same connection were
	// taken (micro handles an endpoint's requests in order).
	if err := client.Publish("svc.echo", []byte("last")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-done:
		case <-ctx.Done():
			t.Fatal("the handler did not run")
		}
	}
	if n := handled.Load(); n != 2 {
		t.Errorf("handled %d requests, want 2 (the inbox request and the plain publish)", n)
	}
	if n := g.Refused(); n != int64(len(hostile)) {
		t.Errorf("refused %d, want %d", n, len(hostile))
	}
	// Flush the spy's view: everything published so far has reached it.
	if err := client.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	for len(seen) > 0 {
		m := <-seen
		for _, to := range hostile {
			if m.Subject == to {
				t.Errorf("something was sent to %s: %q", to, m.Data)
			}
		}
	}
	out := logs.String()
	for _, to := range hostile {
		if strings.Count(out, `"reply":"`+to+`"`) != 1 {
			t.Errorf("the log does not name the refused reply %s once:\n%s", to, out)
		}
	}
}

// TestMsgHandler: a core subscription's requests are checked the same
// way: an inbox is answered, a fleet subject named as the reply gets
// nothing and is logged.
func TestMsgHandler(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	logs := &syncWriter{w: &bytes.Buffer{}}
	g := &reply.Guard{NC: nc, Log: zerolog.New(logs), Service: "liveness"}
	handled := make(chan string, 8)
	sub, err := nc.Subscribe("agent.alive.x", g.MsgHandler("alive", func(r *reply.Request) {
		handled <- string(r.Data)
		_ = g.Send(r.To, &nats.Msg{Data: []byte("here")})
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	spy := natstest.Connect(t, srv.URL)
	seen := make(chan *nats.Msg, 8)
	ssub, err := spy.ChanSubscribe("$JS.API.>", seen)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ssub.Unsubscribe() })
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	client := natstest.Connect(t, srv.URL)
	if err := client.PublishMsg(&nats.Msg{Subject: "agent.alive.x", Reply: "$JS.API.STREAM.DELETE.AGENT_IN", Data: []byte("hostile")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// Requests on one subscription are handled in order: once the inbox
	// request is answered, the hostile one before it was taken.
	msg, err := client.RequestWithContext(ctx, "agent.alive.x", []byte("probe"))
	if err != nil || string(msg.Data) != "here" {
		t.Fatalf("probe: %v %v", msg, err)
	}
	if got := <-handled; got != "probe" {
		t.Fatalf("the handler ran for %q", got)
	}
	if n := g.Refused(); n != 1 {
		t.Errorf("refused %d, want 1", n)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(seen) > 0 {
		t.Errorf("something was sent to %s", (<-seen).Subject)
	}
}

// TestSendWithoutHandler: a zero To sends nothing.
func TestSendWithoutHandler(t *testing.T) {
	t.Parallel()
	g := &reply.Guard{}
	if err := g.Send(reply.To{}, &nats.Msg{Data: []byte("x")}); err != nil {
		t.Errorf("Send(zero To) = %v", err)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}
