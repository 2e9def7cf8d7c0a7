package gateway

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/gateway/openai"
	"github.com/lanefleet/lanefleet/gateway/route"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/tools"
)

// sessionRequest is how a test names session key on one route: the
// path's {key}, or a header, body or id for routes that name it another
// way. Every Session and SessionWrite route needs one: a route added
// without it fails TestTenantIsolation.
type sessionRequest func(key string) (path, body string, hdr []string)

// pathSession fills a pattern's wildcards: {key} with the session, the
// others with plausible values.
func pathSession(pattern, body string) sessionRequest {
	return func(key string) (string, string, []string) {
		r := strings.NewReplacer("{key}", escapeKey(key), "{run}", "1", "{call}", "call-1", "{seq}", "1")
		return r.Replace(pattern), body, nil
	}
}

func escapeKey(key string) string { return strings.ReplaceAll(key, "/", "%2F") }

// headerSession names the session with gateway/openai's header, on a
// route whose body names none.
func headerSession(path, body string) sessionRequest {
	return func(key string) (string, string, []string) {
		return path, body, []string{openai.HeaderSession, key}
	}
}

// sessionRequests says, by "METHOD pattern", how each route names a
// session. TestTenantIsolation adds the routes that name one by a
// response id.
var sessionRequests = map[string]sessionRequest{
	"POST /v1/chat/completions":                 headerSession("/v1/chat/completions", `{"model":"scripted/echo","messages":[{"role":"user","content":"hi"}]}`),
	"POST /v1/responses":                        headerSession("/v1/responses", `{"model":"scripted/echo","input":"hi"}`),
	"POST /api/sessions/{key}/messages":         pathSession("/api/sessions/{key}/messages", `{"text":"hi"}`),
	"GET /api/sessions/{key}/runs":              pathSession("/api/sessions/{key}/runs", ""),
	"GET /api/sessions/{key}/runs/{run}":        pathSession("/api/sessions/{key}/runs/{run}?wait=0s", ""),
	"GET /api/sessions/{key}/runs/{run}/events": pathSession("/api/sessions/{key}/runs/{run}/events", ""),
	"GET /api/sessions/{key}/history":           pathSession("/api/sessions/{key}/history", ""),
	"GET /api/sessions/{key}/settings":          pathSession("/api/sessions/{key}/settings", ""),
	"PATCH /api/sessions/{key}/settings":        pathSession("/api/sessions/{key}/settings", `{"queue":{"mode":"collect"}}`),
	"DELETE /api/sessions/{key}/settings":       pathSession("/api/sessions/{key}/settings", ""),
	"POST /api/sessions/{key}/stop":             pathSession("/api/sessions/{key}/stop", ""),
	"GET /api/sessions/{key}/approvals":         pathSession("/api/sessions/{key}/approvals", ""),
	"POST /api/sessions/{key}/approvals/{call}": pathSession("/api/sessions/{key}/approvals/{call}", `{"decision":"approve"}`),
	"GET /api/sessions/{key}/backlog":           pathSession("/api/sessions/{key}/backlog", ""),
	"GET /api/budgets/sessions/{key}":           pathSession("/api/budgets/sessions/{key}", ""),
}

// fillPattern is a request path for a route that names no session.
func fillPattern(pattern string) string {
	return strings.NewReplacer("{seq}", "1", "{id}", "x", "{path...}", "AGENTS.md", "{model...}", "scripted/echo", "{key}", "globex:secret", "{tenant}", "globex").Replace(pattern)
}

// isolationTokens are setup's tokens and those of scopes the session
// index reads in other ways (admin's planIndex): a scope of nothing (no
// prefixes, no sessions: a lookup of no keys), a prefix inside the other
// tenant's group (read through that group's filter, entry by entry), and
// a prefix whose group cannot be a key (too long: the whole index, entry
// by entry).
var isolationTokens = append(slices.Clone(testTokens),
	TokenEntry{Name: "nobody", Role: auth.Sender},
	TokenEntry{Name: "globex-pub", Role: auth.Sender, Prefixes: []string{"globex:pub"}},
	TokenEntry{Name: "unkeyable", Role: auth.Sender, Prefixes: []string{strings.Repeat("g", events.MaxKeyBytes) + ":"}},
)

// outsiders are the tokens that must not reach the other tenant's
// sessions.
var outsiders = []string{"acme", "acme-viewer", "nobody", "globex-pub", "unkeyable"}

// TestTenantIsolation walks every route the server mounts (its own and
// the mounted packages') with two tenants' tokens: a session route named
// with the other tenant's session answers 404 as for a session nobody
// uses, a fleet route 403 to a non-admin, a caller route shows none of
// the other tenant's sessions, and no route answers a caller without a
// token except the public ones. Afterwards the other tenant's session is
// as it was: no message reached it, no setting changed.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{openai: true, tokens: isolationTokens, member: func(c *fleet.Config) {
		c.WorkspaceRoot = t.TempDir()
		c.ToolPolicy = tools.Policy{Approve: []string{"write"}}
	}})
	const theirs = "globex:secret/1"
	// A call of theirs waits for approval (GET /api/approvals must not
	// show it).
	pending, _ := json.Marshal(map[string]any{"model": "scripted/script", "stream": true,
		"text": `#script {"replies":[{"toolCalls":[{"id":"g1","name":"write","arguments":{"path":"globex-secret","content":"x"}}]}]}`})
	b.streamed(t, "root", "globex:pending", string(pending))
	resp := b.do(t, "globex", "POST", "/api/sessions/"+escapeKey(theirs)+"/messages", `{"text":"private","stream":true}`)
	if _, err := readSSE(resp.Body, nil); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// A response of theirs, named by its id on the Responses routes.
	resp = b.do(t, "globex", "POST", "/v1/responses", `{"model":"scripted/echo","input":"private"}`, openai.HeaderSession, theirs)
	var their struct{ ID string }
	if err := json.NewDecoder(resp.Body).Decode(&their); err != nil || resp.StatusCode != 200 || their.ID == "" {
		t.Fatalf("their response: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	reqs := maps.Clone(sessionRequests)
	reqs["GET /v1/responses/{id}"] = pathSession("/v1/responses/"+their.ID, "")
	reqs["POST /v1/responses/{id}/cancel"] = pathSession("/v1/responses/"+their.ID+"/cancel", "")
	before, err := b.client.History(b.ctx, theirs)
	if err != nil || len(before) == 0 {
		t.Fatalf("history: %v (%d)", err, len(before))
	}
	for _, rt := range b.srv.Routes() {
		id := rt.Method + " " + rt.Pattern
		t.Run(id, func(t *testing.T) {
			switch rt.Reach {
			case route.Public:
				resp := b.do(t, "", rt.Method, fillPattern(rt.Pattern), "")
				resp.Body.Close()
				if resp.StatusCode == 401 || resp.StatusCode == 403 {
					t.Fatalf("public route refused: %d", resp.StatusCode)
				}
				return
			case route.Fleet:
				for _, who := range append([]string{"globex"}, outsiders...) {
					resp := b.do(t, who, rt.Method, fillPattern(rt.Pattern), bodyFor(rt))
					resp.Body.Close()
					if resp.StatusCode != 403 {
						t.Fatalf("%s: %d, want 403", who, resp.StatusCode)
					}
				}
			case route.Caller:
				if rt.Pattern == "/mcp" {
					mcpIsolation(t, b, theirs)
					break
				}
				if strings.HasPrefix(rt.Pattern, "/api/agents/{id}") {
					// An agent none of whose sessions the caller
					// reaches: as for no such agent.
					for _, who := range outsiders {
						resp := b.do(t, who, rt.Method, fillPattern(rt.Pattern), "")
						resp.Body.Close()
						if resp.StatusCode != 404 {
							t.Fatalf("%s: %d, want 404", who, resp.StatusCode)
						}
					}
					break
				}
				for _, who := range outsiders {
					resp := b.do(t, who, rt.Method, fillPattern(rt.Pattern), bodyFor(rt))
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					// globex-pub's own name and prefix (GET /api/me) are
					// no leak.
					own := strings.NewReplacer("globex-pub", "", "globex:pub", "")
					if resp.StatusCode != 200 || strings.Contains(own.Replace(string(body)), "globex") {
						t.Fatalf("%s sees: %d %.300s", who, resp.StatusCode, body)
					}
				}
				// The admin sees theirs: the filter, not an empty fleet.
				resp := b.do(t, "root", rt.Method, fillPattern(rt.Pattern), bodyFor(rt))
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if want := map[string]string{"/api/sessions": "globex:secret/1", "/api/approvals": "globex-secret"}[rt.Pattern]; want != "" && !strings.Contains(string(body), want) {
					t.Fatalf("root does not see %s: %.300s", want, body)
				}
			case route.Session, route.SessionWrite:
				req, ok := reqs[id]
				if !ok {
					t.Fatalf("route %s names a session, but sessionRequests does not say how: add it", id)
				}
				path, body, hdr := req(theirs)
				for _, who := range outsiders {
					if who == "acme-viewer" && rt.Reach == route.SessionWrite {
						resp := b.do(t, who, rt.Method, path, body, hdr...)
						resp.Body.Close()
						if resp.StatusCode != 403 {
							t.Fatalf("viewer on a write route: %d", resp.StatusCode)
						}
						continue
					}
					resp := b.do(t, who, rt.Method, path, body, hdr...)
					got, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 404 || strings.Contains(string(got), "private") {
						t.Fatalf("%s reaches %s: %d %.300s", who, theirs, resp.StatusCode, got)
					}
					// The native routes say so before anything else: not
					// a 404 of the fleet's (no such run, no such call).
					if strings.HasPrefix(rt.Pattern, "/api/") && !strings.Contains(string(got), `"no such session"`) {
						t.Fatalf("%s: a 404 that is not the session check: %s", who, got)
					}
				}
			default:
				t.Fatalf("reach %d unknown to this test", rt.Reach)
			}
			resp := b.do(t, "", rt.Method, fillPattern(rt.Pattern), bodyFor(rt))
			resp.Body.Close()
			if resp.StatusCode != 401 {
				t.Fatalf("no token: %d, want 401", resp.StatusCode)
			}
		})
	}
	after, err := b.client.History(b.ctx, theirs)
	if err != nil || len(after) != len(before) {
		t.Fatalf("the other tenant's history changed: %d entries, then %d (%v)", len(before), len(after), err)
	}
	st, err := b.client.Settings(b.ctx, theirs)
	if err != nil || st.Queue.Mode != "" {
		t.Fatalf("the other tenant's settings changed: %+v %v", st, err)
	}
	bl, err := b.client.Backlog(b.ctx, theirs)
	if err != nil || bl.Waiting != 0 {
		t.Fatalf("a message waits on the other tenant's lane: %+v %v", bl, err)
	}
}

// bodyFor is a body for a route that takes one: JSON the route accepts.
// mcpIsolation calls /mcp's tools as the acme tokens: list_sessions shows
// none of the other tenant's sessions (the admin's shows theirs), and the
// tools that name a session refuse theirs, telling nothing of it.
func mcpIsolation(t *testing.T, b *bundle, theirs string) {
	t.Helper()
	call := func(who, tool string, args map[string]any) (int, string) {
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{"name": tool, "arguments": args}})
		resp := b.do(t, who, "POST", "/mcp", string(body), "Accept", "application/json, text/event-stream")
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(got)
	}
	for _, who := range outsiders {
		if code, got := call(who, "list_sessions", nil); code != 200 || strings.Contains(got, "globex") || strings.Contains(got, `"isError":true`) {
			t.Fatalf("%s: list_sessions: %d %.300s", who, code, got)
		}
		for tool, args := range map[string]map[string]any{"send_message": {"session": theirs, "text": "hi"},
			"read_history": {"session": theirs}, "get_run": {"session": theirs, "runId": "1"}} {
			code, got := call(who, tool, args)
			refused := strings.Contains(got, "is not one this caller may reach") || who == "acme-viewer" && tool == "send_message" && strings.Contains(got, "unknown tool")
			if !refused || strings.Contains(got, "private") {
				t.Fatalf("%s: %s on %s: %d %.300s", who, tool, theirs, code, got)
			}
		}
	}
	if code, got := call("root", "list_sessions", nil); code != 200 || !strings.Contains(got, theirs) {
		t.Fatalf("root does not see %s: %d %.300s", theirs, code, got)
	}
}

func bodyFor(rt route.Route) string {
	if rt.Method == http.MethodPost || rt.Method == http.MethodPatch {
		return `{}`
	}
	return ""
}
