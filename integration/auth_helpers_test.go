package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/permission"
)

// authFleet is a nats-server configuration with one user per role, each
// with the permissions `worker permissions` prints and a random password.
type authFleet struct {
	users     []permission.User
	passwords map[string]string
	file      string // the configuration file
	port      int
}

// newAuthFleet writes a configuration file for users (plus extra
// configuration, e.g. a tls block) listening on a free port, with the
// JetStream store in a temp directory.
func newAuthFleet(t *testing.T, users []permission.User, extra string) *authFleet {
	t.Helper()
	ports, err := embedded.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	a := &authFleet{users: users, passwords: map[string]string{}, port: ports[0]}
	var conf bytes.Buffer
	for _, u := range users {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		a.passwords[u.User] = "pw-" + hex.EncodeToString(b)
		// The passwords are variables of the file; the rendered users
		// refer to them.
		fmt.Fprintf(&conf, "%s: %q\n", permission.PasswordVar(u.User), a.passwords[u.User])
	}
	dir := t.TempDir()
	fmt.Fprintf(&conf, "port: %d\njetstream { store_dir: %q }\n%s\n", a.port, filepath.Join(dir, "jetstream"), extra)
	if err := permission.Render(&conf, permission.FormatAuthorization, users...); err != nil {
		t.Fatal(err)
	}
	a.file = filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(a.file, conf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return a
}

// start runs the configuration in-process, with every violation the
// server logs collected.
func (a *authFleet) start(t *testing.T) (*server.Server, *violations) {
	t.Helper()
	opts, err := embedded.Options(embedded.Config{ConfigFile: a.file, SyncAlways: new(bool)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := embedded.StartOptions(opts)
	if err != nil {
		t.Fatal(err)
	}
	v := &violations{t: t}
	s.SetLoggerV2(v, false, false, false)
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s, v
}

func (a *authFleet) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", a.port) }

// client is a connection of one user with the asynchronous errors the
// server sent it (permission violations).
type client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	errs chan error
}

// connectAs connects as user with its own inbox prefix.
func (a *authFleet) connectAs(t *testing.T, user string, opts ...nats.Option) *client {
	t.Helper()
	c := &client{errs: make(chan error, 64)}
	opts = append([]nats.Option{
		nats.UserInfo(user, a.passwords[user]),
		nats.CustomInboxPrefix(permission.InboxPrefix(user)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}),
	}, opts...)
	nc, err := nats.Connect(a.url(), opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	c.js = newJS(t, nc)
	return c
}

// denied waits for the server's permission violation naming subject.
func (c *client) denied(t *testing.T, what, subject string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // detects a hang only
	defer cancel()
	for {
		select {
		case err := <-c.errs:
			if strings.Contains(err.Error(), "Permissions Violation") && strings.Contains(err.Error(), `"`+subject+`"`) {
				return
			}
			t.Logf("%s: other error while waiting: %v", what, err)
		case <-ctx.Done():
			t.Fatalf("%s: no permission violation for %s", what, subject)
		}
	}
}

// violations is a server logger keeping the permission violations.
type violations struct {
	t    *testing.T
	mu   sync.Mutex
	seen []string
}

func (v *violations) note(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	if strings.Contains(line, "Violation") {
		v.mu.Lock()
		v.seen = append(v.seen, line)
		v.mu.Unlock()
	}
}

func (v *violations) Noticef(string, ...any)            {}
func (v *violations) Debugf(string, ...any)             {}
func (v *violations) Tracef(string, ...any)             {}
func (v *violations) Warnf(format string, args ...any)  { v.note(format, args...) }
func (v *violations) Errorf(format string, args ...any) { v.note(format, args...) }
func (v *violations) Fatalf(format string, args ...any) { v.note(format, args...) }

func (v *violations) list() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.seen...)
}

// sendRaw publishes an inbound message as JSON and returns its run id.
func sendRaw(t *testing.T, c *client, session string, in events.Inbound) string {
	t.Helper()
	subj, err := events.InboundSubject(session)
	if err != nil {
		t.Fatal(err)
	}
	data, ct, _ := events.EncodeInbound(&in, true)
	m := nats.NewMsg(subj)
	m.Data = data
	m.Header.Set(events.HeaderContentType, ct)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ack, err := c.js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatalf("send to %s: %v", session, err)
	}
	return fmt.Sprint(ack.Sequence)
}

// eventSub is a core subscription to a session's events, as a sender
// following live has: made before sending, so no event is missed.
type eventSub struct {
	prefix string
	ch     chan *nats.Msg
}

func subscribeEvents(t *testing.T, c *client, session string) *eventSub {
	t.Helper()
	tok, err := events.KeyToken(session)
	if err != nil {
		t.Fatal(err)
	}
	e := &eventSub{prefix: events.EventPrefix + tok + ".", ch: make(chan *nats.Msg, 4096)}
	sub, err := c.nc.ChanSubscribe(e.prefix+">", e.ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := c.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return e
}

// run returns a run's events up to its final one.
func (e *eventSub) run(t *testing.T, run string) []*events.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var evs []*events.Event
	for {
		select {
		case m := <-e.ch:
			if m.Subject != e.prefix+run {
				continue
			}
			ev, err := events.DecodeEvent(m.Header.Get(events.HeaderContentType), m.Data)
			if err != nil {
				t.Fatalf("event on %s: %v", m.Subject, err)
			}
			evs = append(evs, ev)
			if ev.Terminal() {
				return evs
			}
		case <-ctx.Done():
			t.Fatalf("run %s: no final event; got %d events", run, len(evs))
		}
	}
}
