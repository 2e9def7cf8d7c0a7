package fleet

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/provider/scripted"
	"github.com/lanefleet/lanefleet/sessionindex"
)

// TestListingFromIndex: after real turns, the sessions listing the
// admin service pages through the session index says what the listing
// that reads every session's subjects says (order, every field, totals,
// scope, query, pages followed by their next); a forgotten session leaves
// it. It fails without the index's writes (the listing is empty).
func TestListingFromIndex(t *testing.T) {
	t.Parallel()
	m, c, ctx := runMember(t, Config{DataDir: t.TempDir()})
	// acme:a twice: its second turn moves it to the top.
	latest := map[string]string{}
	for _, key := range []string{"plain", "acme:a", "beta:c", "acme:b", "acme:a", "acme:z"} {
		run, err := c.Send(ctx, key, "hello "+key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		latest[key] = run.ID
	}
	waitIndexed(ctx, t, m, latest)
	// The lanes let go and deleted their processed messages: both
	// listings read the same stored counts.
	for tick := time.NewTicker(10 * time.Millisecond); ; <-tick.C {
		info, err := m.Streams.Inbound.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			tick.Stop()
			break
		}
	}
	old := admin.Config{JS: m.JS, Inbound: m.Streams.Inbound, Events: m.Streams.Events, Dead: m.Streams.Dead, Runs: m.Runs, Lanes: m.Lanes, Logger: m.log}
	cases := []struct {
		name  string
		q     admin.SessionsRequest
		total int // the index's count; -1 not counted
	}{
		{"all", admin.SessionsRequest{State: true}, 5},
		{"pages of two", admin.SessionsRequest{State: true, Limit: 2}, 5},
		{"a tenant", admin.SessionsRequest{State: true, Limit: 2, Scope: &admin.Scope{Prefixes: []string{"acme:"}}}, -1},
		{"keys", admin.SessionsRequest{State: true, Limit: 1, Scope: &admin.Scope{Keys: []string{"beta:c", "plain", "nobody"}}}, 2},
		{"keys and a prefix", admin.SessionsRequest{Scope: &admin.Scope{Prefixes: []string{"beta:"}, Keys: []string{"plain"}}}, -1},
		{"a prefix within a group", admin.SessionsRequest{Scope: &admin.Scope{Prefixes: []string{"acme:a"}}}, -1},
		{"query", admin.SessionsRequest{State: true, Limit: 1, Query: "E:A"}, -1},
		{"offset", admin.SessionsRequest{Offset: 2, Limit: 2}, 5},
	}
	for _, tc := range cases {
		want, wantTotal := listAll(ctx, t, func(q admin.SessionsRequest) (admin.SessionsReply, error) { return admin.ListSessions(ctx, old, q) }, tc.q)
		got, total := listAll(ctx, t, func(q admin.SessionsRequest) (admin.SessionsReply, error) { return c.SessionsPage(ctx, q) }, tc.q)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: from the index\n%s\nreading every subject\n%s", tc.name, show(got), show(want))
		}
		if total != tc.total || (total >= 0 && total != wantTotal) {
			t.Errorf("%s: total %d, want %d (reading every subject: %d)", tc.name, total, tc.total, wantTotal)
		}
	}
	if got, _ := listAll(ctx, t, func(q admin.SessionsRequest) (admin.SessionsReply, error) { return c.SessionsPage(ctx, q) }, admin.SessionsRequest{}); len(got) != 5 || got[0].Key != "acme:z" || got[1].Key != "acme:a" {
		t.Fatalf("newest first: %s", show(got))
	}

	// Forgotten: gone from the index, and from the listing.
	if _, err := c.Forget(ctx, "beta:c"); err != nil {
		t.Fatal(err)
	}
	got, total := listAll(ctx, t, func(q admin.SessionsRequest) (admin.SessionsReply, error) { return c.SessionsPage(ctx, q) }, admin.SessionsRequest{})
	for _, s := range got {
		if s.Key == "beta:c" {
			t.Fatalf("a forgotten session is listed: %s", show(got))
		}
	}
	if len(got) != 4 || total != 4 {
		t.Fatalf("after the forget: %d listed, total %d: %s", len(got), total, show(got))
	}
}

// listAll follows a listing's pages from q to its end.
func listAll(ctx context.Context, t *testing.T, list func(admin.SessionsRequest) (admin.SessionsReply, error), q admin.SessionsRequest) ([]admin.Session, int) {
	t.Helper()
	var out []admin.Session
	total := 0
	for page := 0; ; page++ {
		rep, err := list(q)
		if err != nil {
			t.Fatalf("page %d of %+v: %v", page, q, err)
		}
		if page == 0 {
			total = rep.Total
		}
		out = append(out, rep.Sessions...)
		if rep.Next == "" || q.Offset > 0 || ctx.Err() != nil {
			return out, total
		}
		if page > 10 {
			t.Fatalf("%+v: more pages than sessions", q)
		}
		q.After = rep.Next
	}
}

func show(ss []admin.Session) string {
	b, _ := json.MarshalIndent(ss, "", " ")
	return string(b)
}

// waitIndexed waits until the index holds each session's entry with its
// latest run, reading the stream's messages as they are stored.
func waitIndexed(ctx context.Context, t *testing.T, m *Member, latest map[string]string) {
	t.Helper()
	cons, err := m.JS.OrderedConsumer(ctx, sessionindex.Stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < len(latest) {
		msg, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			t.Fatalf("index entries %v of %v: %v", seen, latest, err)
		}
		var rec sessionindex.Record
		_ = json.Unmarshal(msg.Data(), &rec)
		for key, run := range latest {
			if subj, _ := sessionindex.Subject(key); subj == msg.Subject() && rec.Run == run {
				seen[key] = true
			}
		}
	}
}

// TestListingQueued: a new session whose first message waits for a slot
// (the worker's one slot runs another session's long turn) is listed,
// queued, before its turn starts. It was not listed until its turn
// started before Queued.
func TestListingQueued(t *testing.T) {
	t.Parallel()
	// The long turn is cancelled when the test ends.
	m, c, ctx := runMember(t, Config{DataDir: t.TempDir(), Concurrency: 1, ShutdownGrace: time.Millisecond})
	busy, err := c.Send(ctx, "acme:busy", scriptText(t, scripted.Reply{Text: "slow", DelayMs: 60_000}), lanefleet.WithModel("scripted/script"))
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range busy.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Stream == events.StreamLifecycle && ev.Data.Phase == events.PhaseStart {
			break // its turn runs: the slot is taken
		}
	}
	waiting, err := c.Send(ctx, "acme:waiting", "hello", lanefleet.WithoutFollow())
	if err != nil {
		t.Fatal(err)
	}
	waitIndexed(ctx, t, m, map[string]string{"acme:waiting": waiting.ID})
	rep, err := c.SessionsPage(ctx, admin.SessionsRequest{State: true})
	if err != nil {
		t.Fatal(err)
	}
	// acme:busy's state may say queued a moment longer: its run is
	// registered after its start event.
	var keys []string
	for _, s := range rep.Sessions {
		if s.Key == "acme:waiting" {
			keys = append(keys, s.Key+" "+s.State)
		} else {
			keys = append(keys, s.Key)
		}
	}
	slices.Sort(keys)
	if want := []string{"acme:busy", "acme:waiting " + admin.StateQueued}; !slices.Equal(keys, want) {
		t.Fatalf("listed %q, want %q", keys, want)
	}
}
