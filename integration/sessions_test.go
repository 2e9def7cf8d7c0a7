package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
)

// TestNothingOutlivesItsTurn: after many sessions' turns, each followed by
// the client, the server holds nothing per session or per run but what a
// policy bounds: the server's subscriptions are back where they were, no
// consumer is left but the dispatch consumer and the auth watcher, no
// inbound subject remains, the run registry empties, and with
// --session-ttl the idle sessions' transcripts go too.
func TestNothingOutlivesItsTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "ttl", Concurrency: 8, NoRemoteTools: true, SessionTTL: time.Second})
	nc := natstest.Connect(t, srv.URL)
	js := newJS(t, nc)
	c, _ := lanefleet.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute) // detects a hang only
	defer cancel()
	turn := func(session, text string) {
		t.Helper()
		run, err := c.Send(ctx, session, text)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := run.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	turn("warm-up", "hello") // the client's request subscription, set up once
	baseSubs, baseSubjects := srv.NumSubscriptions(), subscriptions(t, srv)
	const sessions = 40
	for i := range sessions {
		for j := range 2 {
			turn(fmt.Sprintf("s%d", i), fmt.Sprintf("turn %d", j))
		}
	}
	consumers := func() map[string]int {
		out := map[string]int{}
		for name := range js.StreamNames(ctx).Name() {
			s, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			out[name] = s.CachedInfo().State.Consumers
		}
		return out
	}
	state := func(name string) jetstream.StreamState {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
		if err != nil {
			t.Fatal(err)
		}
		return info.State
	}
	// Nothing per session: no client subscription names a session, and
	// the server's count (which includes JetStream's own, per consumer)
	// is back within a few of where it was. The few are once-per-process
	// things a busy machine may start only after the warm-up turn (an
	// ordered consumer recreated after missed heartbeats, say); a leak
	// per session or run would be 40 or more.
	const slack = 4
	perSession := func() []string {
		var out []string
		for sub := range subscriptions(t, srv) {
			for i := range sessions {
				if strings.HasSuffix(sub, fmt.Sprintf(".s%d", i)) || strings.Contains(sub, fmt.Sprintf(".s%d.", i)) {
					out = append(out, sub)
				}
			}
		}
		return out
	}
	eventuallyExplained(t, "subscriptions back to the baseline", func() bool {
		return srv.NumSubscriptions() <= baseSubs+slack && len(perSession()) == 0
	}, func() string {
		return fmt.Sprintf("%d subscriptions, baseline %d; per session: %v; clients' more than at the baseline: %v; consumers: %v",
			srv.NumSubscriptions(), baseSubs, perSession(), extraSubscriptions(baseSubjects, subscriptions(t, srv)), consumers())
	})
	if got := consumers(); got[events.InboundStream] != 1 || got[events.EventStream] != 0 || got["KV_"+kvstore.DefaultBucket] != 0 ||
		got["KV_"+kvstore.DefaultRunsBucket] != 0 {
		t.Fatalf("consumers per stream: %v, want the dispatch consumer alone (and the auth watcher)", got)
	}
	// Processed messages are deleted once their run's final is stored.
	eventually(t, "no message or subject left in AGENT_IN", func() bool {
		st := state(events.InboundStream)
		return st.Msgs == 0 && st.NumSubjects == 0
	})
	eventually(t, "the run registry empty (markers expired)", func() bool { return state("KV_"+kvstore.DefaultRunsBucket).Msgs == 0 })
	// The sweep (every AckWait, 5 s here) forgets sessions idle for 1 s.
	history := func(session string) int {
		h, err := c.History(ctx, session)
		if err != nil {
			t.Fatal(err)
		}
		return len(h)
	}
	eventually(t, "the last idle session's transcript forgotten", func() bool { return history(fmt.Sprintf("s%d", sessions-1)) == 0 })
	for i := range sessions {
		if n := history(fmt.Sprintf("s%d", i)); n != 0 {
			t.Fatalf("session s%d still has %d entries", i, n)
		}
	}
}

// eventually polls cond until it holds; the deadline only detects a hang.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventuallyExplained(t, what, cond, func() string { return "" })
}

// eventuallyExplained is eventually whose failure adds explain's text.
func eventuallyExplained(t *testing.T, what string, cond func() bool, explain func() string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s %s", what, explain())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// subscriptions counts the server's client subscriptions by subject.
func subscriptions(t *testing.T, srv *natstest.Server) map[string]int {
	t.Helper()
	cz, err := srv.Connz(&server.ConnzOptions{Subscriptions: true, Limit: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, c := range cz.Conns {
		for _, s := range c.Subs {
			out[c.Name+" "+s]++
		}
	}
	return out
}

// extraSubscriptions lists the subjects now has more subscriptions on
// than base.
func extraSubscriptions(base, now map[string]int) []string {
	var out []string
	for s, n := range now {
		if n > base[s] {
			out = append(out, fmt.Sprintf("%s (+%d)", s, n-base[s]))
		}
	}
	slices.Sort(out)
	return out
}
