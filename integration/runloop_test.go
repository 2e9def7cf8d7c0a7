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
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/agentprompt"
	"github.com/lanefleet/lanefleet/authprofile"
	"github.com/lanefleet/lanefleet/authstore"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// keyServer is an OpenAI-compatible Chat Completions endpoint that answers
// by API key: a 429 with Retry-After for the limited keys, the recorded SSE
// reply for the others. It logs the key of every request.
type keyServer struct {
	*httptest.Server
	mu   sync.Mutex
	keys []string
}

func newKeyServer(t *testing.T, limited ...string) *keyServer {
	t.Helper()
	okBody, err := os.ReadFile("testdata/openai-completions-text.sse")
	if err != nil {
		t.Fatal(err)
	}
	tooMany, err := os.ReadFile("testdata/openai-completions-429-rate-limit.json")
	if err != nil {
		t.Fatal(err)
	}
	ks := &keyServer{}
	ks.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		ks.mu.Lock()
		ks.keys = append(ks.keys, key)
		ks.mu.Unlock()
		for _, l := range limited {
			if key == l {
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Retry-After", "60")
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = w.Write(tooMany)
				return
			}
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(okBody)
	}))
	t.Cleanup(ks.Close)
	return ks
}

func (ks *keyServer) used() string {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return strings.Join(ks.keys, ",")
}

// acmeFiles writes a models file for provider acme (Chat Completions at
// url) and an auth-profiles.json with the profiles acme:a and acme:b.
func acmeFiles(t *testing.T, url string, window ...int) (models, profiles string) {
	t.Helper()
	ctx := 128000
	if len(window) > 0 {
		ctx = window[0]
	}
	dir := t.TempDir()
	models = filepath.Join(dir, "models.json")
	profiles = filepath.Join(dir, "auth-profiles.json")
	m := fmt.Sprintf(`{"providers":{"acme":{"baseUrl":%q,"api":"openai-completions","models":[{"id":"m1","contextWindow":%d,"maxTokens":4096}]}}}`, url+"/v1", ctx)
	p := `{"version":1,"profiles":{"acme:a":{"type":"api_key","provider":"acme","key":"sk-acme-a"},"acme:b":{"type":"api_key","provider":"acme","key":"sk-acme-b"}},"order":{"acme":["acme:a","acme:b"]}}`
	for path, data := range map[string]string{models: m, profiles: p} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return models, profiles
}

// TestRateLimitedProfileRotatesFleetWide: a 429 on profile A makes the run
// rotate to B; the cooldown lands in the auth bucket, so another worker's
// next run starts on B without trying A.
func TestRateLimitedProfileRotatesFleetWide(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	ks := newKeyServer(t, "sk-acme-a")
	models, profiles := acmeFiles(t, ks.URL)
	srv := natstest.Start(t)
	cfg := fleet.Config{WorkerID: "w1", ModelsFile: models, AuthProfiles: profiles, DefaultModel: "acme/m1", Env: func(string) string { return "" }}
	w1 := startMember(t, srv.URL, cfg)
	nc := natstest.Connect(t, srv.URL)
	c, _ := lanefleet.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	run, err := c.Send(ctx, "rot:1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	res, err := run.Wait(ctx)
	if err != nil || len(res.Payloads) == 0 || res.Payloads[0].Text == "" {
		t.Fatalf("first run: %+v, %v", res, err)
	}
	if got := ks.used(); got != "sk-acme-a,sk-acme-b" {
		t.Fatalf("keys used %q, want a then b", got)
	}
	// The cooldown is fleet state: read it from the bucket.
	js := newJS(t, nc)
	st, err := authstore.Open(ctx, js, authstore.Config{Auth: authprofile.Config{Fleet: authprofile.FleetDefaults()}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, ok := st.State("acme:a")
	if !ok || a.Models["m1"].CooldownUntil < time.Now().Add(50*time.Second).UnixMilli() {
		t.Fatalf("acme:a in the bucket: %+v (want a cooldown of at least the 60 s Retry-After)", a)
	}
	b, _ := st.State("acme:b")
	if b.LastUsed == 0 {
		t.Fatalf("acme:b not marked used: %+v", b)
	}
	raw, _ := json.Marshal(a)
	if strings.Contains(string(raw), "sk-acme") {
		t.Fatal("a secret reached the bucket")
	}

	// Another worker runs the next turn: it starts on b.
	w1.stop()
	cfg.WorkerID = "w2"
	startMember(t, srv.URL, cfg)
	run, err = c.Send(ctx, "rot:2", "hello again")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ks.used(); got != "sk-acme-a,sk-acme-b,sk-acme-b" {
		t.Fatalf("keys used %q: the second worker tried the cooling profile", got)
	}
}

// chatServer is a Chat Completions endpoint that plays one SSE body per
// request, in order, and records each request's messages.
type chatServer struct {
	*httptest.Server
	mu       sync.Mutex
	bodies   []string
	requests [][]map[string]any
}

func newChatServer(t *testing.T, bodies ...string) *chatServer {
	t.Helper()
	cs := &chatServer{bodies: bodies}
	cs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []map[string]any `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		cs.mu.Lock()
		n := len(cs.requests)
		cs.requests = append(cs.requests, req.Messages)
		body := cs.bodies[min(n, len(cs.bodies)-1)]
		cs.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(cs.Close)
	return cs
}

// sseToolCalls is a Chat Completions stream whose reply is tool calls with
// the given names and raw argument strings.
func sseToolCalls(calls ...[2]string) string {
	var b strings.Builder
	for i, c := range calls {
		delta := map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": fmt.Sprintf("call_%d", i), "type": "function",
			"function": map[string]any{"name": c[0], "arguments": c[1]}}}}
		if i == 0 {
			delta["role"] = "assistant"
		}
		chunk, _ := json.Marshal(map[string]any{"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m1",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": nil}}})
		fmt.Fprintf(&b, "data: %s\n\n", chunk)
	}
	fmt.Fprintf(&b, "data: %s\n\n", `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m1","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`)
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

// sseText is a Chat Completions stream answering text.
func sseText(text string) string {
	chunk, _ := json.Marshal(map[string]any{"id": "c2", "object": "chat.completion.chunk", "created": 1, "model": "m1",
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": text}, "finish_reason": nil}}})
	return fmt.Sprintf("data: %s\n\ndata: %s\n\ndata: [DONE]\n\n", chunk,
		`{"id":"c2","object":"chat.completion.chunk","created":1,"model":"m1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
}

// TestHostileToolCalls: tool calls that try to leave the workspace, flood
// the output or send arguments that are not JSON become tool errors (or
// capped results) that the model sees on its next call; the worker goes on.
func TestHostileToolCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	cs := newChatServer(t,
		sseToolCalls(
			[2]string{"read", `{"path":"../../../../etc/passwd"}`},
			[2]string{"exec", `{"command":"head -c 3000000 /dev/zero | tr '\\0' x"}`},
			[2]string{"write", `not json{`},
			[2]string{"edit", `{"path":"/etc/hosts","oldText":"a","newText":"b"}`},
			[2]string{"nosuchtool", `{}`},
		),
		sseText("I could not do any of that."))
	models, profiles := acmeFiles(t, cs.URL)
	srv := natstest.Start(t)
	root := t.TempDir()
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", ModelsFile: models, AuthProfiles: profiles, DefaultModel: "acme/m1",
		WorkspaceRoot: root, Exec: true, ExecUnconfined: execUnconfined(t), Env: envMap(map[string]string{"PATH": "/usr/bin:/bin"})})
	nc := natstest.Connect(t, srv.URL)
	c, _ := lanefleet.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	run, err := c.Send(ctx, "hostile", "do your worst")
	if err != nil {
		t.Fatal(err)
	}
	var toolResults []string
	for ev, err := range run.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Stream == events.StreamTool && ev.Data.Phase == events.PhaseResult {
			toolResults = append(toolResults, fmt.Sprintf("%s:%v", ev.Data.Name, ev.Data.IsError))
		}
	}
	if got := strings.Join(toolResults, " "); got != "read:true exec:false write:true edit:true nosuchtool:true" {
		t.Fatalf("tool results %s", got)
	}
	res, err := run.Wait(ctx)
	if err != nil || res.Payloads[len(res.Payloads)-1].Text != "I could not do any of that." {
		t.Fatalf("result %+v, %v", res, err)
	}
	cs.mu.Lock()
	second := cs.requests[1]
	cs.mu.Unlock()
	var seen []string
	for _, m := range second {
		if m["role"] == "tool" {
			content, _ := m["content"].(string)
			seen = append(seen, content)
			if len(content) > 100_000 {
				t.Errorf("a tool result of %d chars reached the model", len(content))
			}
		}
	}
	// Every result reaches the model, the call of a tool that does not
	// exist with its "not found" too (the reference drops that call and
	// its result, and a model that does not see them makes the call
	// again).
	if len(seen) != 5 || !strings.Contains(seen[0], "escapes the workspace") || !strings.Contains(seen[1], "exited with code 0") ||
		!strings.Contains(seen[2], "missing required argument") || !strings.Contains(seen[3], "outside the workspace") ||
		seen[4] != "Tool nosuchtool not found" {
		for i := range seen {
			seen[i] = seen[i][:min(len(seen[i]), 120)]
		}
		t.Fatalf("the model saw %d tool results: %q", len(seen), seen)
	}
	if _, err := os.Stat(filepath.Join(root, "hostile")); err != nil {
		t.Fatalf("the session's workspace: %v", err)
	}
}

// weatherTool is a tool another process offers over NATS.
type weatherTool struct {
	mu   sync.Mutex
	seen []remote.RunInfo
}

func (w *weatherTool) Spec() provider.Tool {
	return provider.Tool{Name: "weather", Description: "Current weather in a city", Parameters: map[string]any{
		"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"}}}
}

func (w *weatherTool) Call(ctx context.Context, c tools.Call) (tools.Result, error) {
	w.mu.Lock()
	w.seen = append(w.seen, remote.RunInfoFrom(ctx))
	w.mu.Unlock()
	city, _ := c.Args["city"].(string)
	if city == "" {
		return tools.Result{}, fmt.Errorf("city is required")
	}
	return tools.TextResult("22°C and clear in " + city), nil
}

// TestRemoteToolThroughTheFleet: a tool served by another process with the
// micro package is offered to the model and called by the worker; the tool
// learns which session and run called it.
func TestRemoteToolThroughTheFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	wt := &weatherTool{}
	svc, err := remote.Serve(natstest.Connect(t, srv.URL), remote.ServiceConfig{}, wt)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", NoBuiltinTools: true, RemoteTools: []string{"weather"}})
	nc := natstest.Connect(t, srv.URL)
	c, _ := lanefleet.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	script := `#script {"replies":[{"toolCalls":[{"id":"w1","name":"weather","arguments":{"city":"Lisbon"}}]},{"text":"It is nice out."}]}`
	run, err := c.Send(ctx, "remote:1", script, lanefleet.WithModel("scripted/script"))
	if err != nil {
		t.Fatal(err)
	}
	var result string
	for ev, err := range run.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Stream == events.StreamTool && ev.Data.Phase == events.PhaseResult {
			b, _ := json.Marshal(ev.Data.Payload)
			result = string(b)
			if ev.Data.IsError {
				t.Fatalf("tool error: %s", result)
			}
		}
	}
	if !strings.Contains(result, "22°C and clear in Lisbon") {
		t.Fatalf("tool result event %s", result)
	}
	wt.mu.Lock()
	defer wt.mu.Unlock()
	if len(wt.seen) != 1 || wt.seen[0].SessionKey != "remote:1" || wt.seen[0].RunID != run.ID {
		t.Fatalf("the tool saw %+v, want session remote:1 run %s", wt.seen, run.ID)
	}
}

// TestSystemPromptFromTheWorkspace: a session's workspace context files and
// skills, and the fleet's skills directory, reach the model's system prompt.
func TestSystemPromptFromTheWorkspace(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	cs := newChatServer(t, sseText("Olá!"))
	models, profiles := acmeFiles(t, cs.URL)
	root, skills := t.TempDir(), t.TempDir()
	write := func(path, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "prompt-1", "AGENTS.md"), "Always answer in Portuguese.")
	write(filepath.Join(root, "prompt-1", "skills", "invoices", "SKILL.md"), "---\nname: invoices\ndescription: Read and total PDF invoices.\n---\nUse pdftotext.\n")
	write(filepath.Join(skills, "weather", "SKILL.md"), "---\nname: weather\ndescription: Look up the weather.\n---\nCall the weather API.\n")
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", ModelsFile: models, AuthProfiles: profiles, DefaultModel: "acme/m1",
		WorkspaceRoot: root, SkillsDir: skills, SystemPrompt: "You are the Lanefleet test agent.", NoRemoteTools: true})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	run, err := c.Send(ctx, "prompt-1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	cs.mu.Lock()
	first := cs.requests[0][0]
	cs.mu.Unlock()
	system, _ := first["content"].(string)
	for _, want := range []string{"You are the Lanefleet test agent.", "Always answer in Portuguese.", "invoices", "Read and total PDF invoices.", "weather", filepath.Join(root, "prompt-1")} {
		if !strings.Contains(system, want) {
			t.Errorf("system prompt (role %v) lacks %q", first["role"], want)
		}
	}
}

// TestClientToolRoundTrip: a run that calls a client tool ends with
// stopReason tool_calls and the pending call; the client's next message
// answers it and the run goes on from there, with the answer in the
// transcript next to the call.
func TestClientToolRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	// Built-in tools are on: the answer need not offer the client tool
	// again for its call to stay in the history.
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", WorkspaceRoot: t.TempDir(), NoRemoteTools: true})
	nc := natstest.Connect(t, srv.URL)
	js := newJS(t, nc)
	c, _ := lanefleet.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	send := func(in map[string]any) *lanefleet.Run {
		t.Helper()
		data, _ := json.Marshal(in)
		ack, err := js.Publish(ctx, "agent.in.ctool", data)
		if err != nil {
			t.Fatal(err)
		}
		return c.Run("ctool", fmt.Sprint(ack.Sequence))
	}
	script := `#script {"replies":[{"toolCalls":[{"id":"call_9","name":"location","arguments":{"precision":"city"}}]},{"text":"You are in Lisbon."}]}`
	first := send(map[string]any{"text": script, "model": "scripted/script",
		"tools": []any{map[string]any{"name": "location", "description": "The user's location", "parameters": map[string]any{"type": "object"}}}})
	res, err := first.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Meta.StopReason != "tool_calls" || len(res.Meta.PendingToolCalls) != 1 || res.Meta.PendingToolCalls[0].ID != "call_9" ||
		res.Meta.PendingToolCalls[0].Arguments != `{"precision":"city"}` {
		t.Fatalf("first run meta %+v", res.Meta)
	}
	second := send(map[string]any{"model": "scripted/script", "toolResults": []any{map[string]any{"toolCallId": "call_9", "text": "Lisbon, PT"}}})
	res, err = second.Wait(ctx)
	if err != nil || res.Payloads[len(res.Payloads)-1].Text != "You are in Lisbon." {
		t.Fatalf("second run %+v, %v", res, err)
	}
	hist, err := c.History(ctx, "ctool")
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, e := range hist {
		roles = append(roles, string(e.Message.Role))
	}
	if got := strings.Join(roles, ","); got != "user,assistant,toolResult,assistant" {
		t.Fatalf("transcript roles %s", got)
	}
	if hist[2].Message.ToolCallID != "call_9" || hist[2].Message.Content.Text() != "Lisbon, PT" {
		t.Fatalf("tool result entry %+v", hist[2].Message)
	}
}

// overflowBody is a Chat Completions error body: the 400 a provider
// answers when the prompt does not fit.
const overflowBody = `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 208423 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`

// TestOverflowCompactsThroughTheFleet: a session imported from a pi file
// that no longer fits the model overflows; the worker compacts it with the
// session's model (a pi compaction entry in the transcript), retries and
// answers; the next turn sends the summary and the kept tail only.
func TestOverflowCompactsThroughTheFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	var mu sync.Mutex
	var sizes []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []map[string]any `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		var contents strings.Builder
		for _, m := range req.Messages {
			fmt.Fprint(&contents, m["content"])
		}
		mu.Lock()
		sizes = append(sizes, len(req.Messages))
		mu.Unlock()
		system, _ := req.Messages[0]["content"].(string)
		switch {
		case strings.Contains(strings.ToLower(system), "summar"):
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(sseText("## Goal\nTalk about the long log.")))
		case strings.Contains(contents.String(), "<summary>"):
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte(sseText("Answered with the summary.")))
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(overflowBody))
		}
	}))
	t.Cleanup(srv.Close)
	// The window is large enough for the threshold to stay quiet: the
	// provider's overflow is what triggers the compaction.
	models, profiles := acmeFiles(t, srv.URL, 400000)

	// A pi session of 60 turns of ~2,000 tokens each.
	var file strings.Builder
	file.WriteString(`{"type":"session","version":3,"id":"big-session","timestamp":"2026-11-01T10:00:00.000Z","cwd":"/tmp"}` + "\n")
	parent := ""
	for i := range 120 {
		id := fmt.Sprintf("e%04d", i)
		role, content := "user", fmt.Sprintf(`%q`, fmt.Sprintf("question %d: ", i)+strings.Repeat("words of the log ", 500))
		if i%2 == 1 {
			role, content = "assistant", fmt.Sprintf(`[{"type":"text","text":%q}]`, fmt.Sprintf("answer %d: ", i)+strings.Repeat("more words ", 700))
		}
		p := "null"
		if parent != "" {
			p = fmt.Sprintf("%q", parent)
		}
		extra := ""
		if role == "assistant" {
			extra = `,"api":"openai-completions","provider":"acme","model":"m1","stopReason":"stop","usage":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}}`
		}
		fmt.Fprintf(&file, `{"type":"message","id":%q,"parentId":%s,"timestamp":"2026-11-01T10:00:00.000Z","message":{"role":%q,"content":%s,"timestamp":1761991200000%s}}`+"\n", id, p, role, content, extra)
		parent = id
	}
	nats := natstest.Start(t)
	startMember(t, nats.URL, fleet.Config{WorkerID: "w1", ModelsFile: models, AuthProfiles: profiles, DefaultModel: "acme/m1", NoRemoteTools: true, NoBuiltinTools: true})
	c, _ := lanefleet.New(natstest.Connect(t, nats.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := c.Import(ctx, "big", strings.NewReader(file.String())); err != nil {
		t.Fatal(err)
	}
	run, err := c.Send(ctx, "big", "what was it about?")
	if err != nil {
		t.Fatal(err)
	}
	var phases []string
	for ev, err := range run.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Stream == "compaction" {
			phases = append(phases, fmt.Sprintf("%s:%v", ev.Data.Phase, ev.Data.WillRetry))
		}
	}
	res, err := run.Wait(ctx)
	if err != nil || res.Payloads[len(res.Payloads)-1].Text != "Answered with the summary." || res.Meta.AgentMeta.CompactionCount != 1 {
		t.Fatalf("result %+v, %v", res, err)
	}
	if strings.Join(phases, ",") != "start:false,end:true" {
		t.Fatalf("compaction events %v, want one overflow compaction that retries", phases)
	}
	hist, err := c.History(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	compactions := 0
	for _, e := range hist {
		if e.Type == "compaction" {
			compactions++
			if s, _ := e.Fields["summary"].(string); !strings.Contains(s, "Talk about the long log.") {
				t.Fatalf("compaction entry %+v", e.Fields)
			}
		}
	}
	if compactions != 1 {
		t.Fatalf("%d compaction entries in the transcript", compactions)
	}
	// The next turn reads the compacted session: summary + kept tail.
	run, err = c.Send(ctx, "big", "and then?")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if last := sizes[len(sizes)-1]; last >= 60 {
		t.Fatalf("the turn after compaction sent %d messages; the history had 120", last)
	}
}

// TestSkillEnvironmentReachesExec: a configured skill of the fleet's skills
// directory gives its environment and API key to a command that names the
// variable, and to no other (env shows nothing of it); a disabled skill
// gives nothing; a session whose workspace holds a skill named like a
// configured one (written by its own runs) never gets that skill's secrets.
func TestSkillEnvironmentReachesExec(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	skills, root := t.TempDir(), t.TempDir()
	writeSkill := func(dir, name, extra string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		body := fmt.Sprintf("---\nname: %s\ndescription: The %s skill.\n%s---\n", name, name, extra)
		if err := os.WriteFile(filepath.Join(dir, name, "SKILL.md"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const primary = `metadata: {"openclaw": {"primaryEnv": "%s"}}` + "\n"
	writeSkill(skills, "weather", fmt.Sprintf(primary, "WEATHER_KEY"))
	writeSkill(skills, "mail", "")
	// "deploy" is configured but not installed: only a workspace has it.
	tok, _ := events.KeyToken("skills:squatter")
	writeSkill(filepath.Join(root, tok, "skills"), "deploy", fmt.Sprintf(primary, "DEPLOY_KEY"))
	off := false
	srv := natstest.Start(t)
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", WorkspaceRoot: root, SkillsDir: skills, NoRemoteTools: true,
		Exec: true, ExecUnconfined: execUnconfined(t),
		Skills: agentprompt.SkillConfigs{
			"weather": {Env: map[string]string{"WEATHER_TOKEN": "wt-123"}, APIKey: "wk-789"},
			"mail":    {Enabled: &off, Env: map[string]string{"MAIL_TOKEN": "mt-456"}},
			"deploy":  {Env: map[string]string{"DEPLOY_TOKEN": "dt-000"}, APIKey: "dk-000"},
		},
		Env: envMap(map[string]string{"PATH": "/usr/bin:/bin"})})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	outputs := func(session string, commands ...string) []string {
		t.Helper()
		var calls []string
		for i, cmd := range commands {
			arg, _ := json.Marshal(cmd)
			calls = append(calls, fmt.Sprintf(`{"id":"x%d","name":"exec","arguments":{"command":%s}}`, i, arg))
		}
		script := `#script {"replies":[{"toolCalls":[` + strings.Join(calls, ",") + `]},{"text":"done"}]}`
		if _, err := waitResult(t, ctx, c, session, script, lanefleet.WithModel("scripted/script")); err != nil {
			t.Fatal(err)
		}
		hist, err := c.History(ctx, session)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range hist {
			if e.Message != nil && e.Message.Role == "toolResult" {
				out = append(out, e.Message.Content.Text())
			}
		}
		return out
	}
	out := outputs("skills", "echo weather=$WEATHER_TOKEN key=${WEATHER_KEY} mail=$MAIL_TOKEN.", "env")
	if len(out) != 2 || !strings.HasPrefix(out[0], "weather=wt-123 key=wk-789 mail=.\n") {
		t.Fatalf("exec output %q", out)
	}
	if strings.Contains(out[1], "WEATHER") || strings.Contains(out[1], "wt-123") || strings.Contains(out[1], "wk-789") {
		t.Fatalf("a command that names no skill variable got them: %q", out[1])
	}
	out = outputs("skills:squatter", "echo deploy=$DEPLOY_TOKEN key=$DEPLOY_KEY weather=$WEATHER_TOKEN.")
	if len(out) != 1 || !strings.HasPrefix(out[0], "deploy= key= weather=wt-123.\n") {
		t.Fatalf("a workspace skill claimed a configured skill's secrets: %q", out)
	}
}

// TestSteerChangesATurnsCourse: a steer message sent while a turn runs a
// tool joins the turn after the tool's result; the model answers it and the
// rest of the original plan (a second tool call) never runs.
func TestSteerChangesATurnsCourse(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	root := t.TempDir()
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", WorkspaceRoot: root, NoRemoteTools: true,
		Exec: true, ExecUnconfined: execUnconfined(t),
		Env: envMap(map[string]string{"PATH": "/usr/bin:/bin"})})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// The steer must be stored before the first tool ends: 5 s of it, as
	// one second is a window a loaded machine's look at the run's events
	// and one send can outlast.
	plan := `#script {"replies":[` +
		`{"toolCalls":[{"id":"t1","name":"exec","arguments":{"command":"sleep 5; echo first step"}}]},` +
		`{"toolCalls":[{"id":"t2","name":"write","arguments":{"path":"second-step.txt","content":"should not happen"}}]},` +
		`{"text":"finished the original plan"}]}`
	first, err := c.Send(ctx, "course", plan, lanefleet.WithModel("scripted/script"))
	if err != nil {
		t.Fatal(err)
	}
	for ev, err := range first.Events(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Stream == events.StreamTool && ev.Data.Phase == events.PhaseStart {
			break // the first tool runs now
		}
	}
	steer, err := c.Send(ctx, "course", `#script {"replies":[{"text":"turning left instead"}]}`,
		lanefleet.WithMode("steer"), lanefleet.WithModel("scripted/script"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := first.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if last := res.Payloads[len(res.Payloads)-1].Text; last != "turning left instead" {
		t.Fatalf("the turn ended with %q", last)
	}
	if _, err := os.Stat(filepath.Join(root, "course", "second-step.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the original plan's second step ran: %v", err)
	}
	if sres, err := steer.Wait(ctx); err != nil || sres.Payloads[len(sres.Payloads)-1].Text != "turning left instead" {
		t.Fatalf("steer run %+v, %v", sres, err)
	}
}
