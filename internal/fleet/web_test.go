package fleet

import (
	"context"
	"fmt"
	"github.com/lanefleet/lanefleet"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
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
