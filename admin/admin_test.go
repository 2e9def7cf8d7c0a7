package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/rs/zerolog"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
	"github.com/lanefleet/lanefleet/permission"
)

// bundle is an admin service on a real JetStream server with the fleet's
// streams and run registry.
type bundle struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	streams *lanes.Streams
	runs    *kvstore.Runs
	ctx     context.Context
	svc     *admin.Service
}

func setup(t *testing.T, auth admin.AuthBook) *bundle {
	t.Helper()
	b := stores(t, 60*time.Second)
	cfg := b.config(t)
	cfg.Auth = auth
	svc, err := admin.Serve(b.nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	b.svc = svc
	return b
}

// stores is setup without an admin service (a test serves its own): a
// server, the fleet's streams and its run registry, and a context of
// timeout for the test.
func stores(t *testing.T, timeout time.Duration) *bundle {
	t.Helper()
	srv := natstest.Start(t)
	js := natstest.JetStream(t, srv.URL)
	nc := js.Conn()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	streams, err := lanes.EnsureStreams(ctx, js, lanes.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	runs, err := kvstore.OpenRuns(ctx, js, kvstore.RunsConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{nc: nc, js: js, streams: streams, runs: runs, ctx: ctx}
}

// config is the configuration of an admin service on the bundle's
// connection, streams and registry.
func (b *bundle) config(t *testing.T) admin.Config {
	return admin.Config{JS: b.js, Inbound: b.streams.Inbound, Events: b.streams.Events, Dead: b.streams.Dead, Runs: b.runs,
		Worker: "w-1", Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}
}

// request asks op with body (a JSON-encodable value or raw bytes) and
// decodes the reply into v, or returns the service's error.
func (b *bundle) request(t *testing.T, op string, body, v any) *sessionsvc.Error {
	t.Helper()
	var data []byte
	switch x := body.(type) {
	case nil:
	case string:
		data = []byte(x)
	default:
		data, _ = json.Marshal(body)
	}
	msg, err := b.nc.RequestWithContext(b.ctx, admin.Subject(op), data)
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return &sessionsvc.Error{Code: code, Description: msg.Header.Get(micro.ErrorHeader)}
	}
	if err := msgpack.Unmarshal(msg.Data, v); err != nil {
		t.Fatalf("%s: decode: %v", op, err)
	}
	return nil
}

// deadLetter stores a dead letter as a worker does.
func (b *bundle) deadLetter(t *testing.T, reason, subject string, inboundSeq uint64, data string) uint64 {
	t.Helper()
	m := nats.NewMsg(events.DeadPrefix + reason)
	m.Data = []byte(data)
	m.Header.Set(events.HeaderContentType, events.ContentJSON)
	m.Header.Set(events.HeaderError, "why "+reason)
	m.Header.Set(events.HeaderSubject, subject)
	m.Header.Set(events.HeaderSeq, fmt.Sprint(inboundSeq))
	ack, err := b.js.PublishMsg(b.ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// TestSessions: sessions with events, waiting messages or a running run
// are listed newest first, with their key, fingerprint, counts and the
// running run; the limit bounds the list, not the total.
func TestSessions(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	publish := func(subj string) uint64 {
		ack, err := b.js.Publish(b.ctx, subj, []byte(`{"text":"hi"}`))
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	// Run ids are inbound sequences. "old": two runs whose messages were
	// processed and purged; "a.b key": one; "busy": running now; "waits":
	// a message and no event yet.
	run := func(tok string) uint64 {
		seq := publish(events.InboundPrefix + tok)
		publish(fmt.Sprintf("%s%s.%d", events.EventPrefix, tok, seq))
		return seq
	}
	run("old")
	old := run("old")
	odd, _ := events.KeyToken("a.b key")
	oddRun := run(odd)
	busy := publish(events.InboundPrefix + "busy")
	if _, err := b.runs.Register(b.ctx, "busy", kvstore.RunInfo{Session: "busy", RunID: fmt.Sprint(busy), Worker: "w-9", StartedAt: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"old", odd} {
		if err := b.streams.Inbound.Purge(b.ctx, jetstream.WithPurgeSubject(events.InboundPrefix+tok)); err != nil {
			t.Fatal(err)
		}
	}
	waits := publish(events.InboundPrefix + "waits")
	publish(events.InboundPrefix + "a.b") // no lane: not listed

	var rep admin.SessionsReply
	if err := b.request(t, admin.OpSessions, nil, &rep); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range rep.Sessions {
		got = append(got, fmt.Sprintf("%s run=%s runs=%d stored=%d running=%s@%s", s.Key, s.LastRun, s.Runs, s.Stored, s.Running, s.Worker))
		if s.Fingerprint != events.Fingerprint(s.Key) {
			t.Errorf("%s: fingerprint %q", s.Key, s.Fingerprint)
		}
	}
	want := []string{
		fmt.Sprintf("waits run=%d runs=0 stored=1 running=@", waits),
		fmt.Sprintf("busy run=%d runs=0 stored=1 running=%d@w-9", busy, busy),
		fmt.Sprintf("a.b key run=%d runs=1 stored=0 running=@", oddRun),
		fmt.Sprintf("old run=%d runs=2 stored=0 running=@", old),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") || rep.Total != 4 {
		t.Fatalf("sessions (total %d):\n%s\nwant\n%s", rep.Total, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if rep.Sessions[0].LastActivity == 0 || rep.Sessions[3].LastActivity == 0 {
		t.Fatalf("activity times missing: %+v", rep.Sessions)
	}
	rep = admin.SessionsReply{}
	if err := b.request(t, admin.OpSessions, admin.SessionsRequest{Limit: 1}, &rep); err != nil || len(rep.Sessions) != 1 || rep.Total != 4 {
		t.Fatalf("limit 1: %+v, %v", rep, err)
	}
}

// TestDeadLetters: list pages through the dead letters without their data
// (by reason too); show returns one with its data; replay publishes a
// lane's dead letter again as a new run and deletes it, once even when
// asked twice, and skips one whose subject is no lane's; purge deletes.
func TestDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	big := strings.Repeat("x", 100<<10)
	poison := b.deadLetter(t, "poison", "agent.in.alice", 3, `{"text":"boom"}`)
	invalid := b.deadLetter(t, "invalid", "agent.in.bob", 4, big)
	badLane := b.deadLetter(t, "bad-lane", "agent.in.a.b", 5, `{"text":"lost"}`)

	var page admin.DeadListReply
	if err := b.request(t, admin.OpDeadList, admin.DeadListRequest{Limit: 2}, &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Letters) != 2 || !page.More || page.Next != invalid || page.Letters[0].Seq != poison {
		t.Fatalf("first page: %+v", page)
	}
	l := page.Letters[1]
	if l.Reason != "invalid" || l.Session != "bob" || l.Fingerprint != events.Fingerprint("bob") || l.InboundSeq != 4 || l.Error != "why invalid" ||
		l.Size != len(big) || l.Data != nil || l.Subject != "agent.in.bob" || l.Time == 0 {
		t.Fatalf("listed letter: %+v", l)
	}
	next := page.Next
	page = admin.DeadListReply{}
	if err := b.request(t, admin.OpDeadList, admin.DeadListRequest{After: next}, &page); err != nil || len(page.Letters) != 1 || page.More || page.Letters[0].Seq != badLane {
		t.Fatalf("second page: %+v, %v", page, err)
	}
	page = admin.DeadListReply{}
	if err := b.request(t, admin.OpDeadList, admin.DeadListRequest{Reason: "poison"}, &page); err != nil || len(page.Letters) != 1 || page.Letters[0].Seq != poison {
		t.Fatalf("by reason: %+v, %v", page, err)
	}

	var shown admin.DeadLetter
	if err := b.request(t, admin.OpDeadShow, admin.DeadShowRequest{Seq: invalid}, &shown); err != nil || string(shown.Data) != big || shown.Truncated ||
		shown.Headers[events.HeaderSubject][0] != "agent.in.bob" {
		t.Fatalf("show: %d bytes, %v", len(shown.Data), err)
	}
	shown = admin.DeadLetter{}
	if err := b.request(t, admin.OpDeadShow, admin.DeadShowRequest{Seq: 999}, &shown); err == nil || err.Code != admin.CodeNotFound {
		t.Fatalf("show missing: %v", err)
	}

	// Replay with keep twice: the second message carries the first's
	// message id, so its lane runs it once (the stream stores both).
	var rep admin.DeadReplayReply
	if err := b.request(t, admin.OpDeadReplay, admin.DeadSelect{Seqs: []uint64{poison, badLane}, Keep: true}, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Replayed) != 1 || rep.Replayed[0].Session != "alice" || len(rep.Skipped) != 1 || rep.Skipped[0].Seq != badLane ||
		!strings.Contains(rep.Skipped[0].Why, "no lane") {
		t.Fatalf("replay: %+v", rep)
	}
	first := rep.Replayed[0].Run
	rep = admin.DeadReplayReply{}
	if err := b.request(t, admin.OpDeadReplay, admin.DeadSelect{Seqs: []uint64{poison}}, &rep); err != nil || len(rep.Replayed) != 1 {
		t.Fatalf("replayed again: %+v, %v", rep, err)
	}
	for _, run := range []string{first, rep.Replayed[0].Run} {
		var seq uint64
		fmt.Sscan(run, &seq)
		raw, err := b.streams.Inbound.GetMsg(b.ctx, seq)
		if err != nil || raw.Subject != "agent.in.alice" || string(raw.Data) != `{"text":"boom"}` || raw.Header.Get(events.HeaderContentType) != events.ContentJSON ||
			raw.Header.Get(events.HeaderError) != "" || raw.Header.Get(events.HeaderLaneMsgID) != fmt.Sprintf("dlq-replay-%d", poison) ||
			raw.Header.Get(events.HeaderMsgID) != "" {
			t.Fatalf("replayed message: %+v, %v", raw, err)
		}
	}
	if _, err := b.streams.Dead.GetMsg(b.ctx, poison); err == nil {
		t.Fatal("the replayed dead letter is still stored")
	}

	var purged admin.DeadPurgeReply
	if err := b.request(t, admin.OpDeadPurge, admin.DeadSelect{Reason: "invalid"}, &purged); err != nil || purged.Purged != 1 {
		t.Fatalf("purge by reason: %+v, %v", purged, err)
	}
	purged = admin.DeadPurgeReply{}
	if err := b.request(t, admin.OpDeadPurge, admin.DeadSelect{All: true}, &purged); err != nil || purged.Purged != 1 {
		t.Fatalf("purge all: %+v, %v", purged, err)
	}
	page = admin.DeadListReply{}
	if err := b.request(t, admin.OpDeadList, nil, &page); err != nil || len(page.Letters) != 0 {
		t.Fatalf("after purging: %+v, %v", page, err)
	}
}

// TestHostileRequests: malformed requests are 400s, decided before any
// work.
func TestHostileRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, c := range []struct {
		op, body, want string
	}{
		{admin.OpSessions, `{"limit":-1}`, "negative"},
		{admin.OpSessions, `{"limit":100000}`, "over"},
		{admin.OpSessions, `{"who":"me"}`, "unknown field"},
		{admin.OpDeadList, `{"reason":"a.b"}`, "not a dead-letter reason"},
		{admin.OpDeadList, `{"reason":">"}`, "not a dead-letter reason"},
		// A misspelt reason matched nothing, silently.
		{admin.OpDeadList, `{"reason":"posion"}`, `reason "posion" is not a dead-letter reason (poison, invalid, bad-lane)`},
		{admin.OpDeadPurge, `{"reason":"bad_lane"}`, `reason "bad_lane" is not a dead-letter reason (poison, invalid, bad-lane)`},
		{admin.OpDeadShow, `{}`, "seq is required"},
		{admin.OpDeadReplay, `{}`, "exactly one"},
		{admin.OpDeadReplay, `{"all":true,"reason":"poison"}`, "exactly one"},
		{admin.OpDeadPurge, `{"all":true,"keep":true}`, "keep applies"},
		{admin.OpAuthReset, `{}`, "profile is required"},
		{admin.OpDeadList, strings.Repeat(" ", sessionsvc.MaxRequestBytes+1), "larger than"},
		// A listing carries the caller's scope: a larger bound.
		{admin.OpSessions, strings.Repeat(" ", admin.MaxScopedRequestBytes+1), "larger than"},
		{admin.OpApprovals, strings.Repeat(" ", admin.MaxScopedRequestBytes+1), "larger than"},
		{admin.OpSessions, `{"q":"` + strings.Repeat("x", 300) + `"}`, "q is over"},
		{admin.OpSessions, `{"after":"1.a","offset":2}`, "exclude"},
		{admin.OpSessions, `{"after":"nope"}`, "not a listing's next"},
		{admin.OpFleet, `{"x":1}`, "unknown field"},
	} {
		var v any
		err := b.request(t, c.op, c.body, &v)
		if err == nil || err.Code != sessionsvc.CodeBadRequest || !strings.Contains(err.Description, c.want) {
			t.Errorf("%s %s: %v, want 400 %q", c.op, clipBody(c.body), err, c.want)
		}
	}
	// No auth book: the auth ops say so.
	var st admin.AuthStatusReply
	if err := b.request(t, admin.OpAuthStatus, nil, &st); err == nil || err.Code != sessionsvc.CodeUnavailable {
		t.Fatalf("auth status without profiles: %v", err)
	}
}

func clipBody(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// TestPermissionModelNamesTheService: the permission model (a pure package
// that cannot import this one) grants the subjects this service serves.
func TestPermissionModelNamesTheService(t *testing.T) {
	t.Parallel()
	if permission.AdminService != admin.Name || permission.AdminPrefix != admin.Prefix {
		t.Errorf("permission names %q on %q, the service is %q on %q", permission.AdminService, permission.AdminPrefix, admin.Name, admin.Prefix)
	}
}

// blockingBook is an auth book whose resets wait for release.
type blockingBook struct {
	entered chan struct{}
	release chan struct{}
	running atomic.Int32
	peak    atomic.Int32
}

func (*blockingBook) Status(time.Time) ([]admin.AuthProfile, map[string]string) { return nil, nil }

func (b *blockingBook) Reset(ctx context.Context, _ string) (bool, bool, error) {
	r := b.running.Add(1)
	defer b.running.Add(-1)
	for p := b.peak.Load(); r > p && !b.peak.CompareAndSwap(p, r); p = b.peak.Load() {
	}
	b.entered <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return true, true, nil
}

// TestRequestsBounded: while MaxConcurrent requests run, the next ones
// wait in the endpoint's subscription, not in goroutines of their own.
// When the running ones return, all are answered; when the service stops
// instead, the running ones are cancelled and answered, and those waiting
// are told the worker is stopping. Not parallel: it counts the admin
// service's goroutines.
func TestRequestsBounded(t *testing.T) {
	const n = admin.MaxConcurrent + 20
	for _, stop := range []bool{false, true} {
		t.Run(fmt.Sprint("stop=", stop), func(t *testing.T) {
			book := &blockingBook{entered: make(chan struct{}, n), release: make(chan struct{})}
			b := setup(t, book)
			inbox := nats.NewInbox()
			replies, err := b.nc.SubscribeSync(inbox)
			if err != nil {
				t.Fatal(err)
			}
			for range n {
				if err := b.nc.PublishRequest(admin.Subject(admin.OpAuthReset), inbox, []byte(`{"profile":"p"}`)); err != nil {
					t.Fatal(err)
				}
			}
			for range admin.MaxConcurrent {
				<-book.entered
			}
			// Once the endpoint's goroutine waits for a slot, the admin
			// service has its MaxConcurrent requests and that one:
			// nothing more comes.
			var stacks []string
			buf := make([]byte, 1<<20)
			for waiting := false; !waiting; {
				stacks = stacks[:0]
				for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
					// The micro handler waiting for a slot runs the
					// lane service package's Replier for this service.
					if strings.Contains(g, "lanefleet/admin.") || strings.Contains(g, "sessionsvc.(*Replier).Handler") {
						stacks = append(stacks, g)
						waiting = waiting || strings.Contains(g, "inflight.(*Group).Go(")
					}
				}
				if len(stacks) > admin.MaxConcurrent+1 {
					t.Fatalf("%d admin goroutines, want %d, one waiting for a slot:\n%s", len(stacks), admin.MaxConcurrent+1, strings.Join(stacks, "\n\n"))
				}
				if b.ctx.Err() != nil {
					t.Fatalf("no admin goroutine ever waited for a slot:\n%s", strings.Join(stacks, "\n\n"))
				}
				runtime.Gosched()
			}
			if stop {
				go func() { _ = b.svc.Stop() }()
			} else {
				close(book.release)
			}
			codes := map[string]int{}
			for i := range n {
				msg, err := replies.NextMsg(30 * time.Second)
				if err != nil {
					t.Fatalf("reply %d of %d: %v", i+1, n, err)
				}
				codes[msg.Header.Get(micro.ErrorCodeHeader)]++
			}
			want := map[string]int{"": n}
			if stop {
				want = map[string]int{"": admin.MaxConcurrent, sessionsvc.CodeUnavailable: n - admin.MaxConcurrent}
			}
			if !maps.Equal(codes, want) {
				t.Fatalf("replies by error code %v, want %v", codes, want)
			}
			if p := book.peak.Load(); p != admin.MaxConcurrent {
				t.Fatalf("%d resets at once, want %d", p, admin.MaxConcurrent)
			}
		})
	}
}
