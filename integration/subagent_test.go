package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider/scripted"
)

// TestSubagentsAcrossWorkerKills: parents on two worker processes each
// spawn three sub-agents and yield; workers are SIGKILLed and started
// again while the children run and their completions are delivered.
// Every parent receives every child's completion exactly once, in its
// lane, answers each in a turn of its own, and ends with no child
// pending and its children's whole use in its running total.
func TestSubagentsAcrossWorkerKills(t *testing.T) {
	if testing.Short() {
		t.Skip("worker processes")
	}
	t.Parallel()
	runSubagentFaults(t, 4, 2, 1)
}

// TestSubagentsChaos is the larger run: 50 parents × 3 children
// with random worker kills. It runs only with LANEFLEET_SUBAGENT_CHAOS set
// to the number of parents (make chaos-subagents).
func TestSubagentsChaos(t *testing.T) {
	n, err := strconv.Atoi(os.Getenv("LANEFLEET_SUBAGENT_CHAOS"))
	if err != nil || n <= 0 {
		t.Skip("set LANEFLEET_SUBAGENT_CHAOS to a number of parents (make chaos-subagents)")
	}
	runSubagentFaults(t, n, 8, rand.Uint64())
}

// runSubagentFaults runs parents parents of three children each on two
// worker processes, with kills SIGKILLs spread over the run (each at a
// random count of completed runs, seeded by seed), and checks every
// parent's transcript and state.
func runSubagentFaults(t *testing.T, parents, kills int, seed uint64) {
	start := time.Now()
	mark := func(what string) { t.Logf("%6.1fs %s", time.Since(start).Seconds(), what) }
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	js := newJS(t, nc)
	args := []string{"--session-tools", "tenant", "--scripted-delay", "40ms", "--concurrency", "16"}
	workers := []*procWorker{startWorkerProc(t, srv.URL, "sa1", args...), startWorkerProc(t, srv.URL, "sa2", args...)}
	waitForFleet(t, js)
	c, err := lanefleet.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()

	// Every final event of every session: the kills are placed by how
	// many there were, and each parent is done when a final leaves it no
	// child pending.
	var mu sync.Mutex
	finals := 0
	done := map[string]bool{}
	progress := make(chan struct{}, 1)
	sub, err := nc.Subscribe(events.EventPrefix+">", func(m *nats.Msg) {
		ev, err := events.DecodeEvent(m.Header.Get(events.HeaderContentType), m.Data)
		if err != nil || ev.Stream != events.StreamFinal || ev.Data.Result == nil {
			return
		}
		tok := strings.Split(strings.TrimPrefix(m.Subject, events.EventPrefix), ".")[0]
		key, _ := events.TokenKey(tok)
		mu.Lock()
		finals++
		if st := ev.Data.Result.Meta.Session; strings.HasPrefix(key, "acme:lead") && !strings.Contains(key, ":subagent:") &&
			st != nil && len(st.Children) == 0 {
			done[key] = true
		}
		mu.Unlock()
		select {
		case progress <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	script := scriptFor(t)
	keys := make([]string, parents)
	for i := range parents {
		keys[i] = fmt.Sprintf("acme:lead%d", i)
		if _, err := c.Send(ctx, keys[i], script, lanefleet.WithModel("scripted/script"), lanefleet.WithMessageID("go")); err != nil {
			t.Fatal(err)
		}
	}
	mark("sent")
	// Each parent makes 1 + 3 turns and each child 1: kill at random
	// points of that total.
	total := parents * 7
	r := rand.New(rand.NewPCG(seed, 1))
	var at []int
	for range kills {
		at = append(at, parents+r.IntN((total-parents)*2/3))
	}
	slices.Sort(at)
	t.Logf("seed %d, kills after %v finals", seed, at)
	for {
		mu.Lock()
		n, all := finals, len(done) == parents
		mu.Unlock()
		if all {
			break
		}
		for len(at) > 0 && n >= at[0] {
			w := workers[r.IntN(len(workers))]
			w.kill()
			mark(fmt.Sprintf("killed %s after %d finals", w.id, n))
			w.start()
			at = at[1:]
		}
		select {
		case <-progress:
		case <-ctx.Done():
			mu.Lock()
			t.Fatalf("%d of %d parents done after %d finals", len(done), parents, finals)
		}
	}
	mark("all parents done")
	dead := deadCompletions(t, ctx, js)
	for _, key := range keys {
		checkParent(t, ctx, c, key, dead)
	}
}

// deadCompletions counts, by child session, the completions whose turn in
// the parent's lane was dead-lettered (as poison: its attempts were all
// cut by kills). Each was delivered to the lane; the fleet's poison policy
// took it off.
func deadCompletions(t *testing.T, ctx context.Context, js jetstream.JetStream) map[string]int {
	t.Helper()
	s, err := js.Stream(ctx, events.DeadStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		in, err := events.DecodeInbound(m.Header.Get(events.HeaderContentType), m.Data, 0)
		if err == nil && in.Subagent != nil {
			out[in.Subagent.Session]++
			t.Logf("the completion of %s was dead-lettered in its parent's lane: %s", in.Subagent.Session, m.Header.Get(events.HeaderError))
		}
	}
	return out
}

// scriptFor is the parents' first message: three spawns, a yield, a reply.
func scriptFor(t *testing.T) string {
	t.Helper()
	var replies []scripted.Reply
	for _, l := range []string{"alpha", "beta", "gamma"} {
		replies = append(replies, scripted.Reply{ToolCalls: []scripted.ToolCall{{ID: "s-" + l, Name: "sessions_spawn",
			Arguments: map[string]any{"task": "research " + l, "label": l}}}})
	}
	replies = append(replies, scripted.Reply{ToolCalls: []scripted.ToolCall{{ID: "y", Name: "sessions_yield"}}}, scripted.Reply{Text: "waiting"})
	b, err := json.Marshal(scripted.Script{Replies: replies})
	if err != nil {
		t.Fatal(err)
	}
	return scripted.ScriptPrefix + string(b)
}

// checkParent: each of the parent's three children delivered exactly one
// completion, answered by the turn after it (or dead-lettered, its turn
// cut by kills three times); the parent has no child pending; its
// children's use is each child's whole use, summed.
func checkParent(t *testing.T, ctx context.Context, c *lanefleet.Client, key string, dead map[string]int) {
	t.Helper()
	h, err := c.History(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	failed := map[string]bool{}
	var children []string
	for i, e := range h {
		m := e.Message
		if m == nil {
			continue
		}
		text := m.Content.Text()
		if m.Role == message.RoleToolResult && m.ToolName == "sessions_spawn" {
			_, rest, _ := strings.Cut(text, "Sub-agent started: session ")
			child, _, _ := strings.Cut(rest, ",")
			children = append(children, child)
		}
		if m.Role != message.RoleUser || !strings.HasPrefix(text, "[Sub-agent result") {
			continue
		}
		_, rest, _ := strings.Cut(text, "(session ")
		child, _, _ := strings.Cut(rest, ",")
		got[child]++
		failed[child] = strings.Contains(text, ") failed. ")
		if i+1 >= len(h) || h[i+1].Message == nil || !strings.HasPrefix(h[i+1].Message.Content.Text(), "echo: [Sub-agent result") {
			t.Errorf("%s: the completion of %s is not answered", key, child)
		}
	}
	if len(children) != 3 {
		t.Fatalf("%s spawned %d children: %q", key, len(children), children)
	}
	var use events.UsageMeta
	for _, child := range children {
		if dead[child] > 0 {
			got[child] += dead[child]
		}
		if got[child] != 1 {
			t.Errorf("%s: %d completions of %s, want 1 (%v)", key, got[child], child, got)
		}
		s, err := c.Settings(ctx, child)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case s.State == nil:
			t.Fatalf("%s: child %s has no state", key, child)
		case s.State.Usage == nil && !failed[child]:
			// Only a child whose turn never finished (dead-lettered as
			// poison after three attempts cut by kills) used nothing.
			t.Errorf("%s: child %s has no use, and its completion says it completed", key, child)
		case failed[child]:
			t.Logf("%s: child %s failed (its attempts were cut by kills); its completion says so", key, child)
		}
		use = *use.Plus(s.State.Usage)
	}
	if len(got) != 3 {
		t.Errorf("%s: completions from %v", key, got)
	}
	s, err := c.Settings(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var rolled events.UsageMeta
	if s.State != nil && s.State.ChildUsage != nil {
		rolled = *s.State.ChildUsage
	}
	if st := s.State; st == nil || len(st.Children) != 0 || rolled.Total != use.Total || rolled.Input != use.Input || (use.Total == 0) != (st.ChildUsage == nil) {
		b, _ := json.Marshal(s.State)
		t.Errorf("%s: state %s, children's use %+v", key, b, use)
	}
}
