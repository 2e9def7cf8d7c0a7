package lanefleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
)

// serviceOnly starts a server with the fleet's streams and buckets and a
// lane service, but no worker: tests publish what a worker would.
func serviceOnly(t testing.TB) (*nats.Conn, jetstream.JetStream, context.Context) {
	t.Helper()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	streams, err := lanes.EnsureStreams(ctx, js, lanes.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := kvstore.Open(ctx, js, kvstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := sessionsvc.Serve(nc, sessionsvc.Config{Lanes: l, Inbound: streams.Inbound, Events: streams.Events})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	return nc, js, ctx
}

// TestEventsSkipAZombiesLateEvents: after a restart, events of the older
// attempt (a worker that lost the lane and still publishes) are not yielded.
func TestEventsSkipAZombiesLateEvents(t *testing.T) {
	t.Parallel()
	nc, js, ctx := serviceOnly(t)
	subj, _ := events.EventSubject("z", "7")
	seq := uint64(0)
	pub := func(attempt int, stream, phase, delta string) {
		seq++
		ev := &events.Event{RunID: "7", SessionKey: "z", Seq: seq, Attempt: attempt, Stream: stream, TS: 1,
			Data: events.EventData{Phase: phase, Delta: delta}}
		if stream == events.StreamFinal {
			ev.Data.Result = &events.Result{}
		}
		data, ct, err := events.EncodeEvent(ev, false)
		if err != nil {
			t.Fatal(err)
		}
		msg := &nats.Msg{Subject: subj, Data: data, Header: nats.Header{events.HeaderContentType: []string{ct}}}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
	}
	pub(1, events.StreamLifecycle, events.PhaseStart, "")
	pub(1, events.StreamAssistant, "", "old ")
	pub(2, events.StreamLifecycle, events.PhaseAborted, "")
	pub(2, events.StreamLifecycle, events.PhaseRestart, "")
	pub(1, events.StreamAssistant, "", "zombie ") // the old worker, late
	pub(2, events.StreamAssistant, "", "new")
	pub(2, events.StreamFinal, "", "")

	c, _ := New(nc)
	var got []string
	for ev, err := range c.Run("z", "7").Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%s%s%s", ev.Attempt, ev.Stream, ev.Data.Phase, ev.Data.Delta))
	}
	want := "1:lifecyclestart 1:assistantold  2:lifecycleaborted 2:lifecyclerestart 2:assistantnew 2:final"
	if strings.Join(got, " ") != want {
		t.Fatalf("events\n got %s\nwant %s", strings.Join(got, " "), want)
	}
}

// startMember runs a fleet member (an in-process worker) against url until
// the test ends.
func startMember(t *testing.T, url string) {
	t.Helper()
	m, err := fleet.Start(t.Context(), fleet.Config{NATSURL: url, Scripted: true, Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestFollowingLeavesNothingOnTheServer: Wait and Events, live and after
// the run ended, leave no consumer on AGENT_EV and no subscription on the
// client's connection.
func TestFollowingLeavesNothingOnTheServer(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	startMember(t, srv.URL)
	nc := natstest.Connect(t, srv.URL)
	c, _ := New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var last *Run
	for i := range 20 {
		run, err := c.Send(ctx, fmt.Sprintf("s%d", i%3), fmt.Sprintf("hello %d", i))
		if err != nil {
			t.Fatal(err)
		}
		res, err := run.Wait(ctx)
		if err != nil || res.Payloads[0].Text != fmt.Sprintf("echo: hello %d", i) {
			t.Fatalf("run %d: %+v, %v", i, res, err)
		}
		last = run
	}
	// A run that ended replays from the store.
	var seqs []uint64
	for ev, err := range c.Run(last.Session, last.ID).Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ev.Seq)
	}
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("replayed seqs %v", seqs)
		}
	}
	js, _ := jetstream.New(natstest.Connect(t, srv.URL))
	st, err := js.Stream(ctx, events.EventStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Consumers; n != 0 {
		t.Fatalf("%d consumers left on %s", n, events.EventStream)
	}
	if n := laneSubscriptions(c); n != 0 {
		t.Fatalf("%d subscriptions left on the client's connection", n)
	}
	c.mu.Lock()
	lanes, dispatching := len(c.lanes), c.stopDispatch != nil
	c.mu.Unlock()
	if lanes != 0 || dispatching {
		t.Fatalf("%d lanes held, dispatcher running %v: want none left", lanes, dispatching)
	}
}

// TestUnknownRun: following a run the session does not have ends with
// ErrUnknownRun instead of waiting for the context.
func TestUnknownRun(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	startMember(t, srv.URL)
	c, _ := New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	run, err := c.Send(ctx, "known", "hi")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// The run exists, but in another session.
	for _, r := range []*Run{c.Run("other", run.ID), c.Run("known", "4242")} {
		if _, err := r.Wait(ctx); !errors.Is(err, ErrUnknownRun) {
			t.Fatalf("run %s of %s: %v, want ErrUnknownRun", r.ID, r.Session, err)
		}
	}
	if _, err := c.Run("known", "not-a-number").Wait(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("malformed run id: %v", err)
	}
}

// TestNoWorkerYet: a message sent while no worker runs is stored; following
// it reports that no worker answers, and it runs once a worker starts.
func TestNoWorkerYet(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js, _ := jetstream.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := lanes.EnsureStreams(ctx, js, lanes.StreamConfig{}); err != nil { // a fleet ran here before
		t.Fatal(err)
	}
	c, _ := New(natstest.Connect(t, srv.URL))
	run, err := c.Send(ctx, "early", "anyone there?")
	if err != nil {
		t.Fatal(err)
	}
	noted := make(chan RunState, 4)
	run.OnWait(50*time.Millisecond, func(w Wait) { noted <- w.State })
	res := make(chan error, 1)
	go func() {
		r, err := run.Wait(ctx)
		if err == nil && r.Payloads[0].Text != "echo: anyone there?" {
			err = fmt.Errorf("result %+v", r)
		}
		res <- err
	}()
	select {
	case s := <-noted:
		if s != RunNoWorker {
			t.Fatalf("waiting for %s, want %s", s, RunNoWorker)
		}
	case err := <-res:
		t.Fatalf("Wait returned before a worker ran: %v", err)
	}
	startMember(t, srv.URL)
	if err := <-res; err != nil {
		t.Fatal(err)
	}
}

// TestNoFleet: on a NATS server where no fleet ever ran, Send and History
// say so (ErrNoFleet) instead of hanging.
func TestNoFleet(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c, _ := New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := c.Send(ctx, "a", "hi"); !errors.Is(err, ErrNoFleet) {
		t.Fatalf("send: %v", err)
	}
	if _, err := c.History(ctx, "a"); !errors.Is(err, ErrNoFleet) {
		t.Fatalf("history: %v", err)
	}
}

// TestSendWaitsOutAMissingStream: while no stream takes the session's
// messages but a worker answers (a cluster electing its leaders), Send
// retries; it stores the message once when the stream is back.
func TestSendWaitsOutAMissingStream(t *testing.T) {
	t.Parallel()
	nc, js, ctx := serviceOnly(t)
	if err := js.DeleteStream(ctx, events.InboundStream); err != nil {
		t.Fatal(err)
	}
	// Bring the stream back once Send, finding no stream for a while, has
	// asked whether a worker answers.
	tried := make(chan struct{})
	var once sync.Once
	sub, err := nc.Subscribe(sessionsvc.Subject("patient", sessionsvc.OpSettings), func(*nats.Msg) { once.Do(func() { close(tried) }) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil { // the client below is another connection
		t.Fatal(err)
	}
	go func() {
		<-tried
		_, _ = lanes.EnsureStreams(ctx, js, lanes.StreamConfig{})
	}()
	c, _ := New(natstest.Connect(t, natsURL(nc)))
	if _, err := c.Send(ctx, "patient", "hi", WithMessageID("m-1")); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, events.InboundStream)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("%d messages stored", n)
	}
}

// TestSendRetriesATimeoutWithTheSameID: a publish whose ack never came is
// repeated as the same publish (the same random Nats-Msg-Id, not the
// message id a caller may choose, which goes as Lanefleet-Msg-Id), and
// the stream's "duplicate" answer to the repeat is the message's own run.
// (A core subscriber plays the stream here: it loses the first ack.)
func TestSendRetriesATimeoutWithTheSameID(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	var ids []string
	var mu sync.Mutex
	sub, err := nc.Subscribe(events.InboundPrefix+"flaky", func(m *nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		ids = append(ids, m.Header.Get(events.HeaderMsgID))
		if m.Header.Get(events.HeaderLaneMsgID) != "mine" {
			ids = append(ids, "no lane id")
		}
		if len(ids) > 1 {
			_ = m.Respond([]byte(`{"stream":"AGENT_IN","seq":7,"duplicate":true}`))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil { // the client below is another connection
		t.Fatal(err)
	}
	c, _ := New(natstest.Connect(t, srv.URL))
	run, err := c.Send(t.Context(), "flaky", "hi", WithMessageID("mine"))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if run.Seq != 7 || len(ids) != 2 || ids[0] != ids[1] || ids[0] == "" || ids[0] == "mine" {
		t.Fatalf("run %+v after publishes with ids %q", run, ids)
	}
}

func natsURL(nc *nats.Conn) string { return nc.ConnectedUrl() }

// TestSendTooLarge: a message over the server's max payload is ErrTooLarge,
// before anything is sent.
func TestSendTooLarge(t *testing.T) {
	t.Parallel()
	no := false
	srv, err := embedded.Start(embedded.Config{Name: "small", DataDir: t.TempDir(), SyncAlways: &no, MaxPayload: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	c, _ := New(natstest.Connect(t, srv.ClientURL()))
	if _, err := c.Send(t.Context(), "big", strings.Repeat("x", 8<<10)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("send: %v", err)
	}
	if err := c.Import(t.Context(), "big", strings.NewReader(strings.Repeat("x", 8<<10))); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("import: %v", err)
	}
}
