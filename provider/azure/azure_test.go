package azure_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/provider/azure"
	"github.com/lanefleet/lanefleet/provider/catalog"
	"github.com/lanefleet/lanefleet/provider/failover"
)

// seen is one request the fake Azure resource received.
type seen struct {
	path, query string
	header      http.Header
	body        map[string]any
}

// resource is a local server speaking Azure OpenAI's wire protocol: it
// records each request and answers with a fixture (an SSE stream for a
// 200, a JSON error body otherwise) and the given headers.
type resource struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []seen
}

func newResource(t *testing.T, status int, fixture string, header map[string]string) *resource {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", fixture))
	if err != nil {
		t.Fatal(err)
	}
	r := &resource{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		r.mu.Lock()
		r.reqs = append(r.reqs, seen{path: req.URL.Path, query: req.URL.RawQuery, header: req.Header.Clone(), body: body})
		r.mu.Unlock()
		for k, v := range header {
			w.Header().Set(k, v)
		}
		if status == http.StatusOK {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = w.Write(data)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *resource) last(t *testing.T) seen {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reqs) == 0 {
		t.Fatal("the resource got no request")
	}
	return r.reqs[len(r.reqs)-1]
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// model is the catalog's azure/gpt-5-mini at base.
func model(t *testing.T, base, api string) provider.Model {
	t.Helper()
	m, ok := catalog.Builtin().Lookup("azure/gpt-5-mini")
	if !ok {
		t.Fatal("azure/gpt-5-mini is not in the catalog")
	}
	m.BaseURL, m.API = base, api
	return m
}

func request(m provider.Model, key string) *provider.Request {
	return &provider.Request{Model: m, SystemPrompt: "be brief", Messages: []message.Message{message.User("hi", 1)}, APIKey: provider.Secret(key)}
}

// TestDeploymentURLWithAPIKey: a resource's endpoint and a key send Chat
// Completions to the deployment's URL with the api-version and the key in
// api-key (no bearer), with OpenAI's parameters for a reasoning model; the
// stream, with Azure's prompt_filter_results chunk and per-choice
// content_filter_results, reads as the text, and the final usage (cached
// tokens apart) prices the reply.
func TestDeploymentURLWithAPIKey(t *testing.T) {
	t.Parallel()
	srv := newResource(t, 200, "azure-chat-text.sse", nil)
	a := azure.New(azure.Config{Env: envOf(nil)})
	msg, err := a.Stream(t.Context(), request(model(t, srv.URL+"/", catalog.APIAzureCompletions), "0123456789abcdef0123456789abcdef"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Content.Text(); got != "Hello! How can Ihelp you today?" {
		t.Errorf("text %q", got)
	}
	r := srv.last(t)
	if r.path != "/openai/deployments/gpt-5-mini/chat/completions" || r.query != "api-version="+azure.DefaultAPIVersion {
		t.Errorf("call %s?%s", r.path, r.query)
	}
	if r.header.Get("api-key") != "0123456789abcdef0123456789abcdef" || r.header.Get("Authorization") != "" {
		t.Errorf("auth headers api-key=%q authorization=%q", r.header.Get("api-key"), r.header.Get("Authorization"))
	}
	if _, ok := r.body["max_completion_tokens"]; !ok {
		t.Errorf("body has no max_completion_tokens: %v", r.body)
	}
	if _, ok := r.body["store"]; ok {
		t.Errorf("body sends store to Azure: %v", r.body)
	}
	if so, _ := r.body["stream_options"].(map[string]any); so["include_usage"] != true {
		t.Errorf("stream_options %v", r.body["stream_options"])
	}
	if ms, _ := r.body["messages"].([]any); len(ms) == 0 || ms[0].(map[string]any)["role"] != "developer" {
		t.Errorf("system prompt of a reasoning model not a developer message: %v", r.body["messages"])
	}
	u := msg.Usage
	if u == nil || u.Input != 176 || u.CacheRead != 1024 || u.Output != 9 {
		t.Fatalf("usage %+v", u)
	}
	// gpt-5-mini: $0.25/M input, $0.025/M cached, $2/M output.
	if want := (176*0.25 + 1024*0.025 + 9*2) / 1e6; abs(u.Cost.Total-want) > 1e-12 {
		t.Errorf("cost %+v, want total %g", u.Cost, want)
	}
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// TestAPIVersionFromEnv: AZURE_OPENAI_API_VERSION replaces the default,
// and a {resource} base URL takes AZURE_OPENAI_RESOURCE's name.
func TestAPIVersionFromEnv(t *testing.T) {
	t.Parallel()
	base, dep, path, ver := "https://{resource}.openai.azure.com", "my-gpt", "chat/completions", "2024-10-21"
	b, p, err := azure.Endpoint(strings.ReplaceAll(base, "{resource}", "contoso"), dep, path, ver)
	if err != nil || b != "https://contoso.openai.azure.com/openai/deployments/my-gpt" || p != "chat/completions?api-version=2024-10-21" {
		t.Errorf("Endpoint = %q %q %v", b, p, err)
	}
	srv := newResource(t, 200, "azure-chat-text.sse", nil)
	a := azure.New(azure.Config{Env: envOf(map[string]string{"AZURE_OPENAI_API_VERSION": ver})})
	if _, err := a.Stream(t.Context(), request(model(t, srv.URL, catalog.APIAzureCompletions), "k"), nil); err != nil {
		t.Fatal(err)
	}
	if r := srv.last(t); r.query != "api-version="+ver {
		t.Errorf("query %q", r.query)
	}
	_, err = a.Stream(t.Context(), request(model(t, "https://{resource}.openai.azure.com", catalog.APIAzureCompletions), "k"), nil)
	if pe := (*provider.Error)(nil); !errors.As(err, &pe) || !strings.Contains(pe.Message, "AZURE_OPENAI_ENDPOINT") {
		t.Errorf("unset resource: %v", err)
	}
}

// TestEndpoint: the URL of each kind of base.
func TestEndpoint(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		base, path, wantBase, wantPath string
	}{
		{"https://r.openai.azure.com", "chat/completions", "https://r.openai.azure.com/openai/deployments/d", "chat/completions?api-version=v"},
		{"https://r.openai.azure.com/openai/", "chat/completions", "https://r.openai.azure.com/openai/deployments/d", "chat/completions?api-version=v"},
		{"https://r.openai.azure.com", "responses", "https://r.openai.azure.com/openai", "responses?api-version=v"},
		{"https://r.openai.azure.com/openai/v1/", "responses", "https://r.openai.azure.com/openai/v1", "responses"},
		{"https://r.services.ai.azure.com/openai/v1", "chat/completions", "https://r.services.ai.azure.com/openai/v1", "chat/completions"},
		{"https://proxy.example/openai/deployments/other?x=1", "chat/completions", "https://proxy.example/openai/deployments/other", "chat/completions?api-version=v"},
	} {
		b, p, err := azure.Endpoint(tc.base, "d", tc.path, "v")
		if err != nil || b != tc.wantBase || p != tc.wantPath {
			t.Errorf("Endpoint(%q, %q) = %q %q %v, want %q %q", tc.base, tc.path, b, p, err, tc.wantBase, tc.wantPath)
		}
	}
	for _, dep := range []string{"", "a/b", "../x", "a?b", strings.Repeat("x", 65)} {
		if _, _, err := azure.Endpoint("https://r.openai.azure.com", dep, "chat/completions", "v"); err == nil {
			t.Errorf("deployment %q accepted", dep)
		}
	}
	if _, _, err := azure.Endpoint("ftp://r", "d", "chat/completions", "v"); err == nil {
		t.Error("ftp base accepted")
	}
}

// jwt is a token shaped like an Entra ID access token.
const jwt = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJodHRwczovL2NvZ25pdGl2ZXNlcnZpY2VzLmF6dXJlLmNvbSJ9.c2ln"

// TestV1ResponsesWithBearer: a base ending in /openai/v1 is the v1 API:
// the Responses call goes under it without api-version, names the
// deployment in the body, and an Entra ID token (a JWT) goes as a bearer.
func TestV1ResponsesWithBearer(t *testing.T) {
	t.Parallel()
	srv := newResource(t, 200, "azure-responses-text.sse", nil)
	a := azure.New(azure.Config{Env: envOf(nil)})
	msg, err := a.Stream(t.Context(), request(model(t, srv.URL+"/openai/v1", catalog.APIAzureResponses), jwt), nil)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Content.Text() != "Test response with cached tokens." {
		t.Errorf("text %q", msg.Content.Text())
	}
	r := srv.last(t)
	if r.path != "/openai/v1/responses" || r.query != "" || r.body["model"] != "gpt-5-mini" {
		t.Errorf("call %s?%s model %v", r.path, r.query, r.body["model"])
	}
	if r.header.Get("Authorization") != "Bearer "+jwt || r.header.Get("api-key") != "" {
		t.Errorf("auth headers %q %q", r.header.Get("Authorization"), r.header.Get("api-key"))
	}
	if msg.Usage == nil || msg.Usage.CacheRead != 15744 {
		t.Errorf("usage %+v", msg.Usage)
	}
}

// entra is a local Entra ID token endpoint for tenant "t1" that issues
// tokens living an hour and counts its fetches.
type entra struct {
	*httptest.Server
	fetches atomic.Int32
	form    atomic.Value // url.Values of the last fetch
}

func newEntra(t *testing.T, status int) *entra {
	t.Helper()
	e := &entra{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/t1/oauth2/v2.0/token" || r.ParseForm() != nil {
			http.NotFound(w, r)
			return
		}
		e.form.Store(r.PostForm)
		n := e.fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if status != 200 {
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided."}`))
			return
		}
		_, _ = w.Write([]byte(`{"token_type":"Bearer","expires_in":3599,"ext_expires_in":3599,"access_token":"entra-token-` + string(rune('0'+n)) + `"}`))
	}))
	t.Cleanup(e.Close)
	return e
}

// TestEntraClientCredentials: with no key, a service principal's client
// credentials get a token from Entra ID (client_credentials grant, the
// Cognitive Services scope) once, shared by concurrent calls, and sent
// as a bearer.
func TestEntraClientCredentials(t *testing.T) {
	t.Parallel()
	srv := newResource(t, 200, "azure-chat-text.sse", nil)
	idp := newEntra(t, 200)
	a := azure.New(azure.Config{Env: envOf(map[string]string{"AZURE_TENANT_ID": "t1", "AZURE_CLIENT_ID": "app-1", "AZURE_CLIENT_SECRET": "s3cret", "AZURE_AUTHORITY_HOST": idp.URL})})
	t.Cleanup(a.Close)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			_, err := a.Stream(t.Context(), request(model(t, srv.URL, catalog.APIAzureCompletions), ""), nil)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := idp.fetches.Load(); n != 1 {
		t.Errorf("%d token fetches for 8 concurrent calls, want 1", n)
	}
	f := idp.form.Load().(url.Values)
	if f.Get("grant_type") != "client_credentials" || f.Get("client_id") != "app-1" || f.Get("client_secret") != "s3cret" || f.Get("scope") != azure.Scope {
		t.Errorf("token request %v", f)
	}
	if got := srv.last(t).header.Get("Authorization"); got != "Bearer entra-token-1" {
		t.Errorf("authorization %q", got)
	}
}

// TestEntraRefused: a client secret Entra ID refuses fails the call as
// auth_permanent, naming Entra's error without its body; no credentials
// at all is an auth error saying what to set.
func TestEntraRefused(t *testing.T) {
	t.Parallel()
	srv := newResource(t, 200, "azure-chat-text.sse", nil)
	idp := newEntra(t, 401)
	a := azure.New(azure.Config{Env: envOf(map[string]string{"AZURE_TENANT_ID": "t1", "AZURE_CLIENT_ID": "app-1", "AZURE_CLIENT_SECRET": "bad", "AZURE_AUTHORITY_HOST": idp.URL})})
	t.Cleanup(a.Close)
	_, err := a.Stream(t.Context(), request(model(t, srv.URL, catalog.APIAzureCompletions), ""), nil)
	if pe := (*provider.Error)(nil); !errors.As(err, &pe) || pe.Reason != provider.ReasonAuthPermanent || !strings.Contains(pe.Message, "invalid_client") || strings.Contains(pe.Message, "bad") {
		t.Errorf("refused secret: %v", err)
	}
	_, err = azure.New(azure.Config{}).Stream(t.Context(), request(model(t, srv.URL, catalog.APIAzureCompletions), ""), nil)
	if pe := (*provider.Error)(nil); !errors.As(err, &pe) || pe.Reason != provider.ReasonAuth || !strings.Contains(pe.Message, "AZURE_OPENAI_API_KEY") {
		t.Errorf("no credentials: %v", err)
	}
}

// TestToolCall: a streamed tool call comes back whole, and the tool's
// result goes back in the next request as a tool message.
func TestToolCall(t *testing.T) {
	t.Parallel()
	srv := newResource(t, 200, "azure-chat-tool-call.sse", nil)
	a := azure.New(azure.Config{})
	req := request(model(t, srv.URL, catalog.APIAzureCompletions), "k")
	req.Tools = []provider.Tool{{Name: "get_weather", Description: "weather", Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}
	msg, err := a.Stream(t.Context(), req, nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := msg.ToolCalls()
	if msg.StopReason != message.StopToolUse || len(calls) != 1 || calls[0].ID != "call_8mYBsvHzSFMRvP4Yp3NaRzX1" || calls[0].Arguments["city"] != "Paris" {
		t.Fatalf("stop %s calls %+v", msg.StopReason, calls)
	}
	next := *req
	next.Messages = append(append([]message.Message{}, req.Messages...), msg, message.Message{Role: message.RoleToolResult, ToolCallID: calls[0].ID, ToolName: "get_weather", Content: message.BlocksOf(message.Text("sunny"))})
	if _, err := a.Stream(t.Context(), &next, nil); err != nil {
		t.Fatal(err)
	}
	ms, _ := srv.last(t).body["messages"].([]any)
	last, _ := ms[len(ms)-1].(map[string]any)
	if last["role"] != "tool" || last["tool_call_id"] != "call_8mYBsvHzSFMRvP4Yp3NaRzX1" {
		t.Errorf("tool result sent as %v", last)
	}
}

// TestErrors: Azure's error bodies end the call classified: its content
// filter's refusal of the prompt (HTTP 400) and of the reply (finish
// reason content_filter) as clear errors naming the categories, neither
// failed over nor retried (reason unknown); a context overflow as one;
// a throttle as a rate limit with the delay its retry-after asks for; a
// bad key as auth; a missing deployment as model_not_found.
func TestErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status  int
		fixture string
		header  map[string]string
		reason  provider.Reason
		message string
		retry   time.Duration
	}{
		{400, "azure-400-content-filter.json", nil, provider.ReasonUnknown, "Azure's content filter blocked the prompt (hate: high, violence: medium)", 0},
		{200, "azure-chat-content-filter.sse", nil, provider.ReasonUnknown, "stopped by the provider's content filter (violence: medium)", 0},
		{400, "azure-400-context-length.json", nil, provider.ReasonContextOverflow, "maximum context length", 0},
		{429, "azure-429-rate-limit.json", map[string]string{"retry-after": "6", "retry-after-ms": "6000", "x-ratelimit-remaining-requests": "0", "x-ratelimit-remaining-tokens": "0"}, provider.ReasonRateLimit, "exceeded token rate limit", 6 * time.Second},
		{429, "azure-429-rate-limit.json", nil, provider.ReasonRateLimit, "Please retry after 6 seconds", 6 * time.Second},
		{401, "azure-401-invalid-key.json", nil, provider.ReasonAuth, "invalid subscription key", 0},
		{404, "azure-404-deployment-not-found.json", nil, provider.ReasonModelNotFound, "deployment for this resource does not exist", 0},
	} {
		srv := newResource(t, tc.status, tc.fixture, tc.header)
		_, err := azure.New(azure.Config{}).Stream(t.Context(), request(model(t, srv.URL, catalog.APIAzureCompletions), "k"), nil)
		var pe *provider.Error
		if !errors.As(err, &pe) || pe.Reason != tc.reason || !strings.Contains(pe.Message, tc.message) || pe.RetryAfter != tc.retry {
			t.Errorf("%s: %v (retry after %v), want %s %q after %v", tc.fixture, err, retryOf(pe), tc.reason, tc.message, tc.retry)
			continue
		}
		if tc.reason == provider.ReasonUnknown && failover.IsRetryable(err, pe.Message) {
			t.Errorf("%s: a content filter's refusal is retried", tc.fixture)
		}
	}
}

func retryOf(pe *provider.Error) time.Duration {
	if pe == nil {
		return 0
	}
	return pe.RetryAfter
}

// TestRateHeaders: Azure's rate-limit headers on a throttled response
// are what the fleet's view of the key's room reads (failover.RateHeaders,
// which lowers the shared limits until the provider's reset).
func TestRateHeaders(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("x-ratelimit-remaining-requests", "0")
	h.Set("x-ratelimit-remaining-tokens", "1200")
	h.Set("retry-after-ms", "6000")
	room, ok := failover.RateHeaders(429, h.Get, time.Now())
	if !ok || room.Requests != 0 || room.Tokens != 0 || room.Reset != 6*time.Second {
		t.Errorf("room %+v %v", room, ok)
	}
	h.Del("retry-after-ms")
	room, ok = failover.RateHeaders(200, h.Get, time.Now())
	if !ok || room.Requests != 0 || room.Tokens != 1200 {
		t.Errorf("room of a 200 %+v %v", room, ok)
	}
}

// TestIsBearer: an Entra ID token is a JWT; API keys are not.
func TestIsBearer(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]bool{jwt: true, "0123456789abcdef0123456789abcdef": false, "": false, "eyJonly.one": false} {
		if azure.IsBearer(key) != want {
			t.Errorf("IsBearer(%q) = %v", key, !want)
		}
	}
}

// TestImageAndThinking: an image goes to a deployment of a model that
// takes images as a data URL, and a thinking level as reasoning_effort.
func TestImageAndThinking(t *testing.T) {
	t.Parallel()
	srv := newResource(t, 200, "azure-chat-text.sse", nil)
	req := request(model(t, srv.URL, catalog.APIAzureCompletions), "k")
	req.Thinking = provider.ThinkingHigh
	req.Messages = []message.Message{{Role: message.RoleUser, Timestamp: 1, Content: message.BlocksOf(message.Text("what is this?"), message.Image("image/png", "iVBORw0KGgo="))}}
	if _, err := azure.New(azure.Config{}).Stream(t.Context(), req, nil); err != nil {
		t.Fatal(err)
	}
	body := srv.last(t).body
	if body["reasoning_effort"] != "high" {
		t.Errorf("reasoning_effort %v", body["reasoning_effort"])
	}
	b, _ := json.Marshal(body["messages"])
	if !strings.Contains(string(b), `"url":"data:image/png;base64,iVBORw0KGgo="`) {
		t.Errorf("no image in %s", b)
	}
}
