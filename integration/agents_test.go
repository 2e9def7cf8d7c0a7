package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/agents"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/permission"
	"github.com/lanefleet/lanefleet/tools"
)

// agentServer is a Chat Completions server (GET /v1/models lists m1 and
// m2) that records what each request showed the model: its model, system
// prompt, tools and last user text. A user text "remember: X" is answered
// with a call of write putting X in MEMORY.md, the call's result with
// "saved", anything else with "ok".
type agentServer struct {
	*httptest.Server
	mu   sync.Mutex
	seen []agentCall
}

type agentCall struct {
	model, system, user string
	tools               []string
}

func newAgentServer(t *testing.T) *agentServer {
	t.Helper()
	as := &agentServer{}
	as.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/v1/models" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"m1","object":"model"},{"id":"m2","object":"model"}]}`))
			return
		}
		var req struct {
			Model    string `json:"model"`
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
			Tools []struct {
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tools"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		call := agentCall{model: req.Model}
		text := func(raw json.RawMessage) string {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				return s
			}
			var parts []struct {
				Text string `json:"text"`
			}
			_ = json.Unmarshal(raw, &parts)
			for _, p := range parts {
				s += p.Text
			}
			return s
		}
		last := ""
		for _, m := range req.Messages {
			switch m.Role {
			case "system", "developer":
				call.system += text(m.Content)
			case "user":
				call.user = text(m.Content)
			}
			last = m.Role
		}
		for _, tl := range req.Tools {
			call.tools = append(call.tools, tl.Function.Name)
		}
		slices.Sort(call.tools)
		as.mu.Lock()
		as.seen = append(as.seen, call)
		as.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		switch {
		case last == "tool":
			_, _ = w.Write([]byte(sseText("saved")))
		case strings.HasPrefix(call.user, "remember: "):
			args, _ := json.Marshal(map[string]string{"path": "MEMORY.md", "content": strings.TrimPrefix(call.user, "remember: ")})
			_, _ = w.Write([]byte(sseToolCalls([2]string{"write", string(args)})))
		default:
			_, _ = w.Write([]byte(sseText("ok")))
		}
	}))
	t.Cleanup(as.Close)
	return as
}

// last is the last request whose user text was user.
func (as *agentServer) last(t *testing.T, user string) agentCall {
	t.Helper()
	as.mu.Lock()
	defer as.mu.Unlock()
	for i := len(as.seen) - 1; i >= 0; i-- {
		if as.seen[i].user == user {
			return as.seen[i]
		}
	}
	t.Fatalf("no request with the user text %q", user)
	return agentCall{}
}

// TestAgentWorkspaceAcrossWorkers: an agent's definition and its
// workspace's files (the default: JetStream's object store) reach every
// worker. Worker A runs agent:x:s1 with the agent's system prompt and
// AGENTS.md; its turn writes MEMORY.md, which goes back to the object
// store; worker B (another process, another workspace root) runs
// agent:x:s2, whose system prompt holds the prompt, AGENTS.md and A's
// MEMORY.md. A changed definition applies once the worker's watch
// delivered it; a removed one then ends the turns with invalid_input
// naming the agent.
func TestAgentWorkspaceAcrossWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	as := newAgentServer(t)
	srv := natstest.Start(t)
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := c.PutAgent(ctx, &agents.Agent{ID: "x", SystemPrompt: "You are agent X."}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutAgentFile(ctx, "x", "AGENTS.md", []byte("Rule: answer in haiku.")); err != nil {
		t.Fatal(err)
	}
	worker := func(name string) *proc {
		p := localWorker(t, srv.URL, nil, "--id", name, "--openai-compatible", as.URL, "--workspace-root", filepath.Join(t.TempDir(), "ws"))
		p.waitReady(t)
		return p
	}
	a := worker("a")
	if res, err := waitResult(t, ctx, c, "agent:x:s1", "remember: the user likes tea"); err != nil || res.Payloads[0].Text != "saved" {
		t.Fatalf("s1 on worker a: %+v, %v", res, err)
	}
	got := as.last(t, "remember: the user likes tea")
	if !strings.HasPrefix(got.system, "You are agent X.") || !strings.Contains(got.system, "Rule: answer in haiku.") {
		t.Fatalf("worker a's system prompt:\n%s", got.system)
	}
	if b, err := c.AgentFile(ctx, "x", "MEMORY.md"); err != nil || string(b) != "the user likes tea" {
		t.Fatalf("MEMORY.md in the object store after s1: %q, %v", b, err)
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("worker a: %v", err)
	}

	worker("b")
	if res, err := waitResult(t, ctx, c, "agent:x:s2", "hi"); err != nil || res.Payloads[0].Text != "ok" {
		t.Fatalf("s2 on worker b: %+v, %v", res, err)
	}
	got = as.last(t, "hi")
	for _, want := range []string{"You are agent X.", "Rule: answer in haiku.", "the user likes tea"} {
		if !strings.Contains(got.system, want) {
			t.Fatalf("worker b's system prompt lacks %q:\n%s", want, got.system)
		}
	}

	// A change applies from the first turn that starts after the
	// worker's watch delivered it, which a message sent right after the
	// put can outrun (docs/agents.md): the turns until then run as the
	// agent was, and one soon runs as it is.
	if _, err := c.PutAgent(ctx, &agents.Agent{ID: "x", SystemPrompt: "You are agent X2.", Model: "local/m2"}); err != nil {
		t.Fatal(err)
	}
	for try := 0; ; try++ {
		text := fmt.Sprintf("again %d", try)
		if res, err := waitResult(t, ctx, c, "agent:x:s2", text); err != nil || res.Payloads[0].Text != "ok" {
			t.Fatalf("s2 after the change: %+v, %v", res, err)
		}
		if got = as.last(t, text); strings.HasPrefix(got.system, "You are agent X2.") && got.model == "m2" {
			if try > 0 {
				t.Logf("the change applied from turn %d after the put", try+1)
			}
			break
		}
		if !strings.HasPrefix(got.system, "You are agent X.") || got.model != "m1" {
			t.Fatalf("after the change: model %s, system prompt:\n%s", got.model, got.system)
		}
	}

	if err := c.DeleteAgent(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	for try := 0; ; try++ {
		res, err := waitResult(t, ctx, c, "agent:x:s3", "anyone?")
		if err == nil && res.Payloads[0].Text == "ok" {
			continue // the watch has not delivered the removal yet
		}
		if try > 0 {
			t.Logf("the removal applied from turn %d after it", try+1)
		}
		var re *lanefleet.RunError
		if !errors.As(err, &re) || re.Kind != events.KindInvalidInput || !strings.Contains(re.Message, `agent "x" is not defined on this fleet`) {
			t.Fatalf("a removed agent's session: %+v, %v", res, err)
		}
		break
	}
}

// TestAgentSettings: on an in-process fleet, an agent's tool policy
// narrows the operator's and never widens it, its model is the default
// of its sessions (a session's own setting still wins), its chat commands
// can be off, and a session whose key names no agent runs as the default
// agent.
func TestAgentSettings(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	as := newAgentServer(t)
	srv := natstest.Start(t)
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	off := false
	for _, a := range []*agents.Agent{
		// apply_patch is the agent's, not the operator's: never offered.
		{ID: "ops", Model: "local/m2", ChatCommands: &off, Tools: &agents.ToolPolicy{ToolPolicy: events.ToolPolicy{Allow: []string{"read", "apply_patch"}}}},
		{ID: "helper", SystemPrompt: "I am the helper."},
		{ID: "quiet", Tools: &agents.ToolPolicy{Profile: agents.ProfileMinimal}},
		{ID: "sales", Model: "local/m2", Thinking: "low"},
	} {
		if _, err := c.PutAgent(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", OpenAICompatible: as.URL, DefaultAgent: "helper",
		WorkspaceRoot: t.TempDir(), ToolPolicy: tools.Policy{Allow: []string{"read", "write", "edit"}}, Env: func(string) string { return "" }})

	cases := []struct {
		key, text string
		model     string
		tools     string
		prompt    string // the system prompt's start
	}{
		{"agent:ops:1", "/status", "m2", "read", "You are an AI agent running inside Lanefleet."},
		{"plain:1", "hello", "m1", "edit,read,write", "I am the helper."},
		{"agent:helper:1", "hello", "m1", "edit,read,write", "I am the helper."},
		{"agent:quiet:1", "hello", "m1", "", "You are an AI agent running inside Lanefleet."},
	}
	for _, cs := range cases {
		if res, err := waitResult(t, ctx, c, cs.key, cs.text); err != nil || res.Payloads[0].Text != "ok" {
			t.Fatalf("%s: %+v, %v", cs.key, res, err)
		}
		got := as.last(t, cs.text)
		if got.model != cs.model || strings.Join(got.tools, ",") != cs.tools || !strings.HasPrefix(got.system, cs.prompt) {
			t.Errorf("%s: model %s, tools %v, system prompt %.60q; want %s, %s, %q", cs.key, got.model, got.tools, got.system, cs.model, cs.tools, cs.prompt)
		}
	}
	// The commands name the agent's defaults.
	if res, err := waitResult(t, ctx, c, "agent:sales:1", "/model"); err != nil || res.Payloads[0].Text != "Model: local/m2 (the agent's default)." {
		t.Fatalf("/model as sales: %+v, %v", res, err)
	}
	if res, err := waitResult(t, ctx, c, "agent:sales:1", "/status"); err != nil || !strings.Contains(res.Payloads[0].Text, "local/m2") {
		t.Fatalf("/status as sales: %+v, %v", res, err)
	}
	// A session's own model wins over its agent's.
	if res, err := waitResult(t, ctx, c, "agent:ops:2", "mine", lanefleet.WithModel("local/m1")); err != nil || res.Payloads[0].Text != "ok" {
		t.Fatalf("ops with its own model: %+v, %v", res, err)
	}
	if got := as.last(t, "mine"); got.model != "m1" {
		t.Errorf("a message's own model: the request went to %s", got.model)
	}
}

// TestAgentUnderTheRoles: under the permissions `worker permissions`
// prints, an admin defines an agent and its AGENTS.md, a worker (worker
// role) runs the agent's session with them, and the MEMORY.md its turn
// writes goes back to the object store; a sender cannot change the agent;
// the server logs no permission violation of the worker's.
func TestAgentUnderTheRoles(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	session := "agent:x:alice"
	a := newAuthFleet(t, []permission.User{
		{Grant: permission.Grant{Role: permission.Worker, User: "worker"}},
		{Grant: permission.Grant{Role: permission.Sender, User: "alice", Sessions: []string{session}}},
		{Grant: permission.Grant{Role: permission.Admin, User: "root"}},
	}, "")
	_, v := a.start(t)
	root, err := lanefleet.New(a.connectAs(t, "root").nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := root.PutAgent(ctx, &agents.Agent{ID: "x", SystemPrompt: "You are X."}); err != nil {
		t.Fatal(err)
	}
	if _, err := root.PutAgentFile(ctx, "x", "AGENTS.md", []byte("be brief")); err != nil {
		t.Fatal(err)
	}
	startMember(t, a.url(), fleet.Config{WorkerID: "w1", User: "worker", Password: a.passwords["worker"], WorkspaceRoot: t.TempDir()})

	alice := a.connectAs(t, "alice")
	live := subscribeEvents(t, alice, session)
	script := `#script {"replies":[{"toolCalls":[{"id":"w1","name":"write","arguments":{"path":"MEMORY.md","content":"alice likes tea"}}]},{"text":"noted"}]}`
	evs := live.run(t, sendRaw(t, alice, session, events.Inbound{Text: script, Model: "scripted/script"}))
	if final := evs[len(evs)-1]; final.Data.Result == nil || final.Data.Result.Payloads[0].Text != "noted" {
		t.Fatalf("final event %+v", final.Data)
	}
	if b, err := root.AgentFile(ctx, "x", "MEMORY.md"); err != nil || string(b) != "alice likes tea" {
		t.Fatalf("MEMORY.md: %q, %v", b, err)
	}
	// A sender's request to the bucket is refused by the server (it
	// never answers: the request ends at its deadline).
	sender, _ := lanefleet.New(alice.nc)
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	defer scancel()
	if _, err := sender.PutAgent(sctx, &agents.Agent{ID: "x", SystemPrompt: "You are mine."}); err == nil {
		t.Fatal("a sender changed the agent")
	}
	alice.denied(t, "a sender's put", "$JS.API.STREAM.INFO.KV_agents")
	if vs := v.list(); len(vs) > 0 {
		for _, s := range vs {
			if !strings.Contains(s, "alice") {
				t.Fatalf("the server logged permission violations:\n%s", strings.Join(vs, "\n"))
			}
		}
	}
}
