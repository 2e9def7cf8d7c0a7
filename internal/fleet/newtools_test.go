package fleet

import (
	"context"
	"errors"
	"fmt"
	"github.com/lanefleet/lanefleet"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider/scripted"
)

// toolResults returns the texts of a session's tool results by call id.
func toolResults(t *testing.T, ctx context.Context, c *lanefleet.Client, session string) map[string]string {
	t.Helper()
	h, err := c.History(ctx, session)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range h {
		if m := e.Message; m != nil && m.Role == message.RoleToolResult {
			out[m.ToolCallID] = m.Content.Text()
		}
	}
	return out
}

// TestWebFetchOnAFleet: a member started with web_fetch serves a model's
// fetch of a real local page (its host allowed by name, as an operator's
// --web-allow would) and refuses the page's redirect to 127.0.0.1: the
// secret behind it is never requested. Without --web-fetch the tool is
// not offered.
func TestWebFetchOnAFleet(t *testing.T) {
	t.Parallel()
	reached := make(chan string, 4)
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<title>Docs</title><nav>menu</nav><h1>Install</h1><p>Run <code>make</code>.</p>")
	})
	mux.HandleFunc("/to-loopback", func(w http.ResponseWriter, r *http.Request) {
		_, port, _ := net.SplitHostPort(r.Host)
		http.Redirect(w, r, "http://127.0.0.1:"+port+"/secret", http.StatusFound)
	})
	mux.HandleFunc("/secret", func(w http.ResponseWriter, r *http.Request) { reached <- r.URL.Path })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	base := "http://localhost:" + u.Port()

	script := map[string]scripted.Script{"fetch": {Replies: []scripted.Reply{
		{ToolCalls: []scripted.ToolCall{{ID: "f1", Name: "web_fetch", Arguments: map[string]any{"url": base + "/page"}}}},
		{ToolCalls: []scripted.ToolCall{{ID: "f2", Name: "web_fetch", Arguments: map[string]any{"url": base + "/to-loopback"}}}},
		{Text: "fetched"},
	}}}
	_, c, ctx := runMember(t, Config{DataDir: t.TempDir(), DefaultModel: "scripted/fetch", Scripts: script,
		NoBuiltinTools: true, WebFetch: true, WebAllow: []string{"localhost"}})
	v := watch(t, ctx, c, "web", "read the docs")
	if v.runErr != nil || len(v.result.Payloads) == 0 || v.result.Payloads[0].Text != "fetched" {
		t.Fatalf("%+v, %v", v.result, v.runErr)
	}
	res := toolResults(t, ctx, c, "web")
	if got := res["f1"]; !strings.Contains(got, "Title: Docs") || !strings.Contains(got, "# Install\n\nRun `make`.") || strings.Contains(got, "menu") {
		t.Errorf("the page: %q", got)
	}
	if got := res["f2"]; !strings.Contains(got, "redirect refused") || !strings.Contains(got, "127.0.0.1 is a loopback address") {
		t.Errorf("the redirect: %q", got)
	}
	select {
	case p := <-reached:
		t.Fatalf("the redirect reached %s", p)
	default:
	}

	// Off by default: the same script's call finds no such tool.
	_, c2, ctx2 := runMember(t, Config{DataDir: t.TempDir(), DefaultModel: "scripted/fetch", Scripts: script, NoBuiltinTools: true})
	watch(t, ctx2, c2, "web", "read the docs")
	if got := toolResults(t, ctx2, c2, "web")["f1"]; strings.Contains(got, "Install") {
		t.Errorf("web_fetch ran without --web-fetch: %q", got)
	}
}

// TestApplyPatchOnAFleet: a model's apply_patch calls change the session's
// real workspace — add, then update with a move and a delete — and a call
// whose hunk does not match changes nothing and tells the model which
// hunk.
func TestApplyPatchOnAFleet(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	patches := []string{
		"*** Begin Patch\n*** Add File: notes.md\n+# Notes\n*** Add File: src/main.go\n+package main\n+\n+func main() {\n+\tprintln(\"hi\")\n+}\n*** End Patch",
		"*** Begin Patch\n*** Update File: src/main.go\n*** Move to: cmd/app/main.go\n@@ func main() {\n-\tprintln(\"hi\")\n+\tprintln(\"hello\")\n*** Delete File: notes.md\n*** End Patch",
		"*** Begin Patch\n*** Add File: never.txt\n+x\n*** Update File: cmd/app/main.go\n@@\n-\tprintln(\"bye\")\n+\tprintln(\"x\")\n*** End Patch",
	}
	var replies []scripted.Reply
	for i, p := range patches {
		replies = append(replies, scripted.Reply{ToolCalls: []scripted.ToolCall{{ID: fmt.Sprintf("p%d", i+1), Name: "apply_patch", Arguments: map[string]any{"input": p}}}})
	}
	replies = append(replies, scripted.Reply{Text: "patched"})
	_, c, ctx := runMember(t, Config{DataDir: t.TempDir(), WorkspaceRoot: root, DefaultModel: "scripted/patch",
		Scripts: map[string]scripted.Script{"patch": {Replies: replies}}})
	v := watch(t, ctx, c, "coder", "patch it")
	if v.runErr != nil || len(v.result.Payloads) == 0 || v.result.Payloads[0].Text != "patched" {
		t.Fatalf("%+v, %v", v.result, v.runErr)
	}
	res := toolResults(t, ctx, c, "coder")
	if res["p1"] != "Success. Updated the following files:\nA notes.md\nA src/main.go" ||
		res["p2"] != "Success. Updated the following files:\nM cmd/app/main.go\nD notes.md" {
		t.Errorf("results: %q", res)
	}
	if !strings.Contains(res["p3"], "hunk 1 (patch line 5)") || !strings.Contains(res["p3"], "nothing was changed") {
		t.Errorf("the failed patch: %q", res["p3"])
	}
	ws := filepath.Join(root, "coder")
	got, err := os.ReadFile(filepath.Join(ws, "cmd/app/main.go"))
	if err != nil || string(got) != "package main\n\nfunc main() {\n\tprintln(\"hello\")\n}\n" {
		t.Errorf("cmd/app/main.go: %q, %v", got, err)
	}
	for _, gone := range []string{"notes.md", "src/main.go", "never.txt"} {
		if _, err := os.Stat(filepath.Join(ws, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want gone", gone, err)
		}
	}
}

// TestWebSearchOnAFleet: a member started with --web-search brave asks a
// Brave-shaped API with the key from its environment and hands the model
// title, URL and snippet.
func TestWebSearchOnAFleet(t *testing.T) {
	t.Parallel()
	const key = "BSA-fleet-test-key-0123456789"
	tokens := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tokens <- r.Header.Get("X-Subscription-Token") + " " + r.URL.Query().Get("q")
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"type":"search","query":{"original":"lanefleet"},"web":{"type":"search","results":[`+
			`{"title":"Lanefleet docs","url":"https://example.com/lanefleet","description":"Agent turns on <strong>NATS</strong> JetStream.","type":"search_result","language":"en","family_friendly":true}]}}`)
	}))
	t.Cleanup(srv.Close)
	script := map[string]scripted.Script{"search": {Replies: []scripted.Reply{
		{ToolCalls: []scripted.ToolCall{{ID: "s1", Name: "web_search", Arguments: map[string]any{"query": "lanefleet", "count": 3}}}},
		{Text: "searched"},
	}}}
	env := func(name string) string {
		if name == "BRAVE_API_KEY" {
			return key
		}
		return ""
	}
	_, c, ctx := runMember(t, Config{DataDir: t.TempDir(), DefaultModel: "scripted/search", Scripts: script, NoBuiltinTools: true,
		WebSearch: "brave", WebSearchURL: srv.URL, Env: env})
	v := watch(t, ctx, c, "search", "look it up")
	if v.runErr != nil || len(v.result.Payloads) == 0 || v.result.Payloads[0].Text != "searched" {
		t.Fatalf("%+v, %v", v.result, v.runErr)
	}
	if got := <-tokens; got != key+" lanefleet" {
		t.Errorf("the provider got %q", got)
	}
	if got := toolResults(t, ctx, c, "search")["s1"]; !strings.Contains(got, "1. Lanefleet docs\n   https://example.com/lanefleet\n   Agent turns on NATS JetStream.") {
		t.Errorf("result %q", got)
	}
}
