package lanefleet

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
)

// playWorker publishes the events from..to that a worker would for run of
// session, through the event stream: 1 starts the run, last is its final.
func playWorker(ctx context.Context, t *testing.T, js jetstream.JetStream, session, run string, from, to, last uint64) {
	t.Helper()
	subj, err := events.EventSubject(session, run)
	if err != nil {
		t.Fatal(err)
	}
	for seq := from; seq <= to; seq++ {
		ev := &events.Event{RunID: run, SessionKey: session, Seq: seq, Attempt: 1, Stream: events.StreamAssistant, TS: 1,
			Data: events.EventData{Delta: fmt.Sprint(seq)}}
		switch seq {
		case 1:
			ev.Stream, ev.Data = events.StreamLifecycle, events.EventData{Phase: events.PhaseStart}
		case last:
			ev.Stream, ev.Data = events.StreamFinal, events.EventData{Result: &events.Result{Payloads: []events.Payload{{Text: "done"}}}}
		}
		data, ct, err := events.EncodeEvent(ev, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Data: data, Header: nats.Header{events.HeaderContentType: []string{ct}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// countRequests counts the lane service's events requests for session:
// the function it returns flushes its connection (which delivers every
// request the server routed before) and returns the count so far.
func countRequests(t *testing.T, nc *nats.Conn, session string) func() int64 {
	t.Helper()
	tok, _ := events.KeyToken(session)
	seen := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe(sessionsvc.Subject(tok, sessionsvc.OpEvents), seen)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	var n int64
	return func() int64 {
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case <-seen:
				n++
			default:
				return n
			}
		}
	}
}

// TestFreshRunFollowsLiveEvents: following a run Send returned yields its
// events from the first one, each once and in order, whether the live
// subscription saw all of them (then the lane service is never asked), missed
// the start (a gap: the store fills it at once), or missed everything up to
// the final (the first look at the store, at OnWait's delay, finds it). The test plays the worker: the events published before Send are
// those a subscription that reached the worker's server late would miss.
func TestFreshRunFollowsLiveEvents(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		before   uint64        // events stored before Send
		look     time.Duration // OnWait's delay, the first look at the store (0: none, idleMin)
		requests string        // "none" or "some"
	}{
		{"all live", 0, 0, "none"},
		{"start missed", 2, 0, "some"},
		{"everything missed", 5, 50 * time.Millisecond, "some"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			nc, js, ctx := serviceOnly(t)
			asked := countRequests(t, nc, "fresh")
			c, _ := New(natstest.Connect(t, natsURL(nc)))
			const run, last = "1", 5 // the stream's first message
			if tt.before > 0 {
				playWorker(ctx, t, js, "fresh", run, 1, tt.before, last)
			}
			r, err := c.Send(ctx, "fresh", "hi")
			if err != nil || r.ID != run {
				t.Fatalf("send: run %+v, %v", r, err)
			}
			if f := r.live.Load(); f == nil || !f.fromStart {
				t.Fatal("Send opened no feed from the run's start")
			}
			if tt.before < last {
				playWorker(ctx, t, js, "fresh", run, tt.before+1, last, last)
			}
			if tt.look > 0 {
				r.OnWait(tt.look, func(Wait) {})
			}
			var seqs []string
			for ev, err := range r.Events(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				seqs = append(seqs, fmt.Sprint(ev.Seq))
			}
			if got := strings.Join(seqs, " "); got != "1 2 3 4 5" {
				t.Fatalf("yielded seqs %s", got)
			}
			if n := asked(); (n == 0) != (tt.requests == "none") {
				t.Fatalf("%d events requests, want %s", n, tt.requests)
			}
		})
	}
}

// TestSendsShareTheLaneSubscription: runs of one session sent at once share
// one subscription; each follower gets its own run's result, and nothing
// stays subscribed once they end.
func TestSendsShareTheLaneSubscription(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	startMember(t, srv.URL)
	nc := natstest.Connect(t, srv.URL)
	c, _ := New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const n = 16
	runs := make([]*Run, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			r, err := c.Send(ctx, "shared", fmt.Sprintf("message %d", i))
			if err != nil {
				errs <- err
				return
			}
			runs[i] = r
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if got := laneSubscriptions(c); got != 1 {
		t.Fatalf("%d subscriptions for %d runs of one session, want 1", got, n)
	}
	results := make([]string, n)
	for i, r := range runs {
		wg.Go(func() {
			res, err := r.Wait(ctx)
			if err != nil {
				results[i] = err.Error()
				return
			}
			results[i] = res.Payloads[0].Text
		})
	}
	wg.Wait()
	for i, got := range results {
		if want := fmt.Sprintf("echo: message %d", i); got != want {
			t.Fatalf("run %d: %q, want %q", i, got, want)
		}
	}
	if got := laneSubscriptions(c); got != 0 {
		t.Fatalf("%d subscriptions left", got)
	}
}

// TestLateFollowReadsTheStore: a run whose feed expired before anyone
// followed it (the subscription is gone then) starts with the store and
// ends with the run's result; a resend with the same message id is a run
// of its own, not run: it ends pointing at the first, and Wait returns the
// first's result.
func TestLateFollowReadsTheStore(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	startMember(t, srv.URL)
	nc := natstest.Connect(t, srv.URL)
	c, _ := New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	r, err := c.Send(ctx, "late", "first", WithMessageID("m-1"))
	if err != nil {
		t.Fatal(err)
	}
	r.expire(r.live.Load())
	if got := laneSubscriptions(c); got != 0 || r.live.Load() != nil {
		t.Fatalf("an expired feed left %d subscriptions", got)
	}
	if res, err := r.Wait(ctx); err != nil || res.Payloads[0].Text != "echo: first" {
		t.Fatalf("wait after expiry: %+v, %v", res, err)
	}
	dup, err := c.Send(ctx, "late", "first", WithMessageID("m-1"))
	if err != nil || dup.ID == r.ID {
		t.Fatalf("second send: %+v, %v", dup, err)
	}
	var final *events.Event
	for ev, err := range dup.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		final = ev
	}
	if final == nil || final.Data.Result == nil || final.Data.Result.Meta.MergedInto != r.ID {
		t.Fatalf("the resend's run ended with %+v, want merged into %s", final, r.ID)
	}
	if res, err := dup.Wait(ctx); err != nil || res.Payloads[0].Text != "echo: first" {
		t.Fatalf("wait on the duplicate: %+v, %v", res, err)
	}
	if got := laneSubscriptions(c); got != 0 {
		t.Fatalf("%d subscriptions left", got)
	}
}

// TestFeedLossCallsForACatchUp: a feed that loses messages (its bound) makes
// its follower ask the store at once.
func TestFeedLossCallsForACatchUp(t *testing.T) {
	t.Parallel()
	nc, _, _ := serviceOnly(t)
	c, _ := New(nc)
	lane, err := c.holdLane("lossy")
	if err != nil {
		t.Fatal(err)
	}
	f := lane.open("7", 2, true)
	lane.release()
	defer f.close()
	for range 3 {
		f.push(&nats.Msg{Subject: lane.prefix + "7"})
	}
	if got := len(f.take(nil)); got != 2 || f.lost() != 1 {
		t.Fatalf("took %d, lost %d; want 2 and 1", got, f.lost())
	}
	fl := &follower{r: &Run{ID: "7", c: c}, feed: f, due: time.Now().Add(time.Hour), reconnects: nc.Stats().Reconnects}
	fl.watchConn()
	if fl.due.After(time.Now()) {
		t.Fatalf("a loss scheduled the catch-up in %v", time.Until(fl.due))
	}
}

// TestLaneKeepsEarlyEvents: while a publish waits for its ack, messages of
// runs without a feed are kept (the worker may publish the new run's first
// events before the ack names it) and go to the run's feed when it opens;
// otherwise they are dropped.
func TestLaneKeepsEarlyEvents(t *testing.T) {
	t.Parallel()
	nc, _, _ := serviceOnly(t)
	c, _ := New(nc)
	lane, err := c.holdLane("early")
	if err != nil {
		t.Fatal(err)
	}
	defer lane.release()
	msg := func(run string, i int) *nats.Msg {
		return &nats.Msg{Subject: lane.prefix + run, Data: []byte(fmt.Sprint(i))}
	}
	lane.deliver(msg("8", 0)) // nobody sends: dropped
	lane.sendStarts()
	for i := range earlyKeep + 2 {
		lane.deliver(msg("9", i))
	}
	lane.deliver(msg("10", 0))
	f := lane.open("9", liveBuffer, true)
	defer f.close()
	lane.sendEnds()
	lane.deliver(msg("9", earlyKeep+2)) // live, to the feed
	var got []string
	for _, m := range f.take(nil) {
		got = append(got, string(m.Data))
	}
	// The ring keeps the newest earlyKeep messages: run 10's took a slot.
	if len(got) != earlyKeep || got[0] != "3" || got[len(got)-1] != fmt.Sprint(earlyKeep+2) {
		t.Fatalf("feed took %d messages: %v", len(got), got)
	}
	if g := lane.open("8", liveBuffer, false); len(g.take(nil)) != 0 {
		t.Fatal("a message delivered while nobody sent was kept")
	} else {
		g.close()
	}
	if lane.early != nil {
		t.Fatal("the lane keeps messages after the last send ended")
	}
}

// TestWithoutFollowSubscribesNothing: a send that will not be followed
// sends no SUB (the server holds no subscription of the client's
// connection once the stream acked the message), and its run can still be
// followed to its result, from the store.
func TestWithoutFollowSubscribesNothing(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	startMember(t, srv.URL)
	nc := natstest.Connect(t, srv.URL)
	c, _ := New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	r, err := c.Send(ctx, "unfollowed", "hi", WithoutFollow())
	if err != nil {
		t.Fatal(err)
	}
	cid, err := nc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	// The server takes a connection's SUB before its PUB: had Send
	// subscribed, the server would hold it by the time of the ack.
	connz, err := srv.Connz(&server.ConnzOptions{CID: cid, Subscriptions: true})
	if err != nil || len(connz.Conns) != 1 {
		t.Fatalf("connz: %+v, %v", connz, err)
	}
	for _, sub := range connz.Conns[0].Subs { // the requests' reply subscription is there
		if strings.HasPrefix(sub, events.EventPrefix) {
			t.Fatalf("a send without follow subscribed to %s", sub)
		}
	}
	if laneSubscriptions(c) != 0 || r.live.Load() != nil {
		t.Fatalf("a send without follow left %d subscriptions on the connection", laneSubscriptions(c))
	}
	if res, err := r.Wait(ctx); err != nil || res.Payloads[0].Text != "echo: hi" {
		t.Fatalf("wait: %+v, %v", res, err)
	}
}

// TestKeptFeedsAreBounded: the feeds Send opens that nobody follows yet are
// bounded, oldest out, and with them the lane subscriptions; a lane sent to
// again stays. A run whose feed went out is still followed to its final
// (from the store); one whose feed stayed, from its live events alone.
func TestKeptFeedsAreBounded(t *testing.T) {
	t.Parallel()
	nc, js, ctx := serviceOnly(t)
	cnc := natstest.Connect(t, natsURL(nc))
	c, _ := New(cnc)
	c.keepMax = 3
	runs := map[string]*Run{}
	for _, s := range []string{"k0", "k1", "k2", "k3", "k4"} {
		r, err := c.Send(ctx, s, "hi")
		if err != nil {
			t.Fatal(err)
		}
		runs[s] = r
	}
	if got := laneSubscriptions(c); got != 3 {
		t.Fatalf("%d subscriptions after sends to 5 sessions with a bound of 3", got)
	}
	again, err := c.Send(ctx, "k4", "again") // k2's feed goes out; k4 keeps its lane
	if err != nil {
		t.Fatal(err)
	}
	for s, want := range map[string]bool{"k0": false, "k1": false, "k2": false, "k3": true, "k4": true} {
		if kept := runs[s].live.Load() != nil; kept != want {
			t.Errorf("%s: feed kept %v, want %v", s, kept, want)
		}
	}
	if got := laneSubscriptions(c); got != 2 {
		t.Fatalf("%d subscriptions, want 2 (k3, k4)", got)
	}
	asked := countRequests(t, nc, "k4")
	for _, r := range []*Run{runs["k0"], again} {
		playWorker(ctx, t, js, r.Session, r.ID, 1, 4, 4)
		res, err := r.Wait(ctx)
		if err != nil || res.Payloads[0].Text != "done" {
			t.Fatalf("%s run %s: %+v, %v", r.Session, r.ID, res, err)
		}
	}
	if n := asked(); n != 0 {
		t.Fatalf("the kept run of k4 asked the store %d times", n)
	}
}

// TestClaimedFeedStays: a run being followed keeps its lane subscription
// whatever the client sends meanwhile: the bound counts only feeds nobody
// follows, and the follower gets every event live, up to its final.
func TestClaimedFeedStays(t *testing.T) {
	t.Parallel()
	nc, js, ctx := serviceOnly(t)
	cnc := natstest.Connect(t, natsURL(nc))
	c, _ := New(cnc)
	c.keepMax = 1
	followed, err := c.Send(ctx, "claimed", "hi")
	if err != nil {
		t.Fatal(err)
	}
	fl, err := followed.follow()
	if err != nil {
		t.Fatal(err)
	}
	defer fl.feed.close()
	for _, s := range []string{"other1", "other2", "other3"} {
		if _, err := c.Send(ctx, s, "hi"); err != nil {
			t.Fatal(err)
		}
	}
	if got := laneSubscriptions(c); got != 2 {
		t.Fatalf("%d subscriptions, want 2 (the followed lane, the newest send's)", got)
	}
	asked := countRequests(t, nc, "claimed")
	playWorker(ctx, t, js, "claimed", followed.ID, 1, 5, 5)
	var seqs []string
	fl.run(ctx, func(ev *events.Event, err error) bool {
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, fmt.Sprint(ev.Seq))
		return true
	})
	if got := strings.Join(seqs, " "); got != "1 2 3 4 5" {
		t.Fatalf("yielded seqs %s", got)
	}
	if n := asked(); n != 0 {
		t.Fatalf("the followed run asked the store %d times", n)
	}
}

// TestLaneSubscriptionsShareOneGoroutine: however many lanes a client
// subscribes to, one goroutine reads their messages (nats.go starts one per
// callback subscription), and it returns once the last subscription ends.
// Not parallel: it counts the process's goroutines.
func TestLaneSubscriptionsShareOneGoroutine(t *testing.T) {
	nc, js, ctx := serviceOnly(t)
	c, _ := New(natstest.Connect(t, natsURL(nc)))
	const n = 200
	before := runtime.NumGoroutine()
	held := make([]*laneSub, n)
	for i := range held {
		ls, err := c.holdLane(fmt.Sprintf("g%d", i))
		if err != nil {
			t.Fatal(err)
		}
		held[i] = ls
	}
	if grew := runtime.NumGoroutine() - before; grew > n/10 {
		t.Fatalf("%d goroutines more for %d lane subscriptions", grew, n)
	}
	// The dispatcher delivers: a feed of the last lane gets its run's event.
	f := held[n-1].open("1", liveBuffer, true)
	if err := c.nc.Flush(); err != nil { // the server has the subscriptions
		t.Fatal(err)
	}
	playWorker(ctx, t, js, fmt.Sprintf("g%d", n-1), "1", 1, 1, 2)
	select {
	case <-f.ready:
	case <-ctx.Done():
		t.Fatal("no event reached the feed")
	}
	f.close()
	c.mu.Lock()
	done := c.dispatched
	c.mu.Unlock()
	for _, ls := range held {
		ls.release()
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the dispatcher runs on with no subscription")
	}
	if laneSubscriptions(c) != 0 {
		t.Fatalf("%d subscriptions left", laneSubscriptions(c))
	}
}

// laneSubscriptions returns the subscriptions on c's connection but its
// reply subscriptions, which last as long as the client.
func laneSubscriptions(c *Client) int {
	n := c.nc.NumSubscriptions()
	c.replies.mu.Lock()
	defer c.replies.mu.Unlock()
	return n - len(c.replies.subs)
}

// replySub returns c's current reply subscription, nil for none.
func replySub(c *Client) *nats.Subscription {
	c.replies.mu.Lock()
	defer c.replies.mu.Unlock()
	if c.replies.cur == nil {
		return nil
	}
	return c.replies.cur.sub
}

// TestRequestsShareOneReplySubscription: a client's requests (sends, lane
// service calls) get their replies on one subscription, which stays until
// Close; no request leaves a waiter behind.
func TestRequestsShareOneReplySubscription(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	startMember(t, srv.URL)
	nc := natstest.Connect(t, srv.URL)
	c, _ := New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var first *nats.Subscription
	for i := range 5 {
		r, err := c.Send(ctx, "replies", fmt.Sprint("hello ", i), WithoutFollow())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		sub := replySub(c)
		c.replies.mu.Lock()
		waiting := len(c.replies.waiting)
		c.replies.mu.Unlock()
		if first == nil {
			first = sub
		}
		if sub == nil || sub != first || waiting != 0 {
			t.Fatalf("request %d: reply subscription %p (first %p), %d waiters left", i, sub, first, waiting)
		}
	}
	if err := nc.Flush(); err != nil { // the server has the followers' UNSUBs
		t.Fatal(err)
	}
	cid, _ := nc.GetClientID()
	connz, err := srv.Connz(&server.ConnzOptions{CID: cid, Subscriptions: true})
	if err != nil || len(connz.Conns) != 1 {
		t.Fatalf("connz: %+v, %v", connz, err)
	}
	if subs := connz.Conns[0].Subs; len(subs) != 1 || subs[0] != first.Subject {
		t.Fatalf("the server holds %v for the client, want %s alone", subs, first.Subject)
	}
	// Close ends it on a connection the client does not own; a later
	// request makes a new one.
	c.Close()
	if laneSubscriptions(c) != 0 || nc.NumSubscriptions() != 0 {
		t.Fatalf("%d subscriptions after Close", nc.NumSubscriptions())
	}
	if _, err := c.Send(ctx, "replies", "after close", WithoutFollow()); err != nil || replySub(c) == first {
		t.Fatalf("send after Close: %v (reply subscription %p, first %p)", err, replySub(c), first)
	}
}

// TestCloseEndsUnclaimedFeeds: Close expires the feeds Send opened that
// nobody followed: their lane subscriptions end, and with the last one the
// dispatcher goroutine, at once rather than after claimWithin.
func TestCloseEndsUnclaimedFeeds(t *testing.T) {
	t.Parallel()
	nc, _, ctx := serviceOnly(t)
	cnc := natstest.Connect(t, natsURL(nc))
	c, _ := New(cnc)
	var runs []*Run
	for _, s := range []string{"close0", "close1", "close2"} {
		r, err := c.Send(ctx, s, "hi")
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	if got := laneSubscriptions(c); got != 3 {
		t.Fatalf("%d lane subscriptions after 3 sends, want 3", got)
	}
	c.mu.Lock()
	done := c.dispatched
	c.mu.Unlock()
	c.Close()
	if n := cnc.NumSubscriptions(); n != 0 {
		t.Fatalf("%d subscriptions after Close", n)
	}
	for _, r := range runs {
		if r.live.Load() != nil {
			t.Fatalf("run %s keeps its feed after Close", r.ID)
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the dispatcher runs on after Close")
	}
}

// TestFullDispatchChannelCountsALoss: when the client's shared lane
// channel is full, nats.go drops the newest message and counts the drop on
// that message's own subscription: the feed of its lane counts a loss and
// its follower asks the store at once; the lane whose messages filled the
// channel loses nothing.
func TestFullDispatchChannelCountsALoss(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	pub := natstest.Connect(t, srv.URL)
	nc := natstest.Connect(t, srv.URL)
	c, _ := New(nc)
	c.evs = make(chan *nats.Msg, 1)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	laneA, err := c.holdLane("fullA")
	if err != nil {
		t.Fatal(err)
	}
	defer laneA.release()
	laneB, err := c.holdLane("fullB")
	if err != nil {
		t.Fatal(err)
	}
	defer laneB.release()
	fa, fb := laneA.open("7", liveBuffer, true), laneB.open("7", liveBuffer, true)
	defer fa.close()
	defer fb.close()
	if err := nc.Flush(); err != nil { // the server has the subscriptions
		t.Fatal(err)
	}
	// publish sends n messages to the run's subject of lane and waits until
	// the client's connection has handed them on (or dropped them).
	publish := func(lane *laneSub, n int) {
		t.Helper()
		for range n {
			if err := pub.Publish(lane.prefix+"7", nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := pub.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil { // the PONG comes after the messages
			t.Fatal(err)
		}
	}
	laneA.mu.Lock() // the dispatcher blocks on lane A's first message
	publish(laneA, 1)
	for len(c.evs) != 0 {
		select {
		case <-ctx.Done():
			laneA.mu.Unlock()
			t.Fatal("the dispatcher never took lane A's message")
		case <-time.After(time.Millisecond):
		}
	}
	publish(laneA, 1) // fills the channel
	publish(laneB, 3) // dropped
	laneA.mu.Unlock()
	if a, b := fa.lost(), fb.lost(); a != 0 || b != 3 {
		t.Fatalf("lane A's feed lost %d, lane B's %d; want 0 and 3", a, b)
	}
	fl := &follower{r: &Run{ID: "7", c: c}, feed: fb, due: time.Now().Add(time.Hour), reconnects: nc.Stats().Reconnects}
	fl.watchConn()
	if fl.due.After(time.Now()) {
		t.Fatalf("the loss scheduled the catch-up in %v", time.Until(fl.due))
	}
	var got int
	for got < 2 {
		select {
		case <-fa.ready:
			got += len(fa.take(nil))
		case <-ctx.Done():
			t.Fatalf("lane A's feed got %d of its 2 messages", got)
		}
	}
}
