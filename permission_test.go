package lanefleet

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// startUsersServer starts a JetStream server whose users are a worker
// (everything) and senders limited to their own session's subjects, as
// the sender role grants them: publish to its lane's inbound and service
// subjects, subscribe to its lane's events and its own inbox prefix.
func startUsersServer(t *testing.T, senders ...string) (url string) {
	t.Helper()
	var users []*server.User
	for _, s := range senders {
		users = append(users, &server.User{Username: s, Password: s, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{"agent.in." + s, "agent.svc." + s + ".>"}},
			Subscribe: &server.SubjectPermission{Allow: []string{"agent.ev." + s + ".>", "_INBOX_" + s + ".>"}},
		}})
	}
	return startServerWithUsers(t, users...)
}

// startServerWithUsers starts a JetStream server with a worker user (all
// permissions) and the given ones.
func startServerWithUsers(t *testing.T, more ...*server.User) (url string) {
	t.Helper()
	users := append([]*server.User{{Username: "worker", Password: "w"}}, more...)
	opts := &server.Options{ServerName: "users", Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(), Users: users}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s.ClientURL()
}

// TestSenderNeedsOnlyItsSessionsSubjects: a client whose user may use only
// its own session's subjects sends, follows, reads and imports its session
// (no JetStream API, no bucket), and gets ErrPermission, at once, for
// another session and for the runs list.
func TestSenderNeedsOnlyItsSessionsSubjects(t *testing.T) {
	t.Parallel()
	url := startUsersServer(t, "alice", "bob")
	startMember(t, strings.Replace(url, "nats://", "nats://worker:w@", 1))
	alice, err := Connect(url, nats.UserInfo("alice", "alice"), nats.CustomInboxPrefix("_INBOX_alice"))
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	file := `{"type":"session","version":3,"id":"alice-session","timestamp":"2026-01-01T00:00:00.000Z","cwd":"/"}
{"type":"message","id":"a1","parentId":null,"timestamp":"2026-01-01T00:00:00.000Z","message":{"role":"user","content":"earlier","timestamp":1}}
`
	if err := alice.Import(ctx, "alice", strings.NewReader(file)); err != nil {
		t.Fatal(err)
	}
	if err := alice.Import(ctx, "alice", strings.NewReader(file)); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("second import: %v", err)
	}
	run, err := alice.Send(ctx, "alice", "hello")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ev, err := range run.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		_ = ev
	}
	if res, err := run.Wait(ctx); err != nil || res.Payloads[0].Text != "echo: hello" || n < 3 {
		t.Fatalf("wait: %+v, %v after %d events", res, err, n)
	}
	hist, err := alice.History(ctx, "alice")
	if err != nil || len(hist) != 3 || hist[0].ID != "a1" {
		t.Fatalf("history: %d entries, %v", len(hist), err)
	}
	var export strings.Builder
	if err := alice.Export(ctx, "alice", &export); err != nil || !strings.Contains(export.String(), `"id":"alice-session"`) {
		t.Fatalf("export: %v\n%s", err, export.String())
	}
	if _, err := alice.QueueSettings(ctx, "alice"); err != nil {
		t.Fatal(err)
	}

	// Bob's session, and the fleet-wide list, are not alice's to see.
	bob := alice.Run("bob", run.ID)
	denied := []struct {
		what string
		do   func(context.Context) error
	}{
		{"history", func(ctx context.Context) error { _, err := alice.History(ctx, "bob"); return err }},
		{"settings", func(ctx context.Context) error { _, err := alice.QueueSettings(ctx, "bob"); return err }},
		{"import", func(ctx context.Context) error { return alice.Import(ctx, "bob", strings.NewReader(file)) }},
		{"send", func(ctx context.Context) error { _, err := alice.Send(ctx, "bob", "hi"); return err }},
		{"follow", func(ctx context.Context) error { _, err := bob.Wait(ctx); return err }},
		{"runs", func(ctx context.Context) error { _, err := alice.ActiveRuns(ctx); return err }},
	}
	for _, d := range denied {
		// Refused at once, not after a timeout: well within the client's
		// own call timeout (15s), with room for a busy box.
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := d.do(dctx)
		cancel()
		if !errors.Is(err, ErrPermission) {
			t.Fatalf("%s of bob: %v, want ErrPermission", d.what, err)
		}
		t.Log(err)
	}
}

// TestSendRemembersARefusedLane: a user who may send to a session but not
// subscribe to its events can still Send; the client asks for the lane's
// subscription once, and later sends do not ask again (each refusal is a
// permission violation on the connection and in the server's log).
func TestSendRemembersARefusedLane(t *testing.T) {
	t.Parallel()
	url := startServerWithUsers(t, &server.User{Username: "carol", Password: "carol", Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"agent.in.carol"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX_carol.>"}},
	}})
	startMember(t, strings.Replace(url, "nats://", "nats://worker:w@", 1))
	var mu sync.Mutex
	refusals, sentinel := 0, make(chan struct{}, 1)
	carol, err := Connect(url, nats.UserInfo("carol", "carol"), nats.CustomInboxPrefix("_INBOX_carol"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case strings.Contains(err.Error(), "Subscription to"):
				refusals++
			case strings.Contains(err.Error(), "Publish to \"sentinel\""):
				sentinel <- struct{}{}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer carol.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for range 3 {
		if _, err := carol.Send(ctx, "carol", "hello"); err != nil {
			t.Fatal(err)
		}
	}
	// Errors reach the handler in order: once the sentinel's has, every
	// refusal of the sends has too.
	if err := carol.nc.Publish("sentinel", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sentinel:
	case <-ctx.Done():
		t.Fatal("the sentinel's violation never came")
	}
	mu.Lock()
	defer mu.Unlock()
	if refusals != 1 {
		t.Fatalf("three sends asked for the refused subscription %d times, want once", refusals)
	}
	// Following a run of the refused lane says so, without asking again.
	run, err := carol.Send(ctx, "carol", "again")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Wait(ctx); !errors.Is(err, ErrPermission) {
		t.Fatalf("following a run of a refused lane: %v, want ErrPermission", err)
	}
}

// TestRefusedReplySubscription: a user who may not subscribe to the
// client's inbox gets ErrPermission at once from every request: from the
// first, which finds the reply subscription refused, and from the later
// ones, which subscribe an inbox of their own.
func TestRefusedReplySubscription(t *testing.T) {
	t.Parallel()
	url := startServerWithUsers(t, &server.User{Username: "dave", Password: "dave", Permissions: &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"agent.in.dave"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"agent.ev.dave.>"}},
	}})
	dave, err := Connect(url, nats.UserInfo("dave", "dave"))
	if err != nil {
		t.Fatal(err)
	}
	defer dave.Close()
	for i := range 3 {
		// Well within the client's call timeout (15s): refused, not timed out.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err := dave.Send(ctx, "dave", "hello", WithoutFollow())
		cancel()
		if !errors.Is(err, ErrPermission) || !strings.Contains(err.Error(), "nothing was sent") || !strings.Contains(err.Error(), "must allow _INBOX_dave.>") {
			t.Fatalf("send %d: %v, want ErrPermission saying nothing was sent and which prefix to use", i, err)
		}
	}
	if !dave.replies.refused {
		t.Fatal("the refused reply subscription is not remembered")
	}
}

// TestConnectDerivesTheInboxPrefix: a client that authenticates with a user
// and password (options or URL) and sets no inbox prefix uses the user's,
// _INBOX_<user>, which the sender role grants: sends and reads work (every
// request was refused: the server denied the default _INBOX).
func TestConnectDerivesTheInboxPrefix(t *testing.T) {
	t.Parallel()
	url := startUsersServer(t, "alice")
	startMember(t, strings.Replace(url, "nats://", "nats://worker:w@", 1))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for name, connect := range map[string]func() (*Client, error){
		"options": func() (*Client, error) { return Connect(url, nats.UserInfo("alice", "alice")) },
		"url":     func() (*Client, error) { return Connect(strings.Replace(url, "nats://", "nats://alice:alice@", 1)) },
	} {
		c, err := connect()
		if err != nil {
			t.Fatal(err)
		}
		run, err := c.Send(ctx, "alice", "hello "+name)
		if err != nil {
			c.Close()
			t.Fatalf("%s: send: %v", name, err)
		}
		res, err := run.Wait(ctx)
		if err != nil || res.Payloads[0].Text != "echo: hello "+name {
			t.Fatalf("%s: %+v, %v", name, res, err)
		}
		if _, err := c.History(ctx, "alice"); err != nil {
			t.Fatalf("%s: history: %v", name, err)
		}
		c.Close()
	}
}

// TestWorkersIsAdminOnly: Client.Workers gathers every worker's stats as
// a user with every permission (the admin role), and is refused, at once,
// to a sender (micro's STATS of the admin service is admin-only).
func TestWorkersIsAdminOnly(t *testing.T) {
	t.Parallel()
	url := startUsersServer(t, "alice")
	startMember(t, strings.Replace(url, "nats://", "nats://worker:w@", 1))
	admin, err := Connect(url, nats.UserInfo("worker", "w"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		ws, err := admin.Workers(ctx, WorkersQuery{Expect: 1})
		if err == nil && len(ws) == 1 && ws[0].Worker != "" && ws[0].SlotsTotal > 0 && ws[0].Version != "" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("workers %+v %v", ws, err)
		case <-time.After(50 * time.Millisecond): // the worker's admin service starts
		}
	}
	// Each answer comes once. The connection's request mux (made by its
	// first request) subscribes to a wildcard under the response inbox
	// prefix: an inbox of Workers' own under it got every answer twice.
	_, _ = admin.nc.RequestWithContext(ctx, "lanefleet.test.nobody", nil)
	in0 := admin.nc.Stats().InMsgs
	if ws, err := admin.Workers(ctx, WorkersQuery{Expect: 1}); err != nil || len(ws) != 1 {
		t.Fatalf("workers %+v %v", ws, err)
	}
	if err := admin.nc.FlushWithContext(ctx); err != nil { // a copy would come before the pong
		t.Fatal(err)
	}
	if in := admin.nc.Stats().InMsgs - in0; in != 1 {
		t.Fatalf("one worker's answer came in %d messages", in)
	}
	alice, err := Connect(url, nats.UserInfo("alice", "alice"))
	if err != nil {
		t.Fatal(err)
	}
	defer alice.Close()
	start := time.Now()
	if ws, err := alice.Workers(ctx, WorkersQuery{Wait: 30 * time.Second}); !errors.Is(err, ErrPermission) || ws != nil {
		t.Fatalf("a sender: %+v %v", ws, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the refusal took %v", d)
	}
}
