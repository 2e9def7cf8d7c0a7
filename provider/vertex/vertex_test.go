package vertex_test

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/internal/wiretest"
	"github.com/lanefleet/lanefleet/provider/vertex"
)

// bundle is one test's Google: a token endpoint, a service account of
// project proj-a, Vertex AI answering with answer, and the adapter.
type bundle struct {
	ts      *tokenServer
	vs      *vertexServer
	key     string // the service account's key file JSON
	adapter *vertex.Adapter

	mu     sync.Mutex
	answer func(w http.ResponseWriter, c call)
	calls  []call
}

type setupOpts struct {
	lifetime time.Duration
	env      map[string]string
}

func setup(t *testing.T, o setupOpts) *bundle {
	t.Helper()
	if o.lifetime == 0 {
		o.lifetime = time.Hour
	}
	b := &bundle{}
	b.ts = newTokenServer(t, o.lifetime)
	b.key = serviceAccount(t, b.ts, "sa-a", "proj-a", keys()[0])
	b.vs = newVertexServer(t, b.ts, func(w http.ResponseWriter, c call) {
		b.mu.Lock()
		b.calls = append(b.calls, c)
		answer := b.answer
		b.mu.Unlock()
		answer(w, c)
	})
	env := map[string]string{"GOOGLE_CLOUD_LOCATION": "us-east5"}
	for k, v := range o.env {
		env[k] = v
	}
	b.adapter = vertex.New(vertex.Config{Env: func(k string) string { return env[k] }})
	t.Cleanup(b.adapter.Close)
	return b
}

func (b *bundle) setAnswer(f func(w http.ResponseWriter, c call)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.answer = f
}

func (b *bundle) lastCall(t *testing.T) call {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.calls) == 0 {
		t.Fatal("no call reached Vertex AI")
	}
	return b.calls[len(b.calls)-1]
}

// stream calls the adapter with the bundle's key and returns the
// message, the error and the terminal event.
func (b *bundle) stream(t *testing.T, req *provider.Request) (message.Message, provider.Event, error) {
	t.Helper()
	if req.APIKey == "" {
		req.APIKey = provider.Secret(b.key)
	}
	var last provider.Event
	n := 0
	msg, err := b.adapter.Stream(t.Context(), req, func(e provider.Event) {
		if n == 0 && e.Type != provider.EventStart && e.Type != provider.EventError {
			t.Errorf("first event %s, want start", e.Type)
		}
		n++
		last = e
	})
	if last.Type != provider.EventDone && last.Type != provider.EventError {
		t.Fatalf("terminal event %+v", last)
	}
	return msg, last, err
}

// fixture reads a recorded body of the google or anthropic adapter's
// testdata (copies of shared/wire): Vertex AI streams the same shapes.
func fixture(t *testing.T, pkg, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", pkg, "testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gsse(chunks ...string) []byte {
	var s strings.Builder
	for _, c := range chunks {
		s.WriteString("data: " + c + "\r\n\r\n")
	}
	return []byte(s.String())
}

func asse(events ...string) []byte {
	var s strings.Builder
	for _, e := range events {
		name, data, _ := strings.Cut(e, " ")
		s.WriteString("event: " + name + "\ndata: " + data + "\n\n")
	}
	return []byte(s.String())
}

// Gemini and Claude replies as Vertex AI streams them.
var (
	geminiText = gsse(
		`{"candidates": [{"content": {"role": "model","parts": [{"text": "Hello"}]}}],"usageMetadata": {"trafficType": "ON_DEMAND"},"modelVersion": "gemini-2.5-flash","createTime": "2026-11-29T10:00:00.000000Z","responseId": "r1"}`,
		`{"candidates": [{"content": {"role": "model","parts": [{"text": " from Vertex."}]},"finishReason": "STOP"}],"usageMetadata": {"promptTokenCount": 1000,"candidatesTokenCount": 150,"thoughtsTokenCount": 50,"totalTokenCount": 1200,"trafficType": "ON_DEMAND","promptTokensDetails": [{"modality": "TEXT","tokenCount": 1000}]},"modelVersion": "gemini-2.5-flash","createTime": "2026-11-29T10:00:00.000000Z","responseId": "r1"}`)
	geminiThinking = gsse(
		`{"candidates": [{"content": {"role": "model","parts": [{"text": "Weighing the greeting.","thought": true}]}}],"modelVersion": "gemini-2.5-flash"}`,
		`{"candidates": [{"content": {"role": "model","parts": [{"text": "Hi!","thoughtSignature": "c2lnbmVk"}]},"finishReason": "STOP"}],"usageMetadata": {"promptTokenCount": 10,"candidatesTokenCount": 2,"thoughtsTokenCount": 30,"totalTokenCount": 42},"modelVersion": "gemini-2.5-flash"}`)
	claudeText = asse(
		`message_start {"type":"message_start","message":{"id":"msg_vrtx_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1000,"cache_creation_input_tokens":0,"cache_read_input_tokens":2000,"output_tokens":1}}}`,
		`ping {"type": "ping"}`,
		`content_block_start {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello from "}}`,
		`content_block_delta {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Claude on Vertex."}}`,
		`content_block_stop {"type":"content_block_stop","index":0}`,
		`message_delta {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":200}}`,
		`message_stop {"type":"message_stop"}`)
)

func textOf(m message.Message) (text, thinking string) {
	for _, b := range m.Content.Blocks {
		switch b.Type {
		case message.BlockText:
			text += b.Text
		case message.BlockThinking:
			thinking += b.Thinking
		}
	}
	return text, thinking
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

// TestText: a reply of each family reaches the location's model path of
// the key's project with the token the key was exchanged for, and the
// final event carries the usage and its cost at the model's prices.
func TestText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, api, id, publisher string
		body                     []byte
		text                     string
		usage                    message.Usage
		cost                     float64
	}{
		{"gemini", "google-vertex", "gemini-2.5-flash", "google", geminiText, "Hello from Vertex.",
			message.Usage{Input: 1000, Output: 200, TotalTokens: 1200}, 1000*3e-6 + 200*15e-6},
		{"claude", "anthropic-vertex", "claude-sonnet-4-5@20250929", "anthropic", claudeText, "Hello from Claude on Vertex.",
			message.Usage{Input: 1000, Output: 200, CacheRead: 2000}, 1000*3e-6 + 200*15e-6 + 2000*0.3e-6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{})
			b.setAnswer(func(w http.ResponseWriter, c call) { sseReply(w, tt.body) })
			msg, last, err := b.stream(t, &provider.Request{Model: model(b.vs.URL, tt.api, tt.id), SystemPrompt: "Be brief.",
				Messages: []message.Message{message.User("hi", 1)}, SessionID: "s1"})
			if err != nil {
				t.Fatal(err)
			}
			if text, _ := textOf(msg); text != tt.text || msg.StopReason != message.StopStop {
				t.Errorf("text %q stop %s", text, msg.StopReason)
			}
			c := b.lastCall(t)
			if c.project != "proj-a" || c.location != "us-east5" || c.publisher != tt.publisher || c.model != tt.id || c.account != "sa-a@proj-a.iam.gserviceaccount.com" {
				t.Errorf("call %+v", c)
			}
			if tt.publisher == "anthropic" {
				if c.body["anthropic_version"] != vertex.AnthropicVersion || c.body["model"] != nil || c.body["stream"] != true {
					t.Errorf("rawPredict body: anthropic_version %v, model %v, stream %v", c.body["anthropic_version"], c.body["model"], c.body["stream"])
				}
				if c.header.Get("X-Api-Key") != "" || c.header.Get("Anthropic-Version") != "" {
					t.Errorf("first-party headers sent to Vertex: %v", c.header)
				}
				// Prompt caching: the system prompt carries a breakpoint.
				if sys := fmt.Sprint(c.body["system"]); !strings.Contains(sys, "ephemeral") {
					t.Errorf("system %s has no cache breakpoint", sys)
				}
			}
			u := last.Message.Usage
			if u == nil || u.Input != tt.usage.Input || u.Output != tt.usage.Output || u.CacheRead != tt.usage.CacheRead {
				t.Fatalf("usage in the final event %+v, want %+v", u, tt.usage)
			}
			if !near(u.Cost.Total, tt.cost) {
				t.Errorf("cost in the final event %+v, want total %v", u.Cost, tt.cost)
			}
		})
	}
}

// TestToolTurn: a recorded tool call of each family, then the next
// request carries the call and its result in the family's shape and
// gets the answer.
func TestToolTurn(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, api, id string
		first         []byte
		second        []byte
		callID, tool  string
		// result finds the tool result in the second request's body.
		result func(body map[string]any) string
	}{
		{"gemini", "google-vertex", "gemini-3-pro-preview",
			fixture(t, "google", "google-generative-ai-function-call-with-id.sse"), geminiText, "9d532gc9", "weather",
			func(body map[string]any) string {
				contents := body["contents"].([]any)
				last := contents[len(contents)-1].(map[string]any)
				fr := last["parts"].([]any)[0].(map[string]any)["functionResponse"].(map[string]any)
				return fmt.Sprint(fr["name"], " ", fr["response"])
			}},
		{"claude", "anthropic-vertex", "claude-sonnet-4-5@20250929",
			fixture(t, "anthropic", "anthropic-messages-thinking-tool-use.sse"), claudeText, "toolu_01Js4AMfx5qpTLhwTusnvT68", "weather",
			func(body map[string]any) string {
				msgs := body["messages"].([]any)
				last := msgs[len(msgs)-1].(map[string]any)
				tr := last["content"].([]any)[0].(map[string]any)
				return fmt.Sprint(tr["tool_use_id"], " ", tr["content"])
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{})
			b.setAnswer(func(w http.ResponseWriter, c call) { sseReply(w, tt.first) })
			tools := []provider.Tool{{Name: "weather", Description: "Weather of a place", Parameters: map[string]any{"type": "object", "properties": map[string]any{"location": map[string]any{"type": "string"}}}}}
			m := model(b.vs.URL, tt.api, tt.id)
			msgs := []message.Message{message.User("Weather in Florence?", 1)}
			reply, _, err := b.stream(t, &provider.Request{Model: m, Messages: msgs, Tools: tools, Thinking: provider.ThinkingLow})
			if err != nil {
				t.Fatal(err)
			}
			calls := reply.ToolCalls()
			if reply.StopReason != message.StopToolUse || len(calls) != 1 || calls[0].ID != tt.callID || calls[0].Name != tt.tool || calls[0].Arguments["location"] != "Florence, Italy" {
				t.Fatalf("stop %s calls %+v", reply.StopReason, calls)
			}
			result := message.Message{Role: message.RoleToolResult, ToolCallID: calls[0].ID, ToolName: calls[0].Name,
				Content: message.Content{Blocks: []message.Block{message.Text("Sunny, 31°C")}}, Timestamp: 3}
			b.setAnswer(func(w http.ResponseWriter, c call) { sseReply(w, tt.second) })
			msgs = append(msgs, reply, result)
			final, _, err := b.stream(t, &provider.Request{Model: m, Messages: msgs, Tools: tools, Thinking: provider.ThinkingLow})
			if err != nil || final.StopReason != message.StopStop {
				t.Fatalf("answer after the result: %v %s", err, final.StopReason)
			}
			got := tt.result(b.lastCall(t).body)
			if !strings.Contains(got, "Sunny, 31°C") || (tt.name == "claude" && !strings.HasPrefix(got, tt.callID)) || (tt.name == "gemini" && !strings.HasPrefix(got, "weather")) {
				t.Errorf("tool result sent as %s", got)
			}
		})
	}
}

// TestThinking: a thinking level becomes each family's thinking request
// on Vertex, and the reasoning comes back as a thinking block with its
// signature (Anthropic's recorded signature byte for byte).
func TestThinking(t *testing.T) {
	t.Parallel()
	anth := fixture(t, "anthropic", "anthropic-messages-thinking-tool-use.sse")
	tests := []struct {
		name, api, id string
		body          []byte
		thinking, sig string
		asked         func(body map[string]any) bool
	}{
		{"gemini", "google-vertex", "gemini-2.5-flash", geminiThinking, "Weighing the greeting.", "",
			func(body map[string]any) bool {
				tc, _ := body["generationConfig"].(map[string]any)["thinkingConfig"].(map[string]any)
				return tc["includeThoughts"] == true && tc["thinkingBudget"] == float64(8192)
			}},
		{"claude", "anthropic-vertex", "claude-sonnet-4-5@20250929", anth,
			"The user is asking for weather information for Florence, Italy.", "EtYDCkYICxgCKkAVHEWRYo6RgSMs4ZZDX4gW16kd",
			func(body map[string]any) bool {
				th, _ := body["thinking"].(map[string]any)
				return th["type"] == "enabled" && th["budget_tokens"] == float64(8192)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{})
			b.setAnswer(func(w http.ResponseWriter, c call) { sseReply(w, tt.body) })
			msg, _, err := b.stream(t, &provider.Request{Model: model(b.vs.URL, tt.api, tt.id), Messages: []message.Message{message.User("hi", 1)}, Thinking: provider.ThinkingMedium})
			if err != nil {
				t.Fatal(err)
			}
			c := b.lastCall(t)
			if !tt.asked(c.body) {
				t.Errorf("thinking not asked for: %v", c.body)
			}
			if tt.name == "claude" && c.header.Get("Anthropic-Beta") != "interleaved-thinking-2025-05-14" {
				t.Errorf("anthropic-beta %q", c.header.Get("Anthropic-Beta"))
			}
			_, thinking := textOf(msg)
			var sig string
			for _, bl := range msg.Content.Blocks {
				if bl.Type == message.BlockThinking {
					sig = bl.ThinkingSignature
				}
				if bl.Type == message.BlockText && bl.TextSignature != "" {
					sig = "text:" + bl.TextSignature
				}
			}
			if !strings.HasPrefix(thinking, tt.thinking) {
				t.Errorf("thinking %q", thinking)
			}
			if tt.sig != "" && !strings.HasPrefix(sig, tt.sig) || tt.sig == "" && sig != "text:c2lnbmVk" {
				t.Errorf("signature %q", sig)
			}
		})
	}
}

// TestImage: an image in the user's message goes to each family in its
// shape, base64 as given.
func TestImage(t *testing.T) {
	t.Parallel()
	const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
	for _, tt := range []struct{ name, api, id, want string }{
		{"gemini", "google-vertex", "gemini-2.5-flash", `"inlineData":{"data":"` + png + `","mimeType":"image/png"}`},
		{"claude", "anthropic-vertex", "claude-sonnet-4-5@20250929", `"source":{"data":"` + png + `","media_type":"image/png","type":"base64"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{})
			body := geminiText
			if tt.name == "claude" {
				body = claudeText
			}
			b.setAnswer(func(w http.ResponseWriter, c call) { sseReply(w, body) })
			user := message.Message{Role: message.RoleUser, Timestamp: 1, Content: message.Content{Blocks: []message.Block{message.Text("What is this?"), message.Image("image/png", png)}}}
			if _, _, err := b.stream(t, &provider.Request{Model: model(b.vs.URL, tt.api, tt.id), Messages: []message.Message{user}}); err != nil {
				t.Fatal(err)
			}
			if got := compact(b.lastCall(t).body); !strings.Contains(got, tt.want) {
				t.Errorf("request %s\nhas no %s", got, tt.want)
			}
		})
	}
}

// TestErrorBodies plays testdata/cases.json, Vertex AI's error bodies of
// both families (the wire set's format), through the adapter: each ends
// the call as its class with the provider's message.
func TestErrorBodies(t *testing.T) {
	t.Parallel()
	for _, c := range wiretest.Cases(t, "google-vertex", "anthropic-vertex") {
		t.Run(c.File, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{})
			body := wiretest.Body(t, c.File)
			b.setAnswer(func(w http.ResponseWriter, _ call) { wiretest.Reply(w, c.Status, c.Headers, body, 0) })
			msg, last, err := b.stream(t, &provider.Request{Model: model(b.vs.URL, c.API, *c.Model), Messages: []message.Message{message.User("hi", 1)}})
			var pe *provider.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v", err)
			}
			if string(pe.Reason) != *c.Expect.ErrorClass || pe.Status != c.Status || pe.Message != c.Expect.ErrorMessage {
				t.Errorf("got %s %d %q, want %s %d %q", pe.Reason, pe.Status, pe.Message, *c.Expect.ErrorClass, c.Status, c.Expect.ErrorMessage)
			}
			if msg.StopReason != message.StopError || last.Type != provider.EventError {
				t.Errorf("stop %s, last event %s", msg.StopReason, last.Type)
			}
		})
	}
}

// TestContextOverflow: each family's overflow answer is context_overflow
// (compact, do not retry).
func TestContextOverflow(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ api, id, file string }{
		{"google-vertex", "gemini-2.5-flash", "google-vertex-400-token-count.json"},
		{"anthropic-vertex", "claude-sonnet-4-5@20250929", "anthropic-vertex-400-prompt-too-long.json"},
	} {
		t.Run(tt.api, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{})
			body := wiretest.Body(t, tt.file)
			b.setAnswer(func(w http.ResponseWriter, _ call) {
				wiretest.Reply(w, 400, map[string]string{"Content-Type": "application/json"}, body, 0)
			})
			_, _, err := b.stream(t, &provider.Request{Model: model(b.vs.URL, tt.api, tt.id), Messages: []message.Message{message.User(strings.Repeat("long ", 100), 1)}})
			if provider.ReasonOf(err) != provider.ReasonContextOverflow {
				t.Errorf("reason %s (%v)", provider.ReasonOf(err), err)
			}
		})
	}
}

// TestEndpoint: without a base URL of its own a model goes to its
// location's endpoint, global to the global one; the path names the
// project and location either way.
func TestEndpoint(t *testing.T) {
	t.Parallel()
	for loc, want := range map[string]string{"us-east5": "https://us-east5-aiplatform.googleapis.com", "global": "https://aiplatform.googleapis.com", "europe-west4": "https://europe-west4-aiplatform.googleapis.com"} {
		if got := vertex.Endpoint(loc); got != want {
			t.Errorf("Endpoint(%s) = %s, want %s", loc, got, want)
		}
	}
}

// TestCredentialErrors: a key the token endpoint refuses, a key that is
// no credential, no project and a hostile location each fail the call
// before it is sent, classified and without the key's content.
func TestCredentialErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	other := setup(t, setupOpts{})
	// Signed with a key the token server does not hold for the account.
	forged := strings.Replace(serviceAccount(t, other.ts, "sa-a", "proj-a", keys()[1]), other.ts.tokenURL(), b.ts.tokenURL(), 1)
	noProject := serviceAccount(t, b.ts, "sa-np", "", keys()[2])
	tests := []struct {
		name   string
		key    string
		env    map[string]string
		reason provider.Reason
		text   string
	}{
		{"refused signature", forged, nil, provider.ReasonAuthPermanent, "invalid_grant: Invalid JWT Signature."},
		{"not a credential", `{"type":"bogus"}`, nil, provider.ReasonAuthPermanent, `credential type "bogus"`},
		{"missing file", "/nonexistent/key.json", nil, provider.ReasonAuthPermanent, "no such file"},
		{"no project", noProject, nil, provider.ReasonAuthPermanent, "set GOOGLE_CLOUD_PROJECT"},
		{"hostile location", b.key, map[string]string{"GOOGLE_CLOUD_LOCATION": "evil.example/x"}, provider.ReasonFormat, "not a Google Cloud location"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"GOOGLE_CLOUD_LOCATION": "us-east5"}
			for k, v := range tt.env {
				env[k] = v
			}
			a := vertex.New(vertex.Config{Env: func(k string) string { return env[k] }})
			t.Cleanup(a.Close)
			_, err := a.Stream(t.Context(), &provider.Request{Model: model(b.vs.URL, "google-vertex", "gemini-2.5-flash"),
				Messages: []message.Message{message.User("hi", 1)}, APIKey: provider.Secret(tt.key)}, nil)
			var pe *provider.Error
			if !errors.As(err, &pe) || pe.Reason != tt.reason || !strings.Contains(pe.Message, tt.text) {
				t.Fatalf("error %v, want %s containing %q", err, tt.reason, tt.text)
			}
			if strings.Contains(pe.Message, "PRIVATE KEY") {
				t.Errorf("the key leaked into %q", pe.Message)
			}
		})
	}
	if n := b.vs.requests.Load(); n != 0 {
		t.Errorf("%d calls reached Vertex AI", n)
	}
}
