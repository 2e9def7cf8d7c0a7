package admin_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/directget"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/sessionindex"
)

// indexed is the bundle's admin configuration with a lanes bucket and a
// session index.
func (b *bundle) indexed(t *testing.T) admin.Config {
	t.Helper()
	lns, err := kvstore.Open(b.ctx, b.js, kvstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	x, _, err := sessionindex.Ensure(b.ctx, b.js, sessionindex.Config{MaxBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.Close() })
	cfg := b.config(t)
	cfg.Lanes, cfg.Index = lns, x
	return cfg
}

// TestPageRequestsBounded: a page of the sessions listing from the index
// costs the same few JetStream requests whether the fleet holds 100
// sessions or 10,000 and whether the page shows 10 sessions or 100:
// reads of the page's sessions' events, messages, running runs and
// leases go together, not one session at a time, and the total is the
// index stream's state read for the page; only a lane with messages
// stored has them counted by itself. It fails on the listing that read
// each session by itself (three to five requests a session). The
// page says what the listing that reads each session by itself says:
// the batched reads change how, not what.
func TestPageRequestsBounded(t *testing.T) {
	t.Parallel()
	b := stores(t, 2*time.Minute)
	nc, js, ctx, streams, runs := b.nc, b.js, b.ctx, b.streams, b.runs
	cfg := b.indexed(t)
	lns := cfg.Lanes

	publish := func(subj string, data []byte) uint64 {
		t.Helper()
		ack, err := js.Publish(ctx, subj, data)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	records := map[string]sessionindex.Record{}
	entry := func(key string, rec sessionindex.Record) {
		t.Helper()
		subj, _ := sessionindex.Subject(key)
		data, _ := json.Marshal(rec)
		publish(subj, data)
		records[key] = rec
	}
	// Idle sessions: two runs with stored events, their entry written
	// at their last commit.
	idle := func(key string) {
		tok, _ := events.KeyToken(key)
		var run uint64
		for range 2 {
			run = publish(events.InboundPrefix+tok, []byte(`{"text":"hi"}`))
			publish(events.EventPrefix+tok+"."+strconv.FormatUint(run, 10), []byte("final"))
		}
		if err := streams.Inbound.Purge(ctx, jetstream.WithPurgeSubject(events.InboundPrefix+tok)); err != nil {
			t.Fatal(err)
		}
		entry(key, sessionindex.Record{Run: strconv.FormatUint(run, 10), Committed: true, Through: run, Turns: 2, CostUSD: 0.5})
	}
	// One whose message waits, four running on a live worker.
	const busy = 4
	idle("acme:quiet")
	idle("acme:waits")
	tok, _ := events.KeyToken("acme:waits")
	publish(events.InboundPrefix+tok, []byte(`{"text":"again"}`))
	newest := []string{"acme:quiet", "acme:waits"}
	for i := range busy {
		key := "acme:busy-" + strconv.Itoa(i)
		newest = append(newest, key)
		idle(key)
		tok, _ := events.KeyToken(key)
		run := publish(events.InboundPrefix+tok, []byte(`{"text":"go"}`))
		publish(events.EventPrefix+tok+"."+strconv.FormatUint(run, 10), []byte("start"))
		if _, err := runs.Register(ctx, tok, kvstore.RunInfo{Session: key, RunID: strconv.FormatUint(run, 10), Worker: "w-9", StartedAt: time.Now().UnixMilli()}); err != nil {
			t.Fatal(err)
		}
		if _, err := lns.Acquire(ctx, tok, kvstore.LeaseInfo{Worker: "w-9", Acquired: time.Now().UnixMilli()}); err != nil {
			t.Fatal(err)
		}
	}
	// The listing's clock stops here: the leases stay live however long
	// the sessions below take to write.
	acquired := time.Now()
	cfg.Now = func() time.Time { return acquired }
	filled := 0
	fill := func(n int) {
		t.Helper()
		for ; filled < n; filled++ {
			key := "t" + strconv.Itoa(filled%10) + ":s-" + strconv.Itoa(filled)
			tok, _ := events.KeyToken(key)
			if _, err := js.PublishAsync(events.EventPrefix+tok+"."+strconv.Itoa(filled+1), []byte("final"), jetstream.WithStallWait(time.Minute)); err != nil {
				t.Fatal(err)
			}
			subj, _ := sessionindex.Subject(key)
			rec, _ := json.Marshal(sessionindex.Record{Run: strconv.Itoa(filled + 1), Committed: true, Through: uint64(filled + 1), Turns: 1})
			if _, err := js.PublishAsync(subj, rec, jetstream.WithStallWait(time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		// The three above are the newest again.
		for _, key := range newest {
			entry(key, records[key])
		}
	}
	// page asks the service for a page and counts what the service's
	// connection sent meanwhile: its JetStream requests and its reply.
	svc, err := admin.Serve(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	client := natstest.Connect(t, nc.ConnectedUrl())
	page := func(q admin.SessionsRequest) (admin.SessionsReply, int) {
		t.Helper()
		sent := nc.Stats().OutMsgs
		data, _ := json.Marshal(q)
		msg, err := client.RequestWithContext(ctx, admin.Subject(admin.OpSessions), data)
		if err != nil {
			t.Fatal(err)
		}
		var rep admin.SessionsReply
		if err := msgpack.Unmarshal(msg.Data, &rep); err != nil {
			t.Fatalf("%s: %s", err, msg.Data)
		}
		return rep, int(nc.Stats().OutMsgs-sent) - 1
	}
	// What the listing says reading each session by itself (no JS: no
	// Direct Gets).
	single := cfg
	single.JS = nil
	counts := map[string]int{}
	for _, n := range []int{100, 10_000} {
		fill(n)
		for _, limit := range []int{10, 100} {
			q := admin.SessionsRequest{Limit: limit, State: true}
			rep, reqs := page(q)
			name := fmt.Sprintf("%d sessions, a page of %d", n, limit)
			counts[name] = reqs
			if len(rep.Sessions) != limit || rep.Total != n+len(newest) {
				t.Fatalf("%s: %d sessions, total %d", name, len(rep.Sessions), rep.Total)
			}
			// The index's state and entries, the page's events, lane
			// messages, registry entries and leases, and the count of
			// each lane with messages stored (the waiting one and the
			// running ones).
			if want := 6 + 1 + busy; reqs != want {
				t.Errorf("%s: %d JetStream requests, want %d", name, reqs, want)
			}
			want, err := admin.ListSessions(ctx, single, q)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Sessions) != len(want.Sessions) || rep.Total != want.Total || rep.Next != want.Next {
				t.Errorf("%s: batched %d sessions, total %d, next %q; session by session %d, %d, %q", name,
					len(rep.Sessions), rep.Total, rep.Next, len(want.Sessions), want.Total, want.Next)
			}
			for i := range min(len(rep.Sessions), len(want.Sessions)) {
				if !reflect.DeepEqual(rep.Sessions[i], want.Sessions[i]) {
					t.Errorf("%s: session %d batched\n%+v\nsession by session\n%+v", name, i, rep.Sessions[i], want.Sessions[i])
				}
			}
			byKey := map[string]admin.Session{}
			for _, s := range rep.Sessions {
				byKey[s.Key] = s
			}
			if s := byKey["acme:busy-1"]; s.State != admin.StateRunning || s.Worker != "w-9" || s.Holding != string(kvstore.HoldingLive) || s.Stored != 1 || s.Runs != 3 {
				t.Errorf("%s: the running session: %+v", name, s)
			}
			if s := byKey["acme:waits"]; s.State != admin.StateQueued || s.Stored != 1 || s.Turns != 2 {
				t.Errorf("%s: the waiting session: %+v", name, s)
			}
			if s := byKey["acme:quiet"]; s.State != admin.StateIdle || s.Runs != 2 || s.Turns != 2 || s.CostUSD != 0.5 || s.LastActivity == 0 {
				t.Errorf("%s: an idle session: %+v", name, s)
			}
		}
	}
	// A page of none asks nothing of the page's sessions.
	if rep, err := admin.ListSessions(ctx, cfg, admin.SessionsRequest{Limit: 10, State: true, Query: "no such key"}); err != nil || len(rep.Sessions) != 0 {
		t.Fatalf("a page of none: %+v, %v", rep, err)
	}
	// A session with more runs' events than one answer holds: the
	// page's runs are counted session by session, and the page says
	// the same.
	tok, _ = events.KeyToken("acme:quiet")
	for i := range directget.MultiLastMax + 10 {
		if _, err := js.PublishAsync(events.EventPrefix+tok+"."+strconv.Itoa(1_000_000+i), []byte("final"), jetstream.WithStallWait(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	<-js.PublishAsyncComplete()
	q := admin.SessionsRequest{Limit: 10, State: true}
	rep, _ := page(q)
	want, err := admin.ListSessions(ctx, single, q)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rep, want) || len(rep.Sessions) != 10 || rep.Sessions[5].Key != "acme:quiet" || rep.Sessions[5].Runs != directget.MultiLastMax+12 {
		t.Errorf("over %d runs: batched\n%+v\nsession by session\n%+v", directget.MultiLastMax, rep.Sessions[:6], want.Sessions[:min(6, len(want.Sessions))])
	}
	for _, n := range counts {
		if n != counts["100 sessions, a page of 10"] {
			t.Errorf("JetStream requests a page: %v, want the same for each", counts)
			break
		}
	}
}

// TestPageCountCarriesNoMessage: a page counts a waiting lane's stored
// messages without reading any of them: the old count, a Direct Get of a
// batch of one, carried the lane's oldest message whole (here 800 KB)
// to learn how many follow it.
func TestPageCountCarriesNoMessage(t *testing.T) {
	t.Parallel()
	b := stores(t, 2*time.Minute)
	js, ctx := b.js, b.ctx
	cfg := b.indexed(t)
	const key, big = "acme:waits", 800 << 10
	tok, _ := events.KeyToken(key)
	for _, data := range [][]byte{make([]byte, big), []byte(`{"text":"again"}`), []byte(`{"text":"and again"}`)} {
		if _, err := js.Publish(ctx, events.InboundPrefix+tok, data); err != nil {
			t.Fatal(err)
		}
	}
	subj, _ := sessionindex.Subject(key)
	rec, _ := json.Marshal(sessionindex.Record{Run: "1", Committed: true, Through: 1, Turns: 1})
	if _, err := js.Publish(ctx, subj, rec); err != nil {
		t.Fatal(err)
	}
	in := b.nc.Stats().InBytes
	rep, err := admin.ListSessions(ctx, cfg, admin.SessionsRequest{Limit: 10, State: true})
	loaded := b.nc.Stats().InBytes - in
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Sessions) != 1 || rep.Sessions[0].Stored != 3 || rep.Sessions[0].State != admin.StateQueued {
		t.Fatalf("page: %+v", rep.Sessions)
	}
	if loaded > big/4 {
		t.Errorf("the page read %d bytes, with an %d-byte message waiting", loaded, big)
	}
}

// TestPageEventsOverTheirBytes: a page whose runs' last events are more
// than one events read holds (pageEventsMax) counts each session's runs
// by itself, and says what the listing that reads each session by itself
// says.
func TestPageEventsOverTheirBytes(t *testing.T) {
	t.Parallel()
	b := stores(t, 2*time.Minute)
	js, ctx := b.js, b.ctx
	cfg := b.indexed(t)
	final := make([]byte, 900<<10) // three runs' finals: over 2 MiB
	for i := range 3 {
		key := "acme:big-" + strconv.Itoa(i)
		tok, _ := events.KeyToken(key)
		for run := range 2 {
			if _, err := js.Publish(ctx, events.EventPrefix+tok+"."+strconv.Itoa(10*i+run+1), final); err != nil {
				t.Fatal(err)
			}
		}
		subj, _ := sessionindex.Subject(key)
		rec, _ := json.Marshal(sessionindex.Record{Run: strconv.Itoa(10*i + 2), Committed: true, Through: uint64(10*i + 2), Turns: 2})
		if _, err := js.Publish(ctx, subj, rec); err != nil {
			t.Fatal(err)
		}
	}
	q := admin.SessionsRequest{Limit: 10, State: true}
	rep, err := admin.ListSessions(ctx, cfg, q)
	if err != nil {
		t.Fatal(err)
	}
	single := cfg
	single.JS = nil
	want, err := admin.ListSessions(ctx, single, q)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rep, want) || len(rep.Sessions) != 3 {
		t.Fatalf("batched\n%+v\nsession by session\n%+v", rep, want)
	}
	for _, s := range rep.Sessions {
		if s.Runs != 2 || s.LastActivity == 0 {
			t.Errorf("%s: %d runs, last activity %d", s.Key, s.Runs, s.LastActivity)
		}
	}
}
