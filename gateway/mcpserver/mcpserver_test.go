package mcpserver_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/gateway"
	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/gateway/mcpserver"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Main() // the in-process member's exec would re-run this binary
	os.Exit(m.Run())
}

// tokens are the gateway's tokens in these tests: two tenants, a viewer,
// a token that reaches no session, and an admin.
var tokens = []gateway.TokenEntry{
	{Name: "acme", Role: auth.Sender, Prefixes: []string{"acme:"}},
	{Name: "globex", Role: auth.Sender, Prefixes: []string{"globex:"}},
	{Name: "acme-viewer", Role: auth.Viewer, Prefixes: []string{"acme:"}},
	{Name: "nobody", Role: auth.Sender},
	{Name: "root", Role: auth.Admin, Prefixes: []string{""}},
}

// bundle is a fleet (an embedded nats-server and one in-process worker
// with the scripted models), a client of it, and two gateways in front of
// it, as two replicas behind a balancer would be.
type bundle struct {
	client *lanefleet.Client
	urls   [2]string         // the gateways' /mcp
	tokens map[string]string // token by name
	ctx    context.Context
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ns := natstest.Start(t)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	m, err := fleet.Start(t.Context(), fleet.Config{NATSURL: ns.URL, Scripted: true, AckWait: 5 * time.Second, LeaseTTL: 30 * time.Second,
		IdleRelease: -1, Logger: log, DefaultModel: "scripted/echo"})
	if err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.Run(mctx); err != nil {
			t.Errorf("member: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	c, err := lanefleet.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	b := &bundle{client: c, tokens: map[string]string{}}
	var file struct {
		Tokens []gateway.TokenEntry `json:"tokens"`
	}
	for _, e := range tokens {
		tok, hash := gateway.NewToken()
		b.tokens[e.Name], e.Hash = tok, hash
		file.Tokens = append(file.Tokens, e)
	}
	raw, _ := json.Marshal(file)
	for i := range b.urls {
		tf, err := gateway.ParseTokens(strings.NewReader(string(raw)))
		if err != nil {
			t.Fatal(err)
		}
		srv, err := gateway.New(gateway.Config{Client: c, Tokens: tf, Logger: &log})
		if err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewUnstartedServer(srv)
		ts.Config = srv.HTTPServer()
		ts.Start()
		t.Cleanup(ts.Close)
		t.Cleanup(srv.Close)
		b.urls[i] = ts.URL + "/mcp"
	}
	ctx, cancelCtx := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancelCtx)
	b.ctx = ctx
	return b
}

// bearer adds a token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// caller is an MCP client session of the official SDK, and the progress
// notifications it received.
type caller struct {
	*mcp.ClientSession
	mu       sync.Mutex
	progress []string
	got      chan struct{} // a notification came
}

// connect connects the SDK's client to gateway i as token name.
func (b *bundle) connect(t *testing.T, name string, i int) (*caller, error) {
	t.Helper()
	c := &caller{got: make(chan struct{}, 1)}
	cl := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			c.mu.Lock()
			c.progress = append(c.progress, r.Params.Message)
			c.mu.Unlock()
			select {
			case c.got <- struct{}{}:
			default:
			}
		},
	})
	cs, err := cl.Connect(b.ctx, &mcp.StreamableClientTransport{Endpoint: b.urls[i], HTTPClient: &http.Client{Transport: bearer{b.tokens[name]}}, MaxRetries: -1}, nil)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = cs.Close() })
	c.ClientSession = cs
	return c, nil
}

func (b *bundle) mustConnect(t *testing.T, name string) *caller {
	t.Helper()
	c, err := b.connect(t, name, 0)
	if err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	return c
}

// call calls tool with args and decodes its structured result into out
// (when not nil); it returns the result's text and whether it is an error.
func (c *caller) call(t *testing.T, ctx context.Context, tool string, args map[string]any, out any, progress bool) (string, bool) {
	t.Helper()
	p := &mcp.CallToolParams{Name: tool, Arguments: args}
	if progress {
		p.SetProgressToken("p-1")
	}
	res, err := c.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var sb strings.Builder
	for _, ct := range res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			sb.WriteString(tc.Text)
		}
	}
	if out != nil && !res.IsError {
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", tool, raw, err)
		}
	}
	return sb.String(), res.IsError
}

// streamed waits until the progress notifications' texts add up to want.
func (c *caller) streamed(t *testing.T, ctx context.Context, want string) {
	t.Helper()
	for {
		c.mu.Lock()
		got := strings.Join(c.progress, "")
		c.mu.Unlock()
		if got == want {
			return
		}
		select {
		case <-c.got:
		case <-ctx.Done():
			t.Fatalf("progress notifications: %q, want them to add up to %q", got, want)
		}
	}
}

// TestSendAndReply: send_message over a gateway's /mcp runs a turn and
// answers the reply, which also streamed as progress notifications; the
// turn is in read_history, and the session in list_sessions.
func TestSendAndReply(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.mustConnect(t, "acme")
	var res mcpserver.RunResult
	text, isErr := c.call(t, b.ctx, mcpserver.ToolSend, map[string]any{"session": "acme:1", "text": "hello there"}, &res, true)
	if isErr || text != "echo: hello there" || res.Status != mcpserver.StatusDone || res.Reply != text || res.Session != "acme:1" || res.RunID == "" {
		t.Fatalf("send_message: %q (error %v), %+v", text, isErr, res)
	}
	c.streamed(t, b.ctx, "echo: hello there")

	var page mcpserver.HistoryPage
	if _, isErr := c.call(t, b.ctx, mcpserver.ToolHistory, map[string]any{"session": "acme:1"}, &page, false); isErr {
		t.Fatal("read_history failed")
	}
	var got []string
	for _, m := range page.Messages {
		got = append(got, m.Role+": "+m.Text)
	}
	if want := []string{"user: hello there", "assistant: echo: hello there"}; !slices.Equal(got, want) || page.Total != 2 || page.Next != nil {
		t.Fatalf("history: %q (total %d, next %v), want %q", got, page.Total, page.Next, want)
	}
	// A page of one: the newest, and where the older ones are.
	if _, isErr := c.call(t, b.ctx, mcpserver.ToolHistory, map[string]any{"session": "acme:1", "limit": 1}, &page, false); isErr ||
		len(page.Messages) != 1 || page.Messages[0].Index != 1 || page.Next == nil || *page.Next != 1 {
		t.Fatalf("history page of 1: %+v", page)
	}
	var older mcpserver.HistoryPage
	if _, isErr := c.call(t, b.ctx, mcpserver.ToolHistory, map[string]any{"session": "acme:1", "limit": 1, "before": 1}, &older, false); isErr ||
		len(older.Messages) != 1 || older.Messages[0].Text != "hello there" || older.Next != nil {
		t.Fatalf("history's older page: %+v", older)
	}

	// get_run answers the same run again, done.
	var again mcpserver.RunResult
	if text, isErr := c.call(t, b.ctx, mcpserver.ToolRun, map[string]any{"session": "acme:1", "runId": res.RunID}, &again, false); isErr ||
		again.Status != mcpserver.StatusDone || again.Reply != "echo: hello there" {
		t.Fatalf("get_run: %q %+v", text, again)
	}
}

// TestListSessions: list_sessions shows a caller the sessions its token
// reaches and no other, paged; the admin sees them all.
func TestListSessions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, key := range []string{"acme:a", "acme:b", "globex:secret"} {
		r, err := b.client.Send(b.ctx, key, "hi")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Wait(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	keys := func(name string, args map[string]any) ([]string, mcpserver.SessionsPage) {
		t.Helper()
		var page mcpserver.SessionsPage
		if text, isErr := b.mustConnect(t, name).call(t, b.ctx, mcpserver.ToolSessions, args, &page, false); isErr {
			t.Fatalf("%s: list_sessions: %s", name, text)
		}
		var ks []string
		for _, s := range page.Sessions {
			ks = append(ks, s.Key)
		}
		slices.Sort(ks)
		return ks, page
	}
	if got, _ := keys("acme", nil); !slices.Equal(got, []string{"acme:a", "acme:b"}) {
		t.Fatalf("acme sees %q", got)
	}
	if got, _ := keys("acme-viewer", map[string]any{"query": "B"}); !slices.Equal(got, []string{"acme:b"}) {
		t.Fatalf("acme-viewer searching B sees %q", got)
	}
	if got, _ := keys("nobody", nil); len(got) != 0 {
		t.Fatalf("a token that reaches no session sees %q", got)
	}
	if got, _ := keys("root", nil); !slices.Equal(got, []string{"acme:a", "acme:b", "globex:secret"}) {
		t.Fatalf("root sees %q", got)
	}
	// Two pages of one.
	first, page := keys("acme", map[string]any{"limit": 1})
	if len(first) != 1 || page.Next == "" || page.Total != -1 { // a tenant's sessions are not counted
		t.Fatalf("first page: %q %+v", first, page)
	}
	second, page := keys("acme", map[string]any{"limit": 1, "cursor": page.Next})
	if len(second) != 1 || second[0] == first[0] || page.Next != "" {
		t.Fatalf("second page: %q after %q, next %q", second, first, page.Next)
	}
}

// TestScopeRefused: a token's tools refuse another tenant's session with
// a tool error that says so, and the session is left as it was; a viewer
// is not offered send_message; a request without a token is refused.
func TestScopeRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const theirs = "globex:secret"
	r, err := b.client.Send(b.ctx, theirs, "private")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Wait(b.ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"acme", "acme-viewer", "nobody"} {
		c := b.mustConnect(t, name)
		for _, call := range []struct {
			tool string
			args map[string]any
		}{
			{mcpserver.ToolSend, map[string]any{"session": theirs, "text": "let me in"}},
			{mcpserver.ToolHistory, map[string]any{"session": theirs}},
			{mcpserver.ToolRun, map[string]any{"session": theirs, "runId": r.ID}},
		} {
			if name == "acme-viewer" && call.tool == mcpserver.ToolSend {
				continue // not offered: below
			}
			text, isErr := c.call(t, b.ctx, call.tool, call.args, nil, false)
			if !isErr || !strings.Contains(text, `session "globex:secret" is not one this caller may reach`) || strings.Contains(text, "private") {
				t.Fatalf("%s: %s on their session: %q (error %v)", name, call.tool, text, isErr)
			}
		}
	}
	h, err := b.client.History(b.ctx, theirs)
	if err != nil || len(h) != 2 {
		t.Fatalf("their history: %d entries, %v; want their own 2", len(h), err)
	}

	viewer := b.mustConnect(t, "acme-viewer")
	tools, err := viewer.ListTools(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	if want := []string{mcpserver.ToolRun, mcpserver.ToolSessions, mcpserver.ToolHistory}; !slices.Equal(names, want) {
		t.Fatalf("the viewer's tools: %q, want %q", names, want)
	}
	if _, err := viewer.CallTool(b.ctx, &mcp.CallToolParams{Name: mcpserver.ToolSend, Arguments: map[string]any{"session": "acme:1", "text": "hi"}}); err == nil ||
		!strings.Contains(err.Error(), `unknown tool "send_message"`) {
		t.Fatalf("the viewer called send_message: %v", err)
	}

	if _, err := b.connect(t, "", 0); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Fatalf("no token: %v", err)
	}
	b.tokens["forged"] = gateway.TokenPrefix + "forged"
	if _, err := b.connect(t, "forged", 0); err == nil || !strings.Contains(err.Error(), "Unauthorized") {
		t.Fatalf("an unknown token: %v", err)
	}
}

// TestBounds: arguments past the tools' bounds are refused before the
// fleet is asked.
func TestBounds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.mustConnect(t, "acme")
	cases := []struct {
		name string
		tool string
		args map[string]any
		want string
	}{
		{"empty text", mcpserver.ToolSend, map[string]any{"session": "acme:1", "text": ""}, "text"},
		{"text over the fleet's bound", mcpserver.ToolSend, map[string]any{"session": "acme:1", "text": strings.Repeat("é", mcpserver.MaxTextBytes/2+1)}, "text"},
		{"timeout past the most", mcpserver.ToolSend, map[string]any{"session": "acme:1", "text": "x", "timeoutSeconds": 601}, "timeoutSeconds"},
		{"history page past the most", mcpserver.ToolHistory, map[string]any{"session": "acme:1", "limit": mcpserver.HistoryMax + 1}, "limit"},
		{"a run id that is no number", mcpserver.ToolRun, map[string]any{"session": "acme:1", "runId": "1e3"}, "runId"},
		{"a key too long", mcpserver.ToolHistory, map[string]any{"session": "acme:" + strings.Repeat("k", 300)}, "session"},
		{"a cursor that is no listing's", mcpserver.ToolSessions, map[string]any{"cursor": "!!"}, "cursor"},
		{"an unknown argument's type", mcpserver.ToolSessions, map[string]any{"limit": "all"}, "limit"},
	}
	for _, tc := range cases {
		text, isErr := c.call(t, b.ctx, tc.tool, tc.args, nil, false)
		if !isErr || !strings.Contains(text, tc.want) {
			t.Errorf("%s: %.200q (error %v), want an error naming %q", tc.name, text, isErr, tc.want)
		}
	}
	if h, err := b.client.History(b.ctx, "acme:1"); err != nil || len(h) != 0 {
		t.Fatalf("a refused message reached the session: %d entries, %v", len(h), err)
	}
}

// TestStillRunning: a reply slower than timeoutSeconds answers "running"
// with the run's id, and get_run waits for it.
func TestStillRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c := b.mustConnect(t, "acme")
	slow := `#script {"replies":[{"text":"at last","chunks":1,"delayMs":3000}]}`
	var res mcpserver.RunResult
	text, isErr := c.call(t, b.ctx, mcpserver.ToolSend, map[string]any{"session": "acme:slow", "text": slow, "model": "scripted/script", "timeoutSeconds": 1}, &res, false)
	if isErr || res.Status != mcpserver.StatusRunning || res.RunID == "" || !strings.Contains(text, "get_run") {
		t.Fatalf("send_message: %q %+v", text, res)
	}
	var done mcpserver.RunResult
	if text, isErr := c.call(t, b.ctx, mcpserver.ToolRun, map[string]any{"session": "acme:slow", "runId": res.RunID, "waitSeconds": 60}, &done, false); isErr ||
		done.Status != mcpserver.StatusDone || done.Reply != "at last" {
		t.Fatalf("get_run: %q %+v", text, done)
	}
}

// TestStateless: the gateway issues no MCP session, so a client's
// requests may go to any replica: a tools/call posted to the second
// gateway with no initialize before it is answered, and a GET (a
// stateful server's stream) is 405.
func TestStateless(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, err := b.connect(t, "acme", 0)
	if err != nil {
		t.Fatal(err)
	}
	if id := c.ID(); id != "" {
		t.Fatalf("the gateway issued MCP session %q", id)
	}
	post := func(body string) (*http.Response, string) {
		req, err := http.NewRequestWithContext(b.ctx, "POST", b.urls[1], strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+b.tokens["acme"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp, string(raw)
	}
	resp, body := post(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"send_message","arguments":{"session":"acme:x","text":"any replica"}}}`)
	if resp.StatusCode != 200 || resp.Header.Get("Mcp-Session-Id") != "" || !strings.Contains(body, "echo: any replica") {
		t.Fatalf("tools/call on the second gateway: %d %q %s", resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), body)
	}
	// The first gateway's client reads what the second one's call wrote.
	var page mcpserver.HistoryPage
	if _, isErr := c.call(t, b.ctx, mcpserver.ToolHistory, map[string]any{"session": "acme:x"}, &page, false); isErr || page.Total != 2 {
		t.Fatalf("history through the first gateway: %+v", page)
	}
	req, _ := http.NewRequestWithContext(b.ctx, "GET", b.urls[0], nil)
	req.Header.Set("Authorization", "Bearer "+b.tokens["acme"])
	req.Header.Set("Accept", "text/event-stream")
	get, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	get.Body.Close()
	if get.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /mcp: %d", get.StatusCode)
	}
}
