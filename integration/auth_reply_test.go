package integration

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/hooks"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
	"github.com/lanefleet/lanefleet/permission"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// logLines keeps a process's log lines and signals each one.
type logLines struct {
	mu    sync.Mutex
	lines []string
	more  chan struct{}
}

func newLogLines() *logLines { return &logLines{more: make(chan struct{}, 1)} }

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, string(p))
	l.mu.Unlock()
	select {
	case l.more <- struct{}{}:
	default:
	}
	return len(p), nil
}

// matching returns the lines containing every one of subs.
func (l *logLines) matching(subs ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
next:
	for _, line := range l.lines {
		for _, s := range subs {
			if !strings.Contains(line, s) {
				continue next
			}
		}
		out = append(out, line)
	}
	return out
}

// waitFor waits until at least n lines contain every one of subs.
func (l *logLines) waitFor(t *testing.T, n int, subs ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // detects a hang only
	defer cancel()
	for {
		if got := l.matching(subs...); len(got) >= n {
			return got
		}
		select {
		case <-l.more:
		case <-ctx.Done():
			t.Fatalf("%d log lines with %q, want %d", len(l.matching(subs...)), subs, n)
		}
	}
}

// TestHostileReplySubjects replays the re-test's confused-deputy proof on
// docs/security.md's deployment (a permissioned server, one user per role): a
// viewer and a sender request every lane service operation they may, and
// an admin every admin operation, remote tool and hook, each naming as its
// reply subject a JetStream API request that deletes or purges a fleet
// stream or the dispatch consumer, another session's lease key or another
// session's inbound subject. Nothing is answered (a watcher of those
// subjects sees nothing), nothing changes (every stream and the consumer
// are there with their messages, the other session's lane is free and
// runs its next message), and the serving process logs each refusal once.
func TestHostileReplySubjects(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	users := append(roleUsers(), permission.User{Grant: permission.Grant{Role: permission.HookServer, User: "hooks", Hooks: []string{"audit"}}})
	a := newAuthFleet(t, users, "")
	_, v := a.start(t)
	logs := newLogLines()

	toolServer := a.connectAs(t, "tools")
	tlog := zerologTo(t, logs)
	tsvc, err := remote.Serve(toolServer.nc, remote.ServiceConfig{Logger: tlog}, forecastTool{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tsvc.Stop() })
	hookServer := a.connectAs(t, "hooks")
	hsvc, err := hooks.Serve(hookServer.nc, hooks.ServeConfig{Logger: tlog}, hooks.Hook{Name: "audit",
		BeforeToolCall: func(context.Context, hooks.ToolCallEvent) (hooks.ToolCallResult, error) {
			return hooks.ToolCallResult{}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hsvc.Stop() })
	startMemberLog(t, a.url(), fleet.Config{WorkerID: "w1", User: "worker", Password: a.passwords["worker"],
		NoBuiltinTools: true, RemoteTools: []string{"forecast"}}, logs)

	alice, bob, auditor, root := a.connectAs(t, "alice"), a.connectAs(t, "bob"), a.connectAs(t, "auditor"), a.connectAs(t, "root")
	// Each session has a transcript and its lane's lease is free.
	for _, s := range []struct {
		c       *client
		session string
	}{{alice, "alice"}, {alice, "agent:main:alice"}, {bob, "bob"}} {
		sub := subscribeEvents(t, s.c, s.session)
		if evs := sub.run(t, sendRaw(t, s.c, s.session, events.Inbound{Text: "hi", Model: "scripted/echo"})); evs[len(evs)-1].Data.Result == nil {
			t.Fatalf("%s: no result", s.session)
		}
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // detects a hang only
	defer cancel()
	bobTok, _ := events.KeyToken("bob")
	targets := []string{"$JS.API.CONSUMER.DELETE." + events.InboundStream + ".dispatch",
		"$KV." + permission.LanesBucket + "." + bobTok + ".lease", events.InboundPrefix + bobTok}
	before := map[string]*jetstream.StreamInfo{}
	for _, s := range permission.FleetStreams() {
		targets = append(targets, "$JS.API.STREAM.DELETE."+s, "$JS.API.STREAM.PURGE."+s)
		st, err := root.js.Stream(ctx, s)
		if err != nil {
			t.Fatalf("stream %s: %v", s, err)
		}
		before[s] = st.CachedInfo()
	}
	// The watcher: anything published to a target is an answer.
	answered := make(chan *nats.Msg, 1024)
	for _, tgt := range targets {
		sub, err := root.nc.ChanSubscribe(tgt, answered)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := root.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	type request struct {
		who     *client
		subject string
		service string // the serving process's name for it, in its log
	}
	var reqs []request
	mainTok, _ := events.KeyToken("agent:main:alice")
	aliceTok, _ := events.KeyToken("alice")
	for _, op := range permission.ReadOps {
		reqs = append(reqs, request{auditor, sessionsvc.Prefix + mainTok + "." + op, "lane service"})
	}
	for _, op := range []string{sessionsvc.OpHistory, sessionsvc.OpImport, sessionsvc.OpEvents, sessionsvc.OpSettings, sessionsvc.OpBacklog, sessionsvc.OpRuns} {
		reqs = append(reqs, request{alice, sessionsvc.Prefix + aliceTok + "." + op, "lane service"})
	}
	for _, op := range []string{admin.OpSessions, admin.OpDeadList, admin.OpDeadShow, admin.OpDeadReplay, admin.OpDeadPurge, admin.OpAuthStatus, admin.OpAuthReset} {
		reqs = append(reqs, request{root, admin.Subject(op), "admin service"})
	}
	reqs = append(reqs, request{root, remote.Subject("forecast"), "remote tools"},
		request{root, hooks.Subject("audit", hooks.BeforeToolCall), "hooks"})
	for _, r := range reqs {
		for _, tgt := range targets {
			// An empty body: an error reply's empty body is a complete
			// JetStream API request.
			if err := r.who.nc.PublishMsg(&nats.Msg{Subject: r.subject, Reply: tgt}); err != nil {
				t.Fatal(err)
			}
		}
		if err := r.who.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	refusal := "refused a request whose reply subject is not an inbox"
	logs.waitFor(t, len(reqs)*len(targets), refusal)
	for _, r := range reqs {
		for _, tgt := range targets {
			if got := logs.matching(refusal, `"service":"`+r.service+`"`, `"subject":"`+r.subject+`"`, `"reply":"`+tgt+`"`); len(got) != 1 {
				t.Errorf("%s with reply %s: %d refusals logged, want 1", r.subject, tgt, len(got))
			}
		}
	}

	// The lane service still answers a request on an inbox.
	var hist sessionsvc.HistoryReply
	if err := requestLane(ctx, alice, sessionsvc.Prefix+aliceTok+"."+sessionsvc.OpHistory, &hist); err != nil {
		t.Fatalf("history on an inbox: %v", err)
	}
	if len(hist.Entries) == 0 {
		t.Errorf("alice's transcript is gone")
	}
	// Everything the services sent before the history answer has reached
	// the watcher by now: the worker's connection delivers in order, and
	// the tool and hook servers refused before sending anything.
	if err := root.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for len(answered) > 0 {
		// The worker's own writes of bob's lease (its last turn's owner
		// may still hold or release it) carry JetStream's write
		// expectations or a KV operation; an answer carries none.
		if m := <-answered; !ownWrite(m) {
			t.Fatalf("something was answered on %s (%d bytes, headers %v)", m.Subject, len(m.Data), m.Header)
		}
	}
	for _, s := range permission.FleetStreams() {
		st, err := root.js.Stream(ctx, s)
		if err != nil {
			t.Fatalf("stream %s after the requests: %v", s, err)
		}
		// Deleted and made anew, it would be younger; purged, it would
		// be empty (but the inbound stream, whose processed messages
		// the worker deletes, and the runs bucket, whose entries go
		// when their runs end).
		was, now := before[s], st.CachedInfo()
		if !now.Created.Equal(was.Created) {
			t.Errorf("stream %s was made anew at %v (was %v)", s, now.Created, was.Created)
		}
		if s != events.InboundStream && s != "KV_"+permission.RunsBucket && was.State.Msgs > 0 && now.State.Msgs == 0 {
			t.Errorf("stream %s is empty (had %d messages)", s, was.State.Msgs)
		}
	}
	if _, err := root.js.Consumer(ctx, events.InboundStream, "dispatch"); err != nil {
		t.Errorf("the dispatch consumer: %v", err)
	}
	lanesKV, err := root.js.KeyValue(ctx, permission.LanesBucket)
	if err != nil {
		t.Fatal(err)
	}
	if e, err := lanesKV.Get(ctx, bobTok+".lease"); err == nil && !strings.Contains(string(e.Value()), "w1") {
		t.Errorf("bob's lane has a lease no worker took: %q", e.Value())
	}
	sub := subscribeEvents(t, bob, "bob")
	if evs := sub.run(t, sendRaw(t, bob, "bob", events.Inbound{Text: "still there?", Model: "scripted/echo"})); evs[len(evs)-1].Data.Result == nil {
		t.Fatal("bob's next message did not run")
	}
	if vs := v.list(); len(vs) > 0 {
		t.Errorf("the server logged permission violations:\n%s", strings.Join(vs, "\n"))
	}
	// The micro control subjects, which the NATS library answers itself,
	// are out of a sender's and a viewer's reach.
	for _, c := range []*client{alice, auditor} {
		for _, subj := range []string{"$SRV.PING", "$SRV.INFO." + sessionsvc.Name, "$SRV.STATS." + admin.Name} {
			if err := c.nc.PublishMsg(&nats.Msg{Subject: subj, Reply: "$JS.API.STREAM.DELETE." + events.InboundStream}); err != nil {
				t.Fatal(err)
			}
			c.denied(t, "control request", subj)
		}
	}
}

// ownWrite reports a KV write of the worker's own: a lease created,
// renewed or released under JetStream's expectations.
func ownWrite(m *nats.Msg) bool {
	for k := range m.Header {
		if strings.HasPrefix(k, "Nats-Expected") || k == "KV-Operation" || k == "Nats-TTL" {
			return true
		}
	}
	return false
}

// requestLane makes one lane service request on the client's inbox and
// decodes its msgpack reply.
func requestLane(ctx context.Context, c *client, subject string, out any) error {
	msg, err := c.nc.RequestWithContext(ctx, subject, nil)
	if err != nil {
		return err
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return &sessionsvc.Error{Code: code, Description: msg.Header.Get(micro.ErrorHeader)}
	}
	return msgpack.Unmarshal(msg.Data, out)
}

// zerologTo is a logger of warnings to the test's log and w.
func zerologTo(t *testing.T, w io.Writer) zerolog.Logger {
	return zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), w)).Level(zerolog.WarnLevel)
}
