package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider/scripted"
)

// finals follows session's runs from now on: each final event's result,
// in the order the lane published them.
func finals(t *testing.T, nc *nats.Conn, session string) <-chan *events.Result {
	t.Helper()
	tok, err := events.KeyToken(session)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *events.Result, 64)
	sub, err := nc.Subscribe(events.EventPrefix+tok+".*", func(m *nats.Msg) {
		ev, err := events.DecodeEvent(m.Header.Get(events.HeaderContentType), m.Data)
		if err == nil && ev.Stream == events.StreamFinal && ev.Data.Result != nil {
			ch <- ev.Data.Result
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ch
}

// untilNoChildren takes finals until one leaves the session with no
// pending child, and returns them all.
func untilNoChildren(t *testing.T, ctx context.Context, ch <-chan *events.Result) []*events.Result {
	t.Helper()
	var out []*events.Result
	for {
		select {
		case r := <-ch:
			out = append(out, r)
			if st := r.Meta.Session; len(out) > 1 && st != nil && len(st.Children) == 0 {
				return out
			}
		case <-ctx.Done():
			t.Fatalf("the parent still waits for children after %d runs", len(out))
		}
	}
}

// completions returns the sub-agent results a session's transcript holds,
// by child session, each with the assistant reply that answered it.
func completions(t *testing.T, ctx context.Context, c *lanefleet.Client, session string) map[string][]string {
	t.Helper()
	h, err := c.History(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for i, e := range h {
		m := e.Message
		if m == nil || m.Role != message.RoleUser || !strings.HasPrefix(m.Content.Text(), "[Sub-agent result") {
			continue
		}
		text := m.Content.Text()
		_, rest, _ := strings.Cut(text, "(session ")
		child, _, _ := strings.Cut(rest, ",")
		answer := ""
		if i+1 < len(h) && h[i+1].Message != nil && h[i+1].Message.Role == message.RoleAssistant {
			answer = h[i+1].Message.Content.Text()
		}
		out[child] = append(out[child], answer)
	}
	return out
}

// TestSubagentsOnAFleet: a session spawns three sub-agents and yields,
// which ends its turn (the reply scripted after the yield is never asked
// for; the run's stop reason says it yielded and how many sub-agents it
// waits for); each child runs its task in its own session (its start event naming the
// parent), and its completion reaches the parent's lane once, as a message
// marked as a sub-agent's result, which the parent's next turn answers.
// The parent's running cost includes each child's whole use; its pending
// children go as their completions arrive.
func TestSubagentsOnAFleet(t *testing.T) {
	t.Parallel()
	m, c, ctx := maskingMember(t, Config{SessionTools: "tenant", SessionSender: clientSender, NoBuiltinTools: true})
	parent := "acme:lead"
	fin := finals(t, m.Conn, parent)
	var replies []scripted.Reply
	for _, l := range []string{"alpha", "beta", "gamma"} {
		replies = append(replies, calls("s-"+l, "sessions_spawn", map[string]any{"task": "research " + l, "label": l}))
	}
	replies = append(replies, calls("y", "sessions_yield", nil), scripted.Reply{Text: "waiting for my sub-agents"})
	v := watch(t, ctx, c, parent, scriptText(t, replies...), lanefleet.WithModel("scripted/script"))
	if v.runErr != nil {
		t.Fatal(v.runErr)
	}
	if r := v.result; r.Meta.StopReason != events.StopYielded || r.Meta.Waiting != 3 || len(r.Payloads) != 0 {
		t.Fatalf("the spawning turn ended with stop reason %q, waiting for %d, payloads %+v; want it yielded, waiting for 3",
			r.Meta.StopReason, r.Meta.Waiting, r.Payloads)
	}
	res := toolResults(t, ctx, c, parent)
	var children []string
	for _, l := range []string{"alpha", "beta", "gamma"} {
		text := res["s-"+l]
		_, rest, ok := strings.Cut(text, "Sub-agent started: session ")
		child, _, _ := strings.Cut(rest, ",")
		if !ok || !strings.HasPrefix(child, parent+":subagent:") {
			t.Fatalf("spawn %s: %q", l, text)
		}
		children = append(children, child)
	}
	runs := untilNoChildren(t, ctx, fin)
	if st := runs[0].Meta.Session; st == nil || len(st.Children) != 3 {
		t.Fatalf("the spawning turn's state: %+v", st)
	}
	got := completions(t, ctx, c, parent)
	h, err := c.History(ctx, parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range h {
		if m := e.Message; m != nil && m.Role == message.RoleAssistant && strings.Contains(m.Content.Text(), "waiting for my sub-agents") {
			t.Fatalf("the model was asked for a reply after it yielded: %q", m.Content.Text())
		}
	}
	var want events.UsageMeta
	for i, child := range children {
		answers := got[child]
		if len(answers) != 1 {
			t.Fatalf("child %s: %d completions in the parent's transcript, want 1: %q", child, len(answers), got)
		}
		label := []string{"alpha", "beta", "gamma"}[i]
		if !strings.Contains(answers[0], "research "+label) || !strings.HasPrefix(answers[0], "echo: [Sub-agent result") {
			t.Errorf("the parent's answer to %s: %q", label, answers[0])
		}
		s, err := c.Settings(ctx, child)
		if err != nil {
			t.Fatal(err)
		}
		if s.State == nil || s.State.Parent == nil || s.State.Parent.Session != parent || !s.State.Parent.Delivered || s.State.Usage == nil {
			t.Fatalf("child %s state: %+v", child, s.State)
		}
		want = *want.Plus(s.State.Usage)
		// The child's run names its parent on its start event.
		_, rest, _ := strings.Cut(res["s-"+label], ", run ")
		run, _, _ := strings.Cut(rest, ".")
		named := false
		for ev, err := range c.Run(child, run).Events(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Stream == events.StreamLifecycle && ev.Data.Phase == events.PhaseStart {
				named = ev.Data.ParentSession == parent && ev.Data.ParentRun == v.result.Meta.Session.Children[0].ParentRun
			}
			if ev.Terminal() {
				break
			}
		}
		if !named {
			t.Errorf("child %s's start event does not name its parent", child)
		}
	}
	s, err := c.Settings(ctx, parent)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.State; st == nil || len(st.Children) != 0 || st.ChildUsage == nil || st.ChildUsage.Total != want.Total || st.ChildUsage.Total == 0 || st.Usage.Total <= want.Total {
		b, _ := json.Marshal(s.State)
		t.Fatalf("parent state %s; children's use %+v", b, want)
	}
}

// lifecycle follows session's runs from now on: each event of any of
// them, in the order the lanes published them.
func lifecycle(t *testing.T, nc *nats.Conn, session string) <-chan *events.Event {
	t.Helper()
	tok, err := events.KeyToken(session)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *events.Event, 256)
	sub, err := nc.Subscribe(events.EventPrefix+tok+".*", func(m *nats.Msg) {
		if ev, err := events.DecodeEvent(m.Header.Get(events.HeaderContentType), m.Data); err == nil {
			ch <- ev
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return ch
}

// TestParentBudgetCountsChildren: a session budget on a parent counts its
// sub-agents' model calls: the parent's turn (one) and its child's (one)
// fill a budget of two turns, so the parent pauses and the child's
// completion waits in its queue (a paused notice on its run) until the
// operator raises the budget; then it runs. (Before, the child's calls
// counted against its own session and the tenant only: the parent had used
// one turn of two and answered the completion at once.)
func TestParentBudgetCountsChildren(t *testing.T) {
	t.Parallel()
	m, c, ctx := maskingMember(t, Config{SessionTools: "tenant", SessionSender: clientSender, NoBuiltinTools: true})
	parent := "acme:lead"
	sc := governance.Scope{Kind: governance.ScopeSession, Name: parent}
	if _, _, err := m.budgets.store.Bucket().Set(ctx, sc, governance.Limits{Max: governance.Amount{Turns: 2}}, "test"); err != nil {
		t.Fatal(err)
	}
	for !m.Budgeted(sc) {
		select {
		case <-ctx.Done():
			t.Fatal("the budget never reached the worker")
		case <-time.After(time.Millisecond):
		}
	}
	evs := lifecycle(t, m.Conn, parent)
	v := watch(t, ctx, c, parent, scriptText(t, calls("s", "sessions_spawn", map[string]any{"task": "look it up", "label": "scout"}),
		calls("y", "sessions_yield", nil)), lanefleet.WithModel("scripted/script"))
	if v.runErr != nil || v.result.Meta.StopReason != events.StopYielded {
		t.Fatalf("the spawning turn: %v, %+v", v.runErr, v.result)
	}
	for paused := false; !paused; {
		select {
		case ev := <-evs:
			if ev.Stream == events.StreamFinal && ev.Data.Result != nil && ev.Data.Result.Meta.StopReason != events.StopYielded {
				t.Fatalf("the parent ran the completion on a budget its child had filled: %+v", ev.Data.Result)
			}
			paused = ev.Stream == events.StreamLifecycle && ev.Data.Phase == events.PhasePaused &&
				strings.Contains(ev.Data.Text, `the session "acme:lead" budget`)
		case <-ctx.Done():
			t.Fatal("the child's completion never waited on the parent's paused lane")
		}
	}
	st, _, err := m.budgets.store.Bucket().Get(ctx, sc)
	if err != nil || st.Used.Turns < 2 {
		t.Fatalf("the parent's budget used %+v (%v): want its turn and its child's", st.Used, err)
	}
	if _, _, err := m.budgets.store.Bucket().Set(ctx, sc, governance.Limits{Max: governance.Amount{Turns: 10}}, "test"); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case ev := <-evs:
			if r := ev.Data.Result; ev.Stream == events.StreamFinal && r != nil && r.Meta.Session != nil && len(r.Meta.Session.Children) == 0 {
				if r.Meta.Error != nil {
					t.Fatalf("the completion's run: %+v", r.Meta.Error)
				}
				return
			}
		case <-ctx.Done():
			t.Fatal("the completion did not run once the budget was raised")
		}
	}
}

// spawnedChildren reads the child session keys of a session's
// sessions_spawn results, by call id.
func spawnedChildren(t *testing.T, ctx context.Context, c *lanefleet.Client, session string, ids ...string) []string {
	t.Helper()
	res := toolResults(t, ctx, c, session)
	var out []string
	for _, id := range ids {
		_, rest, ok := strings.Cut(res[id], "Sub-agent started: session ")
		child, _, _ := strings.Cut(rest, ",")
		if !ok || !strings.HasPrefix(child, session+":subagent:") {
			t.Fatalf("spawn %s: %q", id, res[id])
		}
		out = append(out, child)
	}
	return out
}

// streaming waits until session's run has streamed some of its reply.
func streaming(t *testing.T, ctx context.Context, c *lanefleet.Client, session, run string) {
	t.Helper()
	for ev, err := range c.Run(session, run).Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Stream == events.StreamAssistant && ev.Data.Delta != "" {
			return
		}
		if ev.Terminal() {
			t.Fatalf("%s run %s ended before it streamed: %+v", session, run, ev.Data)
		}
	}
}

// sessionsListed lists the sessions with their state, by key.
func sessionsListed(t *testing.T, ctx context.Context, c *lanefleet.Client) map[string]admin.Session {
	t.Helper()
	rep, err := c.SessionsPage(ctx, admin.SessionsRequest{State: true})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]admin.Session{}
	for _, s := range rep.Sessions {
		seen[s.Key] = s
	}
	return seen
}

// listingShows waits until the sessions listing, by key, satisfies ok,
// and returns it. The listing trails the turns (their index entries and
// run registry entries are written off the turn's path); what shows is
// said in the failure.
func listingShows(t *testing.T, ctx context.Context, c *lanefleet.Client, what string, ok func(map[string]admin.Session) bool) map[string]admin.Session {
	t.Helper()
	for {
		seen := sessionsListed(t, ctx, c)
		if ok(seen) {
			return seen
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the sessions listing does not show %s: %+v", what, seen)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// listedAs waits until the sessions listing shows each session of want
// in its state (admin.StateIdle, …).
func listedAs(t *testing.T, ctx context.Context, c *lanefleet.Client, want map[string]string) {
	t.Helper()
	listingShows(t, ctx, c, fmt.Sprintf("the states %v", want), func(seen map[string]admin.Session) bool {
		for key, state := range want {
			if s, listed := seen[key]; !listed || s.State != state {
				return false
			}
		}
		return true
	})
}

// runningWithChildren waits until the runs listing shows session's run
// with its pending sub-agents counted.
func runningWithChildren(t *testing.T, ctx context.Context, c *lanefleet.Client, session, run string, children int) {
	t.Helper()
	for {
		runs, err := c.ActiveRuns(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			if r.Session == session && r.RunID == run && r.Children == children {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the runs listing does not show %s run %s with %d sub-agents pending: %+v", session, run, children, runs)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestStopReachesSubagents: stopping a session whose sub-agents run stops
// them too: the stop cuts the parent's own running turn, its reply says
// how many sub-agents it passed the stop on to, each child's running turn
// is cut and its completion says it was stopped, and the parent takes
// those completions off without a turn of its model (no sub-agent result
// in its transcript), counting their use. (Before, the children ran on,
// each answered by the parent when it finished.) Meanwhile the sessions
// and runs listings count the parent's pending sub-agents and schedule,
// and, once their first turn committed, name the children's parent.
// (Before, they said neither.)
func TestStopReachesSubagents(t *testing.T) {
	t.Parallel()
	// The children's model streams for half a minute: only a stop ends
	// their turns early.
	slow := scripted.Script{Replies: []scripted.Reply{{Text: strings.Repeat("still working ", 300), Chunks: 300, DelayMs: 100}}}
	m, c, ctx := maskingMember(t, Config{SessionTools: "tenant", SessionSender: clientSender, NoBuiltinTools: true,
		DefaultModel: "scripted/slow", Scripts: map[string]scripted.Script{"slow": slow}})
	parent := "acme:lead"
	fin := finals(t, m.Conn, parent)
	v := watch(t, ctx, c, parent, scriptText(t, calls("a", "sessions_spawn", map[string]any{"task": "dig", "label": "a"}),
		calls("b", "sessions_spawn", map[string]any{"task": "dig more", "label": "b"}), calls("y", "sessions_yield", nil)),
		lanefleet.WithModel("scripted/script"))
	if v.runErr != nil || v.result.Meta.Waiting != 2 {
		t.Fatalf("the spawning turn: %v, %+v", v.runErr, v.result)
	}
	<-fin // the spawning turn's
	children := spawnedChildren(t, ctx, c, parent, "a", "b")
	for _, ch := range v.result.Meta.Session.Children {
		streaming(t, ctx, c, ch.Session, ch.Run)
	}
	// The user asks the parent something while its sub-agents work: a
	// turn of its own, which the stop cuts.
	busy, err := c.Send(ctx, parent, "how is it going?")
	if err != nil {
		t.Fatal(err)
	}
	streaming(t, ctx, c, parent, busy.ID)
	if _, err := c.AddSchedule(ctx, lanefleet.NewSchedule{Session: parent, At: time.Now().Add(365 * 24 * time.Hour), Message: events.Inbound{Text: "a year on"}}); err != nil {
		t.Fatal(err)
	}
	// The run registry lists a run only once it has gone on a while, and
	// writes it off the turn's path: the listings show the parent running
	// once the runs listing has it.
	runningWithChildren(t, ctx, c, parent, busy.ID, 2)
	seen := sessionsListed(t, ctx, c)
	if p := seen[parent]; p.Children != 2 || p.Schedules != 1 || p.Parent != "" || p.State != admin.StateRunning {
		t.Errorf("the sessions listing of the parent: %+v", p)
	}
	run, err := c.Stop(ctx, parent)
	if err != nil {
		t.Fatal(err)
	}
	res, err := run.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Payloads[0].Text, "stopped run "+busy.ID+"; stopping 2 sub-agent(s)"; got != want {
		t.Fatalf("the stop's reply: %q, want %q", got, want)
	}
	// The finals that follow the spawning turn's: the cut question's, the
	// stop's, then one per stopped child's completion.
	for taken := 0; taken < 2; {
		select {
		case r := <-fin:
			if len(r.Payloads) != 1 || !strings.Contains(r.Payloads[0].Text, "ended after this session was stopped: its result was not answered") {
				continue
			}
			if r.Meta.Error != nil {
				t.Fatalf("a stopped child's completion ran as %+v", r)
			}
			if taken++; taken == 2 && (r.Meta.Session == nil || len(r.Meta.Session.Children) != 0) {
				t.Fatalf("the parent still has children pending: %+v", r.Meta.Session)
			}
		case <-ctx.Done():
			t.Fatal("the stopped children's completions did not arrive")
		}
	}
	if got := completions(t, ctx, c, parent); len(got) != 0 {
		t.Errorf("the parent's model answered stopped children: %q", got)
	}
	s, err := c.Settings(ctx, parent)
	if err != nil {
		t.Fatal(err)
	}
	var want events.UsageMeta
	for _, child := range children {
		cs, err := c.Settings(ctx, child)
		if err != nil {
			t.Fatal(err)
		}
		if cs.State == nil || cs.State.Parent == nil || !cs.State.Parent.Delivered {
			t.Fatalf("child %s did not deliver its completion: %+v", child, cs.State)
		}
		want = *want.Plus(cs.State.Usage)
	}
	if got := s.State.ChildUsage; (got == nil) != (want.Total == 0) || got != nil && got.Total != want.Total {
		t.Errorf("the parent counts %+v of its stopped children's use, want %+v", got, want)
	}
	// The last completion's run may still be in the run registry while
	// its index entry is on its way: the listing then says what the
	// commit before it left. It catches up.
	listingShows(t, ctx, c, "the parent with no sub-agent pending and one schedule, its children naming it", func(seen map[string]admin.Session) bool {
		if p := seen[parent]; p.Children != 0 || p.Schedules != 1 {
			return false
		}
		for _, ch := range children {
			if seen[ch].Parent != parent {
				return false
			}
		}
		return true
	})
}
