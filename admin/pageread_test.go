package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes"
	"github.com/lanefleet/lanefleet/sessionindex"
)

// TestPageRequestsBounded: a page of the sessions listing from the index
// costs the same few JetStream requests whether the fleet holds 100
// sessions or 10,000 and whether the page shows 10 sessions or 100:
// reads of the page's sessions' events, messages, running runs and
// leases go together, not one session at a time, and the total is the
// index stream's state read for the page. It fails on the listing that
// read each session by itself (three to five requests a session). The
// page says what the listing that reads each session by itself says:
// the batched reads change how, not what.
func TestPageRequestsBounded(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	streams, err := lanes.EnsureStreams(ctx, js, lanes.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	runs, err := kvstore.OpenRuns(ctx, js, kvstore.RunsConfig{})
	if err != nil {
		t.Fatal(err)
	}
	lns, err := kvstore.Open(ctx, js, kvstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	x, _, err := sessionindex.Ensure(ctx, js, sessionindex.Config{MaxBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.Close() })
	cfg := admin.Config{JS: js, Inbound: streams.Inbound, Events: streams.Events, Dead: streams.Dead, Runs: runs, Lanes: lns, Index: x,
		Logger: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)}
	svc, err := admin.Serve(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	client := natstest.Connect(t, srv.URL)

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
	// One whose message waits, one running on a live worker.
	idle("acme:quiet")
	idle("acme:waits")
	tok, _ := events.KeyToken("acme:waits")
	publish(events.InboundPrefix+tok, []byte(`{"text":"again"}`))
	idle("acme:busy")
	tok, _ = events.KeyToken("acme:busy")
	run := publish(events.InboundPrefix+tok, []byte(`{"text":"go"}`))
	publish(events.EventPrefix+tok+"."+strconv.FormatUint(run, 10), []byte("start"))
	if _, err := runs.Register(ctx, tok, kvstore.RunInfo{Session: "acme:busy", RunID: strconv.FormatUint(run, 10), Worker: "w-9", StartedAt: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	if _, err := lns.Acquire(ctx, tok, kvstore.LeaseInfo{Worker: "w-9", Acquired: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
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
		for _, key := range []string{"acme:quiet", "acme:waits", "acme:busy"} {
			entry(key, records[key])
		}
	}
	// page asks the service for a page and counts what the service's
	// connection sent meanwhile: its JetStream requests and its reply.
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
			if len(rep.Sessions) != limit || rep.Total != n+3 {
				t.Fatalf("%s: %d sessions, total %d", name, len(rep.Sessions), rep.Total)
			}
			if reqs > 12 {
				t.Errorf("%s: %d JetStream requests", name, reqs)
			}
			want, err := admin.ListSessions(ctx, single, q)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rep, want) {
				t.Errorf("%s: batched\n%+v\nsession by session\n%+v", name, rep, want)
			}
			byKey := map[string]admin.Session{}
			for _, s := range rep.Sessions {
				byKey[s.Key] = s
			}
			if s := byKey["acme:busy"]; s.State != admin.StateRunning || s.Worker != "w-9" || s.Holding != string(kvstore.HoldingLive) || s.Stored != 1 || s.Runs != 3 {
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
	for _, n := range counts {
		if n != counts["100 sessions, a page of 10"] {
			t.Errorf("JetStream requests a page: %v, want the same for each", counts)
			break
		}
	}
	t.Logf("JetStream requests a page: %v", counts)
}
