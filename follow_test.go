package lanefleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/backoff"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
)

// TestFollowerOrder: the rules that turn live events (a subscription that
// may miss some or see a zombie's) and stored events (catch-ups, the truth)
// into each event once, in order.
func TestFollowerOrder(t *testing.T) {
	t.Parallel()
	// An input is "<seq>[a<attempt>][F][s]": F a final event, s stored
	// (from a catch-up) rather than live.
	tests := []struct {
		name, in, want string
	}{
		{"in order", "1 2 3", "1 2 3"},
		{"live duplicates dropped", "1 1 2 1", "1 2"},
		{"catch-up overlaps live", "1 2 1s 2s 3s 4", "1 2 3 4"},
		// 3 waits behind the gap until a catch-up brings 2.
		{"live gap filled by the store", "1 3 4 2s", "1 2 3 4"},
		// The store never got 2: a stored event past the gap skips it.
		{"stored gap skipped", "1s 3s 4", "1 3 4"},
		{"a final past a live gap waits", "1 3F 2s", "1 2 3F"},
		// A worker that lost the lane publishes seq 5 of attempt 1 after the
		// next owner's attempt 2 began: skipped, and seq 5 stays open for
		// attempt 2's own event.
		{"zombie after a newer attempt", "1a1 2a1 3a2 4a2 5a1 5a2 6a2F", "1a1 2a1 3a2 4a2 5a2 6a2F"},
		{"the final ends the run", "1 2F 3", "1 2F"},
		// A final whose seq was taken by another event still ends the run.
		{"final with a reused seq", "1 2 2F", "1 2 2F"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &follower{r: &Run{ID: "1"}, next: 1, ahead: map[uint64]*events.Event{}, idle: idleMin, idleFloor: idleMin,
				gap: backoff.Counter{Policy: backoff.Policy{Base: gapMin, Max: gapMax}}}
			var got []string
			yield := func(ev *events.Event, err error) bool {
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, label(ev))
				return true
			}
			for _, in := range strings.Fields(tt.in) {
				ev, stored := parseLabel(t, in)
				if !f.offer(ev, stored, yield) {
					break
				}
			}
			if strings.Join(got, " ") != tt.want {
				t.Fatalf("yielded %q, want %q", strings.Join(got, " "), tt.want)
			}
		})
	}
}

// TestFollowerSchedulesCatchUp: an event in order pushes the next look at
// the store to a silence of idleMin (give or take a fifth); a live gap asks
// the store at once.
func TestFollowerSchedulesCatchUp(t *testing.T) {
	t.Parallel()
	f := &follower{r: &Run{ID: "1"}, next: 1, ahead: map[uint64]*events.Event{}, idle: 8 * idleMin, idleFloor: idleMin,
		gap: backoff.Counter{Policy: backoff.Policy{Base: gapMin, Max: gapMax}}, due: time.Now()}
	yield := func(*events.Event, error) bool { return true }
	before := time.Now()
	f.offer(&events.Event{Seq: 1, Stream: events.StreamAssistant}, false, yield)
	if f.due.Before(before.Add(idleMin*4/5)) || f.due.After(time.Now().Add(idleMin*6/5)) {
		t.Fatalf("after an event in order the next catch-up is in %v, want %v", time.Until(f.due), idleMin)
	}
	f.offer(&events.Event{Seq: 3, Stream: events.StreamAssistant}, false, yield)
	if f.due.After(time.Now()) {
		t.Fatalf("a gap did not schedule a catch-up at once: %v", time.Until(f.due))
	}
}

func label(ev *events.Event) string {
	s := fmt.Sprint(ev.Seq)
	if ev.Attempt > 0 {
		s += fmt.Sprintf("a%d", ev.Attempt)
	}
	if ev.Terminal() {
		s += "F"
	}
	return s
}

func parseLabel(t *testing.T, s string) (*events.Event, bool) {
	t.Helper()
	ev := &events.Event{Stream: events.StreamAssistant}
	stored := strings.HasSuffix(s, "s")
	s = strings.TrimSuffix(s, "s")
	if strings.HasSuffix(s, "F") {
		ev.Stream = events.StreamFinal
		s = strings.TrimSuffix(s, "F")
	}
	seq, attempt, _ := strings.Cut(s, "a")
	if _, err := fmt.Sscan(seq, &ev.Seq); err != nil {
		t.Fatal(err)
	}
	if attempt != "" {
		if _, err := fmt.Sscan(attempt, &ev.Attempt); err != nil {
			t.Fatal(err)
		}
	}
	return ev, stored
}

// TestQuietCatchUpSaysOpen: a catch-up after a silence that follows an
// event leaving the run running says so (EventsRequest.Open), and the lane
// service answers it with one read of the event stream, where the old
// request also reads the lane's record; the run stays running either way.
// After a silence of openFor the follower no longer says so (and asks how
// the lane's holder keeps its lease, one read more), and a run whose final
// reached only its committed turn's record still ends with it.
func TestQuietCatchUpSaysOpen(t *testing.T) {
	t.Parallel()
	nc, js, ctx := serviceOnly(t)
	const session, run = "quiet", "1"
	tok, _ := events.KeyToken(session)
	playWorker(ctx, t, js, session, run, 1, 3, 99) // started, no final yet

	// A spy sees the follower's events requests and the JetStream API
	// requests the service makes for them; a flush after each catch-up
	// delivers all of them.
	drain := spyCatchUps(t, nc, tok)

	c, _ := New(natstest.Connect(t, natsURL(nc)))
	f, err := c.Run(session, run).follow()
	if err != nil {
		t.Fatal(err)
	}
	defer f.feed.close()
	var got []string
	yield := func(ev *events.Event, err error) bool {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, label(ev))
		return true
	}
	catchUp := func() (more bool, q *sessionsvc.EventsRequest, reads []string) {
		t.Helper()
		drain()
		more = f.catchUp(ctx, yield)
		q, reads = drain()
		if q == nil {
			t.Fatal("the catch-up sent no events request")
		}
		return more, q, reads
	}
	if more, q, _ := catchUp(); !more || q.Open || strings.Join(got, " ") != "1a1 2a1 3a1" {
		t.Fatalf("first catch-up: go on %v, request %+v, yielded %q", more, q, got)
	}
	more, q, quiet := catchUp()
	if !more || !q.Open || q.From != 4 || len(got) != 3 || fmt.Sprint(quiet) != "[DIRECT.GET.AGENT_EV]" {
		t.Fatalf("no-news catch-up: go on %v, request %+v, yielded %q, service reads %v", more, q, got, quiet)
	}
	f.lastEvent = time.Now().Add(-openFor) // a long silence
	more, q, long := catchUp()
	if !more || q.Open || !q.Lease || len(got) != 3 || len(long) != 3 {
		t.Fatalf("catch-up after a long silence: go on %v, request %+v, yielded %q, service reads %v", more, q, got, long)
	}
	t.Logf("service reads of a no-news catch-up: open %v, without %v", quiet, long)

	// The turn commits with its final in the record only (neither the
	// attempt's end nor the final reached the stream).
	l, err := kvstore.Open(ctx, js, kvstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lease, err := l.Acquire(ctx, tok, kvstore.LeaseInfo{Worker: "test"})
	if err != nil {
		t.Fatal(err)
	}
	final, _, err := events.EncodeEvent(&events.Event{Stream: events.StreamFinal, Data: events.EventData{Result: &events.Result{Payloads: []events.Payload{{Text: "kept"}}}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.PutRecord(ctx, kvstore.Record{InboundSeq: 1, RunID: run, Final: final}); err != nil {
		t.Fatal(err)
	}
	_ = lease.Release(ctx)
	// Soon after the last event, running: what the stream's last event says.
	f.lastEvent = time.Now()
	if more, q, _ := catchUp(); !more || !q.Open || len(got) != 3 {
		t.Fatalf("soon after the commit: go on %v, request %+v, yielded %q", more, q, got)
	}
	// After a long silence, the record's final ends the run.
	f.lastEvent = time.Now().Add(-openFor)
	if more, q, _ := catchUp(); more || q.Open || strings.Join(got, " ") != "1a1 2a1 3a1 4F" {
		t.Fatalf("after a long silence: go on %v, request %+v, yielded %q", more, q, got)
	}
}

// TestOpenToAnOldService: a lane service that predates EventsRequest.Open
// refuses the field as an unknown one (its decoder rejects unknown
// fields); the follower asks again without it, and does not send it again.
func TestOpenToAnOldService(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	const session, run = "old", "1"
	tok, _ := events.KeyToken(session)
	var (
		mu     sync.Mutex
		bodies []string
	)
	sub, err := nc.Subscribe(sessionsvc.Subject(tok, sessionsvc.OpEvents), func(m *nats.Msg) {
		mu.Lock()
		bodies = append(bodies, string(m.Data))
		mu.Unlock()
		var q struct { // the request as an old service knew it
			Run   string `json:"run"`
			From  uint64 `json:"from,omitempty"`
			After uint64 `json:"after,omitempty"`
		}
		reply := nats.NewMsg(m.Reply)
		if err := sessionsvc.DecodeRequest(m.Data, &q); err != nil {
			reply.Header.Set(micro.ErrorCodeHeader, sessionsvc.CodeBadRequest)
			reply.Header.Set(micro.ErrorHeader, err.Error())
		} else {
			reply.Data, _ = msgpack.Marshal(sessionsvc.EventsReply{Events: []sessionsvc.StoredEvent{}, State: sessionsvc.StateRunning, Next: q.After})
		}
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The client is another connection: the server must know of the
	// responder before the client's first request.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c, _ := New(natstest.Connect(t, srv.URL))
	f, err := c.Run(session, run).follow()
	if err != nil {
		t.Fatal(err)
	}
	defer f.feed.close()
	f.next, f.cursor, f.open, f.lastEvent = 4, 9, true, time.Now() // after a running event
	for range 2 {
		if rep, err := f.fetch(t.Context()); err != nil || rep.State != sessionsvc.StateRunning {
			t.Fatalf("fetch from an old service: %+v, %v", rep, err)
		}
	}
	want := []string{`{"run":"1","from":4,"after":9,"open":true}`, `{"run":"1","from":4,"after":9}`, `{"run":"1","from":4,"after":9}`}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(bodies) != fmt.Sprint(want) || !f.noOpen {
		t.Fatalf("requests %q, want %q", bodies, want)
	}
}

// TestLiveFollowerCatchUpCost: a run followed from Send sees its events
// live; the looks at the store during a silence (a model's wait for its
// first token) come liveIdle after the last event, then twice as long (give
// or take a fifth, see jittered), and each costs the lane service one read
// of the event stream: the first, which has no place in the stream yet,
// reads the run's last stored event instead of every event seen live. A run followed later starts with a
// catch-up at once and keeps the shorter silences. The final still ends the
// run when the store alone has it.
func TestLiveFollowerCatchUpCost(t *testing.T) {
	t.Parallel()
	nc, js, ctx := serviceOnly(t)
	const session = "costly"
	tok, _ := events.KeyToken(session)
	drain := spyCatchUps(t, nc, tok)
	c, _ := New(natstest.Connect(t, natsURL(nc)))
	r, err := c.Send(ctx, session, "hi")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	f, err := r.follow()
	if err != nil {
		t.Fatal(err)
	}
	defer f.feed.close()
	if f.due.Before(start.Add(liveIdle*4/5)) || f.due.After(time.Now().Add(liveIdle*6/5)) {
		t.Fatalf("first look at the store of a live follower in %v, want %v", time.Until(f.due), liveIdle)
	}
	var got []string
	yield := func(ev *events.Event, err error) bool {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, label(ev))
		return true
	}
	// The worker starts the run and streams two deltas, then waits on
	// its model: the follower takes them from its live feed.
	playWorker(ctx, t, js, session, r.ID, 1, 3, 99)
	for f.next <= 3 {
		select {
		case <-f.feed.ready:
		case <-ctx.Done():
			t.Fatalf("live events: %v (yielded %q)", ctx.Err(), got)
		}
		for _, m := range f.feed.take(nil) {
			ev, err := events.DecodeEvent(m.Header.Get(events.HeaderContentType), m.Data)
			if err != nil {
				t.Fatal(err)
			}
			f.offer(ev, false, yield)
		}
	}
	if d := f.due.Sub(f.lastEvent); d < liveIdle*4/5 || d > liveIdle*6/5 {
		t.Fatalf("after a live event the next look is %v later, want %v", d, liveIdle)
	}
	drain()
	for i, wantIdle := range []time.Duration{2 * liveIdle, min(4*liveIdle, idleMax)} {
		before := time.Now()
		if !f.catchUp(ctx, yield) {
			t.Fatalf("catch-up %d ended the run", i+1)
		}
		q, reads := drain()
		if q == nil || q.From != 4 || !q.Open || len(reads) != 1 || !strings.HasPrefix(reads[0], "DIRECT.GET.AGENT_EV") {
			t.Fatalf("catch-up %d: request %+v, service reads %v; want one read of AGENT_EV", i+1, q, reads)
		}
		if i == 0 && (q.After != 0 || f.cursor == 0) {
			t.Fatalf("first catch-up: request %+v, cursor after it %d", q, f.cursor)
		}
		if f.due.Before(before.Add(wantIdle*2/5)) || f.idle != wantIdle || len(got) != 3 {
			t.Fatalf("after catch-up %d: next in %v, idle %v (want %v), yielded %q", i+1, time.Until(f.due), f.idle, wantIdle, got)
		}
	}
	// The final reaches the store and not the feed: the next look ends
	// the run with it.
	f.feed.close()
	playWorker(ctx, t, js, session, r.ID, 4, 4, 4)
	if f.catchUp(ctx, yield) || strings.Join(got, " ") != "1a1 2a1 3a1 4a1F" {
		t.Fatalf("catch-up after the final: yielded %q", got)
	}

	// A run followed later has no live feed from its start.
	late, err := c.Run(session, r.ID).follow()
	if err != nil {
		t.Fatal(err)
	}
	defer late.feed.close()
	if late.due.After(time.Now()) || late.idleFloor != idleMin {
		t.Fatalf("late follower: first look in %v, silences from %v; want at once, %v", time.Until(late.due), late.idleFloor, idleMin)
	}
}

// TestLiveEventsBeforeACatchUp: when a look at the store falls due while
// live events wait on the feed, the live events go first; when they show
// the run going on, no look is made.
func TestLiveEventsBeforeACatchUp(t *testing.T) {
	t.Parallel()
	const session = "due"
	f, r, js, asked, ctx := queuedFollower(t, session, 2, 99)
	defer f.feed.close()
	f.due = time.Now().Add(-time.Second)
	var got []string
	f.run(ctx, func(ev *events.Event, err error) bool {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, label(ev))
		if ev.Seq == 2 { // the run goes on: the look stays put off, and the final comes live
			playWorker(ctx, t, js, session, r.ID, 3, 3, 3)
		}
		return true
	})
	if strings.Join(got, " ") != "1a1 2a1 3a1F" || asked() != 0 {
		t.Fatalf("yielded %q after %d events requests; want the live events and none", got, asked())
	}
}

// TestLostLiveEventsCatchUpFirst: after the feed lost messages, the look at
// the store is made at once, though the live events still queued (taken
// first, so that the queue makes room) put the next silence's look off:
// what was lost (here the rest of the run, its final too) is in the store.
func TestLostLiveEventsCatchUpFirst(t *testing.T) {
	t.Parallel()
	f, _, _, asked, ctx := queuedFollower(t, "lost", 4, 4)
	defer f.feed.close()
	// The feed lost events 3 and 4, as a full queue drops what comes.
	f.feed.mu.Lock()
	f.feed.queue = f.feed.queue[:2]
	f.feed.dropped += 2
	f.feed.mu.Unlock()
	// Only the loss can make a look due: a silence takes an hour.
	f.due, f.idle, f.idleFloor = time.Now().Add(time.Hour), time.Hour, time.Hour
	var got []string
	f.run(ctx, func(ev *events.Event, err error) bool {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, label(ev))
		if ev.Seq == 3 { // from the store: the queue was emptied before the look
			f.feed.mu.Lock()
			if n := len(f.feed.queue); n != 0 {
				t.Errorf("%d live events left queued across the look (a full queue would keep losing what comes)", n)
			}
			f.feed.mu.Unlock()
		}
		return true
	})
	if strings.Join(got, " ") != "1a1 2a1 3a1 4a1F" || asked() != 1 {
		t.Fatalf("yielded %q after %d events requests; want the live events, then the lost ones from one look", got, asked())
	}
}

// spyCatchUps watches, from a connection of its own, the lane tok's events
// requests and the JetStream API requests the service makes for them; the
// function it returns flushes (which delivers everything sent before) and
// returns the last events request and the API requests since its last call.
func spyCatchUps(t *testing.T, nc *nats.Conn, tok string) func() (q *sessionsvc.EventsRequest, reads []string) {
	t.Helper()
	spy := natstest.Connect(t, natsURL(nc))
	seen := make(chan *nats.Msg, 256)
	for _, subj := range []string{"$JS.API.>", sessionsvc.Subject(tok, sessionsvc.OpEvents)} {
		if _, err := spy.ChanSubscribe(subj, seen); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() (q *sessionsvc.EventsRequest, reads []string) {
		if err := spy.Flush(); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case m := <-seen:
				if !strings.HasPrefix(m.Subject, "$JS.API.") {
					q = &sessionsvc.EventsRequest{}
					if err := json.Unmarshal(m.Data, q); err != nil {
						t.Fatal(err)
					}
					continue
				}
				reads = append(reads, strings.TrimPrefix(m.Subject, "$JS.API."))
			default:
				return q, reads
			}
		}
	}
}

// queuedFollower sends a message to session on a lane service with no
// worker, plays the worker's events 1..to of the run (last: its final) and
// returns the run's follower once they all wait on its feed (with the
// feed's signal that they do), and a count of the events requests.
func queuedFollower(t *testing.T, session string, to, last uint64) (*follower, *Run, jetstream.JetStream, func() int64, context.Context) {
	t.Helper()
	nc, js, ctx := serviceOnly(t)
	asked := countRequests(t, nc, session)
	c, _ := New(natstest.Connect(t, natsURL(nc)))
	r, err := c.Send(ctx, session, "hi")
	if err != nil {
		t.Fatal(err)
	}
	f, err := r.follow()
	if err != nil {
		t.Fatal(err)
	}
	playWorker(ctx, t, js, session, r.ID, 1, to, last)
	for queued := 0; queued < int(to); {
		select {
		case <-f.feed.ready:
		case <-ctx.Done():
			f.feed.close()
			t.Fatal("the live events never came")
		}
		f.feed.mu.Lock()
		queued = len(f.feed.queue)
		f.feed.mu.Unlock()
	}
	select {
	case f.feed.ready <- struct{}{}: // the signal the wait above took
	default: // or a later push's
	}
	return f, r, js, asked, ctx
}

// TestLeaseToAnOldService: a lane service that predates
// EventsRequest.Lease refuses it: the follower asks again without it and
// does not ask for the lease again, keeping Open.
func TestLeaseToAnOldService(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	const session, run = "older", "1"
	tok, _ := events.KeyToken(session)
	var (
		mu     sync.Mutex
		bodies []string
	)
	sub, err := nc.Subscribe(sessionsvc.Subject(tok, sessionsvc.OpEvents), func(m *nats.Msg) {
		mu.Lock()
		bodies = append(bodies, string(m.Data))
		mu.Unlock()
		var q struct { // the request as a service before Lease knew it
			Run   string `json:"run"`
			From  uint64 `json:"from,omitempty"`
			After uint64 `json:"after,omitempty"`
			Open  bool   `json:"open,omitempty"`
		}
		reply := nats.NewMsg(m.Reply)
		if err := sessionsvc.DecodeRequest(m.Data, &q); err != nil {
			reply.Header.Set(micro.ErrorCodeHeader, sessionsvc.CodeBadRequest)
			reply.Header.Set(micro.ErrorHeader, err.Error())
		} else {
			reply.Data, _ = msgpack.Marshal(sessionsvc.EventsReply{Events: []sessionsvc.StoredEvent{}, State: sessionsvc.StateRunning, Next: q.After})
		}
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c, _ := New(natstest.Connect(t, srv.URL))
	f, err := c.Run(session, run).follow()
	if err != nil {
		t.Fatal(err)
	}
	defer f.feed.close()
	f.next, f.cursor, f.open, f.lastEvent = 4, 9, true, time.Now().Add(-3*time.Second) // a silence after a running event
	for range 2 {
		if rep, err := f.fetch(t.Context()); err != nil || rep.State != sessionsvc.StateRunning {
			t.Fatalf("fetch from an old service: %+v, %v", rep, err)
		}
	}
	want := []string{`{"run":"1","from":4,"after":9,"open":true,"lease":true}`, `{"run":"1","from":4,"after":9,"open":true}`, `{"run":"1","from":4,"after":9,"open":true}`}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(bodies) != fmt.Sprint(want) || !f.noLease || f.noOpen {
		t.Fatalf("requests %q, want %q", bodies, want)
	}
}

// TestFollowSaysHandOver: a run whose worker stopped answering (its lease
// on the lane goes unrenewed) is reported as a hand-over while no event
// comes, naming the worker and how long until another takes over (or,
// once the lease lapsed, that the run waits for a worker); the next
// worker's restart ends it.
func TestFollowSaysHandOver(t *testing.T) {
	t.Parallel()
	nc, js, ctx := serviceOnly(t)
	const session, run = "handed", "7"
	tok, _ := events.KeyToken(session)
	subj, _ := events.EventSubject(session, run)
	pub := func(attempt int, stream, phase string) {
		t.Helper()
		ev := &events.Event{RunID: run, SessionKey: session, Seq: 1, Attempt: attempt, Stream: stream, TS: 1, Data: events.EventData{Phase: phase, Worker: "w-next"}}
		switch {
		case stream == events.StreamFinal:
			ev.Seq, ev.Data = 4, events.EventData{Result: &events.Result{}}
		case phase == events.PhaseAborted:
			ev.Seq = 2
		case phase == events.PhaseRestart:
			ev.Seq = 3
		}
		data, ct, err := events.EncodeEvent(ev, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: data, Header: nats.Header{events.HeaderContentType: []string{ct}}}); err != nil {
			t.Fatal(err)
		}
	}
	// The first worker started the run, then stopped renewing its lease
	// (a short one: it lapses 3 s after).
	pub(1, events.StreamLifecycle, events.PhaseStart)
	short, err := kvstore.Open(ctx, js, kvstore.Config{LeaseTTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := short.Acquire(ctx, tok, kvstore.LeaseInfo{Worker: "w-dead"}); err != nil {
		t.Fatal(err)
	}
	c, _ := New(nc)
	var seen []string
	var told *Wait
	r := c.Run(session, run).OnWait(10*time.Millisecond, func(w Wait) {
		seen = append(seen, "wait:"+string(w.State))
		if w.State == RunHandOver && told == nil {
			told = &w
			// The next worker takes the run over.
			pub(2, events.StreamLifecycle, events.PhaseAborted)
			pub(2, events.StreamLifecycle, events.PhaseRestart)
			pub(2, events.StreamFinal, "")
		}
	})
	for ev, err := range r.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev.Stream+":"+ev.Data.Phase)
	}
	want := "lifecycle:start wait:hand-over lifecycle:aborted lifecycle:restart final:"
	if strings.Join(seen, " ") != want {
		t.Fatalf("followed %q, want %q", strings.Join(seen, " "), want)
	}
	t.Logf("told %+v", *told)
	switch {
	case told.Worker == "w-dead" && told.Within > 0 && told.Within <= 3*time.Second:
	case told.Worker == "" && told.Within == 0: // a slow machine saw the lease lapsed already
	default:
		t.Fatalf("hand-over %+v: want w-dead and the time until its lease lapses", *told)
	}
}

// cutProxy forwards TCP connections to a server until cut: then it closes
// them and refuses new ones until restored.
type cutProxy struct {
	addr string

	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func startCutProxy(t *testing.T, serverURL string) *cutProxy {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); p.sever(); wg.Wait() })
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				_ = client.Close()
				continue
			}
			srv, err := net.Dial("tcp", u.Host)
			if err != nil {
				p.mu.Unlock()
				_ = client.Close()
				continue
			}
			p.conns = append(p.conns, client, srv)
			p.mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(client, srv); _ = client.Close() })
			wg.Go(func() { _, _ = io.Copy(srv, client); _ = srv.Close() })
		}
	})
	return p
}

// sever closes every connection and refuses new ones.
func (p *cutProxy) sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *cutProxy) restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// TestFollowSaysDisconnected: following a run tells when the client's
// connection to NATS drops and when it is back.
func TestFollowSaysDisconnected(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	p := startCutProxy(t, srv.URL)
	c, _ := New(natstest.Connect(t, "nats://"+p.addr)) // reconnects forever, every 100 ms
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	waits := make(chan Wait, 16)
	r := c.Run("cut", "7").OnWait(10*time.Millisecond, func(w Wait) { waits <- w })
	done := make(chan error, 1)
	go func() {
		for _, err := range r.Events(ctx) {
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	next := func() Wait {
		t.Helper()
		select {
		case w := <-waits:
			return w
		case err := <-done:
			t.Fatalf("following ended: %v", err)
		case <-ctx.Done():
			t.Fatal("no notice")
		}
		return Wait{}
	}
	// Following has started: nothing serves the lane.
	if w := next(); w.State != RunNoWorker {
		t.Fatalf("before the cut: %+v, want no-worker", w)
	}
	p.sever()
	if w := next(); w.State != RunDisconnected || w.Within != 0 {
		t.Fatalf("after the cut: %+v, want disconnected, reconnecting without end", w)
	}
	p.restore()
	if w := next(); w.State != RunReconnected {
		t.Fatalf("after the restore: %+v, want reconnected", w)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("following ended with %v", err)
	}
}

// TestReconnectBound: how long nats.go tries to reconnect before it gives
// up, from the connection's options.
func TestReconnectBound(t *testing.T) {
	t.Parallel()
	o := nats.GetDefaultOptions()
	if got := reconnectBound(o); got != 60*(2*time.Second+2*time.Second+100*time.Millisecond) {
		t.Errorf("defaults: %s", got)
	}
	o.MaxReconnect = -1
	if got := reconnectBound(o); got != 0 {
		t.Errorf("forever: %s", got)
	}
}

// TestCaughtUpAfterEventsAtHand: OnCaughtUp's function runs once the
// follower has yielded every event at hand and before it waits for more
// (here the worker goes on only once it ran), not after each event, and
// not after the final.
func TestCaughtUpAfterEventsAtHand(t *testing.T) {
	t.Parallel()
	const session = "batched"
	f, r, js, _, ctx := queuedFollower(t, session, 3, 5)
	defer f.feed.close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var got, calls []string
	r.OnCaughtUp(func() {
		calls = append(calls, strings.Join(got, " "))
		if len(calls) == 1 {
			playWorker(ctx, t, js, session, r.ID, 4, 5, 5)
		}
	})
	f.run(ctx, func(ev *events.Event, err error) bool {
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, label(ev))
		return true
	})
	// Events 4 and 5 may come together or apart: a call between them is
	// right; one after the final, or without a new event, is not.
	distinct := len(slices.Compact(slices.Clone(calls))) == len(calls)
	if strings.Join(got, " ") != "1a1 2a1 3a1 4a1 5a1F" || len(calls) == 0 || calls[0] != "1a1 2a1 3a1" ||
		slices.Contains(calls, strings.Join(got, " ")) || !distinct {
		t.Fatalf("yielded %q, caught up after %q; want every event, the first call after the three at hand, none after the final", got, calls)
	}
}
