package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/agents"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/governance"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/provider"
)

// TestBudgetPausesAndResumes: a tenant's budget of three turns runs the
// first three messages of its session; the others (and one sent while the
// session is paused) stay queued, not dead-lettered, not refused, while
// another tenant's session runs on. Raising the budget runs them, in
// order, exactly once each, without sending anything again.
func TestBudgetPausesAndResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	var members []*member
	for _, id := range []string{"w1", "w2"} {
		members = append(members, startMember(t, srv.URL, fleet.Config{WorkerID: id, DefaultModel: "scripted/echo", NoBuiltinTools: true}))
	}
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	acme := lanefleet.TenantBudget("acme")
	if _, _, err := c.SetBudget(ctx, acme, governance.Limits{Max: governance.Amount{Turns: 3}}, "ops"); err != nil {
		t.Fatal(err)
	}
	// Every worker's watch has the budget before the first message.
	for _, m := range members {
		waitUntil(t, time.Minute, "the budget to reach "+m.m.Worker.ID(), func(context.Context) bool { return m.m.Budgeted(acme) })
	}
	const s = "acme:support:1"
	var runs []*lanefleet.Run
	for i := 1; i <= 6; i++ {
		r, err := c.Send(ctx, s, fmt.Sprintf("m%d", i))
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	for i, r := range runs[:3] {
		res, err := r.Wait(ctx)
		if err != nil || res.Payloads[0].Text != fmt.Sprintf("echo: m%d", i+1) {
			t.Fatalf("run %d: %+v, %v", i, res, err)
		}
	}
	if res, err := c.Send(ctx, "beta:1", "hello"); err != nil {
		t.Fatal(err)
	} else if out, err := res.Wait(ctx); err != nil || out.Payloads[0].Text != "echo: hello" {
		t.Fatalf("another tenant's turn: %+v, %v", out, err)
	}
	paused := func() int64 {
		var n int64
		for _, m := range members {
			n += m.m.Worker.Stats().Paused.Load()
		}
		return n
	}
	waitUntil(t, time.Minute, "an owner to let the paused lane go", func(context.Context) bool { return paused() > 0 })
	before := paused()
	r7, err := c.Send(ctx, s, "m7")
	if err != nil {
		t.Fatal(err)
	}
	runs = append(runs, r7)
	waitUntil(t, time.Minute, "the message sent while paused to be let go", func(context.Context) bool { return paused() > before })
	st, _, err := c.Budget(ctx, acme)
	if err != nil || !st.Paused(time.Now()) || st.Used.Turns != 3 {
		t.Fatalf("budget %+v (%v), want 3 turns used and paused", st, err)
	}
	backlog, err := c.Backlog(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if backlog.Waiting != 4 {
		t.Fatalf("backlog %+v, want 4 messages waiting", backlog)
	}
	// The operator raises the budget: the queued messages run.
	old, now, err := c.SetBudget(ctx, acme, governance.Limits{Max: governance.Amount{Turns: 10}}, "ops")
	if err != nil || old.Limits.Max.Turns != 3 || now.Paused(time.Now()) {
		t.Fatalf("raise: %+v -> %+v, %v", old, now, err)
	}
	for i, r := range runs[3:] {
		res, err := r.Wait(ctx)
		if err != nil || res.Payloads[0].Text != fmt.Sprintf("echo: m%d", i+4) {
			t.Fatalf("run %d after the raise: %+v, %v", i+3, res, err)
		}
	}
	hist, err := c.History(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	var users []string
	for _, e := range hist {
		if e.Message != nil && e.Message.Role == "user" {
			users = append(users, e.Message.Content.Text())
		}
	}
	if got := strings.Join(users, " "); got != "m1 m2 m3 m4 m5 m6 m7" {
		t.Fatalf("transcript's messages %q, want m1-m7 once each, in order", got)
	}
	dl, err := c.DeadLetters(ctx, admin.DeadListRequest{})
	if err != nil || len(dl.Letters) != 0 {
		t.Fatalf("dead letters %+v, %v", dl, err)
	}
	st, _, _ = c.Budget(ctx, acme)
	if st.Used.Turns != 7 || len(st.Reservations) != 0 {
		t.Fatalf("budget after: %+v", st)
	}
}

// pricedServer is a Chat Completions endpoint that bills per token: each
// reply has promptTokens of input and a random 1,000-1,500 tokens of
// output (at $10 and $20 per million: 2-3 cents a turn), reported in the
// stream's usage chunk. It sums what it billed.
type pricedServer struct {
	*httptest.Server
	calls, inFlight atomic.Int64
	billedNanos     atomic.Int64
}

const (
	pricedIn, pricedOut = 10.0, 20.0 // USD per million tokens
	promptTokens        = 40
	maxOut              = 1500
)

func newPricedServer(t *testing.T) *pricedServer {
	t.Helper()
	ps := &pricedServer{}
	ps.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ps.inFlight.Add(1)
		defer ps.inFlight.Add(-1)
		n := ps.calls.Add(1)
		out := 1000 + (n*7919)%501
		ps.billedNanos.Add(int64(promptTokens*pricedIn*1000) + int64(float64(out)*pricedOut*1000))
		chunk, _ := json.Marshal(map[string]any{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m1",
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": "ok"}, "finish_reason": nil}}})
		done := `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
		usage, _ := json.Marshal(map[string]any{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m1", "choices": []any{},
			"usage": map[string]any{"prompt_tokens": promptTokens, "completion_tokens": out, "total_tokens": promptTokens + out}})
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = fmt.Fprintf(w, "data: %s\n\ndata: %s\n\ndata: %s\n\ndata: [DONE]\n\n", chunk, done, usage)
	}))
	t.Cleanup(ps.Close)
	return ps
}

// TestBudgetRaceAcrossWorkers measures the race the issue names: three
// workers run 64 sessions of one tenant that has $1.00 left, each turn
// costing 2-3 cents. Every call reserves its worst case by compare-and-set
// before it is made, so what the provider billed never passes the budget
// by more than one in-flight call's worst case per worker (the closing
// note reports the overshoot). The sessions the cap paused keep their
// messages; raising the budget runs each of them exactly once.
func TestBudgetRaceAcrossWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	ps := newPricedServer(t)
	dir := t.TempDir()
	models := filepath.Join(dir, "models.json")
	m := fmt.Sprintf(`{"providers":{"acme":{"baseUrl":%q,"api":"openai-completions","models":[{"id":"m1","contextWindow":128000,"maxTokens":%d,"cost":{"input":%v,"output":%v}}]}}}`,
		ps.URL+"/v1", maxOut, pricedIn, pricedOut)
	if err := os.WriteFile(models, []byte(m), 0o600); err != nil {
		t.Fatal(err)
	}
	profiles := filepath.Join(dir, "auth-profiles.json")
	p := `{"version":1,"profiles":{"acme:a":{"type":"api_key","provider":"acme","key":"sk-acme-a"}},"order":{"acme":["acme:a"]}}`
	if err := os.WriteFile(profiles, []byte(p), 0o600); err != nil {
		t.Fatal(err)
	}
	env := envMap(nil)
	srv := natstest.Start(t)
	var members []*member
	for i := range 3 {
		// No worker dies here, so no lease needs to lapse: 30 s (the
		// default), not the harness's 5 s, which a busy machine outlasted
		// (a budget lease expired while its call's use waited to be
		// written, and the check below read the bucket without it).
		members = append(members, startMember(t, srv.URL, fleet.Config{WorkerID: fmt.Sprintf("w%d", i+1), ModelsFile: models, AuthProfiles: profiles, DefaultModel: "acme/m1",
			NoBuiltinTools: true, Env: env, Concurrency: 32, LeaseTTL: 30 * time.Second}))
	}
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	acme := lanefleet.TenantBudget("acme")
	limit, _ := governance.USD(1)
	if _, _, err := c.SetBudget(ctx, acme, governance.Limits{Max: governance.Amount{USD: limit}}, "ops"); err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		waitUntil(t, time.Minute, "the budget to reach "+m.m.Worker.ID(), func(context.Context) bool { return m.m.Budgeted(acme) })
	}
	const sessions = 64
	type outcome struct {
		i    int
		text string
		kind string
	}
	results := make(chan outcome, sessions)
	var wg sync.WaitGroup
	for i := range sessions {
		r, err := c.Send(ctx, fmt.Sprintf("acme:s%d", i), "go")
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			res, err := r.Wait(ctx)
			var re *lanefleet.RunError
			switch {
			case errors.As(err, &re):
				results <- outcome{i: i, kind: re.Kind, text: re.Message}
			case err != nil:
				t.Errorf("session %d: %v", i, err)
			default:
				results <- outcome{i: i, text: res.Payloads[0].Text}
			}
		})
	}
	// The cap is reached once the budget is paused with no call in flight.
	waitUntil(t, 60*time.Second, "the budget to be reached", func(context.Context) bool {
		st, _, err := c.Budget(ctx, acme)
		return err == nil && st.Paused(time.Now()) && len(st.Reservations) == 0 && ps.inFlight.Load() == 0
	})
	billed := governance.Nanos(ps.billedNanos.Load())
	st, _, _ := c.Budget(ctx, acme)
	// The worst case of one call: its output at most maxOut tokens; its
	// input as the worker estimates it (the prompt as sent), bounded here
	// by the server's count plus the system prompt's.
	worstOut := governance.WorstCase(provider.ModelCost{Input: pricedIn, Output: pricedOut}, 0, maxOut, true).USD
	t.Logf("RACE: 3 workers x %d sessions, budget $1.00: %d calls billed %s (settled %s), overshoot %s; bound $1.00 + 3 x worst case (%s output each)",
		sessions, ps.calls.Load(), billed, st.Used.USD, billed-limit, worstOut)
	if billed > limit+3*(worstOut+governance.Nanos(1e7)) {
		t.Fatalf("billed %s against a $1.00 budget", billed)
	}
	if st.Used.USD != billed {
		t.Errorf("settled %s, billed %s: every call's use is recorded once", st.Used.USD, billed)
	}
	// Raise the budget: the paused sessions run, each exactly once.
	if _, _, err := c.SetBudget(ctx, acme, governance.Limits{Max: governance.Amount{USD: 100 * limit}}, "ops"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(results)
	ran, reached := 0, 0
	for o := range results {
		switch {
		case o.kind == events.KindBudgetReached && strings.HasPrefix(o.text, "Budget reached: the tenant acme budget"):
			reached++
		case o.kind == "" && o.text == "ok":
			ran++
		default:
			t.Errorf("session %d: %q %q", o.i, o.kind, o.text)
		}
	}
	t.Logf("RACE: %d turns answered, %d ended budget_reached (a call refused mid-turn), %d calls in all", ran, reached, ps.calls.Load())
	if ran+reached != sessions || ps.calls.Load() != int64(ran) {
		t.Fatalf("%d ran + %d reached of %d sessions, %d calls", ran, reached, sessions, ps.calls.Load())
	}
}

// TestKilledWorkersReservationExpires: a worker process SIGKILLed in the
// middle of a model call leaves its reservation in the budgets bucket; it
// stops counting once the worker's lease TTL passes without renewal, and
// the turn, re-run by another worker, is counted once.
func TestKilledWorkersReservationExpires(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	acme := lanefleet.TenantBudget("acme")
	if _, _, err := c.SetBudget(ctx, acme, governance.Limits{Max: governance.Amount{Turns: 5}}, "ops"); err != nil {
		t.Fatal(err)
	}
	// The worker loads the budget when it starts; each of its echo deltas
	// takes 2 s, so its call is in flight long enough to be killed in.
	dead := startWorkerProc(t, srv.URL, "dead", "--model", "scripted/echo", "--scripted-delay", "2s")
	r, err := c.Send(ctx, "acme:1", "one two three")
	if err != nil {
		t.Fatal(err)
	}
	var held governance.Reservation
	waitUntil(t, 30*time.Second, "the call's reservation", func(context.Context) bool {
		st, _, err := c.Budget(ctx, acme)
		if err != nil || len(st.Reservations) != 1 {
			return false
		}
		held = st.Reservations[0]
		return true
	})
	if held.Worker != "dead" {
		t.Fatalf("reservation %+v, want the worker's id", held)
	}
	dead.kill()
	killed := time.Now()
	startWorkerProc(t, srv.URL, "live", "--model", "scripted/echo")
	res, err := r.Wait(ctx)
	if err != nil || res.Payloads[0].Text != "echo: one two three" {
		t.Fatalf("the re-run turn: %+v, %v", res, err)
	}
	st, _, err := c.Budget(ctx, acme)
	if err != nil {
		t.Fatal(err)
	}
	// The lease TTL is 2 s: the dead worker's reservation expires at most
	// that long after its last renewal, before the kill.
	if exp := time.UnixMilli(held.Expires); exp.After(killed.Add(2 * time.Second)) {
		t.Fatalf("the dead worker's reservation lives until %v, past its lease (killed at %v)", exp, killed)
	}
	waitUntil(t, time.Minute, "the dead worker's reservation to expire", func(context.Context) bool {
		st, _, err = c.Budget(ctx, acme)
		return err == nil && st.ReservedNow(time.Now()).IsZero()
	})
	if used := st.UsedNow(time.Now()); used.Turns != 1 {
		t.Fatalf("turns used %d, want the re-run turn counted once", used.Turns)
	}
}

// TestQuotaAcrossWorkers: a tenant whose quota is one turn at once sends
// to four sessions across two workers: every message runs, one turn at a
// time (a session that would pass the quota waits, paused, and is woken
// when a turn ends), while another tenant runs on.
func TestQuotaAcrossWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	var members []*member
	for _, id := range []string{"w1", "w2"} {
		members = append(members, startMember(t, srv.URL, fleet.Config{WorkerID: id, DefaultModel: "scripted/echo", NoBuiltinTools: true, ScriptedDelay: 20 * time.Millisecond}))
	}
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if _, _, err := c.SetQuota(ctx, "acme", governance.Quota{Turns: 1}, "ops"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the quota to reach the workers", func(context.Context) bool {
		for _, m := range members {
			if !m.m.QuotaSet("acme") {
				return false
			}
		}
		return true
	})
	// Watch the quota's holds while the turns run: never more than one.
	stop := make(chan struct{})
	most := make(chan int, 1)
	go func() {
		n := 0
		defer func() { most <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			st, _, err := c.Quota(ctx, "acme")
			if err == nil {
				n = max(n, st.Running(time.Now()))
			}
		}
	}()
	var runs []*lanefleet.Run
	for i := range 4 {
		r, err := c.Send(ctx, fmt.Sprintf("acme:q%d", i), "one two three")
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	other, err := c.Send(ctx, "globex:1", "hi")
	if err != nil {
		t.Fatal(err)
	}
	if res, err := other.Wait(ctx); err != nil || res.Payloads[0].Text != "echo: hi" {
		t.Fatalf("the other tenant: %+v, %v", res, err)
	}
	for i, r := range runs {
		if res, err := r.Wait(ctx); err != nil || res.Payloads[0].Text != "echo: one two three" {
			t.Fatalf("session %d: %+v, %v", i, res, err)
		}
	}
	close(stop)
	if n := <-most; n > 1 {
		t.Fatalf("%d turns of the tenant held its quota of 1 at once", n)
	}
}

// TestAgentBudgetPausesItsSessions: an agent's budget of two turns counts
// the turns of every session the agent runs, across two workers: the
// third message (in another of its sessions) stays queued, while a
// session of no agent runs on; raising the budget runs it, once.
func TestAgentBudgetPausesItsSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if _, err := c.PutAgent(ctx, &agents.Agent{ID: "support", SystemPrompt: "You help."}); err != nil {
		t.Fatal(err)
	}
	var members []*member
	for _, id := range []string{"w1", "w2"} {
		members = append(members, startMember(t, srv.URL, fleet.Config{WorkerID: id, DefaultModel: "scripted/echo", NoBuiltinTools: true}))
	}
	support := lanefleet.AgentBudget("support")
	if _, _, err := c.SetBudget(ctx, support, governance.Limits{Max: governance.Amount{Turns: 2}}, "ops"); err != nil {
		t.Fatal(err)
	}
	for _, m := range members {
		waitUntil(t, time.Minute, "the budget to reach "+m.m.Worker.ID(), func(context.Context) bool { return m.m.Budgeted(support) })
	}
	wait := func(r *lanefleet.Run, want string) {
		t.Helper()
		res, err := r.Wait(ctx)
		if err != nil || len(res.Payloads) == 0 || res.Payloads[0].Text != want {
			t.Fatalf("run: %+v, %v; want %q", res, err, want)
		}
	}
	send := func(key, text string) *lanefleet.Run {
		t.Helper()
		r, err := c.Send(ctx, key, text)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	wait(send("agent:support:a", "a1"), "echo: a1")
	wait(send("agent:support:b", "b1"), "echo: b1")
	st, _, err := c.Budget(ctx, support)
	if err != nil || st.Used.Turns != 2 || !st.Paused(time.Now()) {
		t.Fatalf("agent budget %+v (%v), want 2 turns used and paused", st, err)
	}
	queued := send("agent:support:c", "c1")
	wait(send("beta:1", "hello"), "echo: hello") // no agent: not paused
	waitUntil(t, time.Minute, "the agent's third session to wait in its queue", func(ctx context.Context) bool {
		b, err := c.Backlog(ctx, "agent:support:c")
		return err == nil && b.Waiting == 1
	})
	if _, _, err := c.SetBudget(ctx, support, governance.Limits{Max: governance.Amount{Turns: 3}}, "ops"); err != nil {
		t.Fatal(err)
	}
	wait(queued, "echo: c1")
	if st, _, _ = c.Budget(ctx, support); st.Used.Turns != 3 {
		t.Fatalf("agent budget after: %+v, want 3 turns used", st)
	}
}

// TestQuotaStoreFailsTheAttempt: a turn whose tenant has a quota, when
// the budgets bucket is gone, fails its attempt with an error that says
// the quota store is unavailable, counted toward the message's attempts
// (the aborted event says it is retried): it is neither run without its
// hold nor left waiting.
func TestQuotaStoreFailsTheAttempt(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	m := startMember(t, srv.URL, fleet.Config{WorkerID: "w1", DefaultModel: "scripted/echo", NoBuiltinTools: true})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if _, _, err := c.SetQuota(ctx, "acme", governance.Quota{Turns: 5}, "ops"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, time.Minute, "the quota to reach the worker", func(context.Context) bool { return m.m.QuotaSet("acme") })
	js := newJS(t, natstest.Connect(t, srv.URL))
	if err := js.DeleteKeyValue(ctx, "budgets"); err != nil {
		t.Fatal(err)
	}
	r, err := c.Send(ctx, "acme:1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range r.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Stream == events.StreamLifecycle && ev.Data.Phase == events.PhaseEnd {
			t.Fatalf("the turn ran without its quota hold: %+v", ev.Data)
		}
		if ev.Stream != events.StreamLifecycle || ev.Data.Phase != events.PhaseAborted {
			continue
		}
		if !strings.Contains(ev.Data.Error+ev.Data.Text, "attempt 1 failed: quota store unavailable: tenant acme's quota of turns at once could not be held") ||
			!strings.Contains(ev.Data.Error+ev.Data.Text, "it is retried") {
			t.Fatalf("aborted event %+v; want the first attempt failed on the quota store, counted", ev.Data)
		}
		return
	}
	t.Fatal("no aborted event")
}
