package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/agents"
	"github.com/lanefleet/lanefleet/gateway/auth"
	"github.com/lanefleet/lanefleet/internal/fleet"
)

// TestAgentsAPI: admins define, read and remove agents; a caller reads
// only the agents whose sessions it reaches (a prefix covering
// "agent:<id>:", or one of its single sessions), and another agent is
// as absent as one nobody defined; no caller but an admin writes one.
func TestAgentsAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{tokens: []TokenEntry{
		{Name: "root", Role: auth.Admin, Prefixes: []string{""}},
		{Name: "acme", Role: auth.Sender, Prefixes: []string{"acme:"}},
		{Name: "ops", Role: auth.Sender, Prefixes: []string{"agent:ops:"}},
		{Name: "one", Role: auth.Viewer, Sessions: []string{"agent:sales:bob"}},
		{Name: "all", Role: auth.Viewer, Prefixes: []string{""}},
	}})
	put := func(who, id, body string) *http.Response {
		t.Helper()
		resp := b.do(t, who, "PUT", "/api/agents/"+id, body)
		resp.Body.Close()
		return resp
	}
	for _, c := range []struct {
		who, id, body string
		status        int
	}{
		{"root", "ops", `{"systemPrompt":"You run ops.","tools":{"profile":"coding","deny":["exec"]}}`, 200},
		{"root", "sales", `{"id":"sales","model":"scripted/echo"}`, 200},
		{"root", "x", `{"id":"y"}`, 400},                   // the body names another agent
		{"root", "x", `{"model":"echo"}`, 400},             // not provider/model-id
		{"root", "x", `{"sytemPrompt":"typo"}`, 400},       // an unknown field
		{"root", "x", `{"tools":{"profile":"root"}}`, 400}, // an unknown profile
		{"root", "Bad", `{}`, 404},                         // no agent can have that id
		{"ops", "ops", `{"systemPrompt":"mine now"}`, 403}, // a sender of its sessions
		{"acme", "ops", `{}`, 403},
	} {
		if resp := put(c.who, c.id, c.body); resp.StatusCode != c.status {
			t.Errorf("%s PUT %s %s: %d, want %d", c.who, c.id, c.body, resp.StatusCode, c.status)
		}
	}
	list := func(who string) string {
		t.Helper()
		var l AgentList
		resp := b.do(t, who, "GET", "/api/agents", "")
		readJSON(t, resp, &l)
		var ids []string
		for _, a := range l.Agents {
			ids = append(ids, a.ID)
		}
		return strings.Join(ids, ",")
	}
	for _, c := range []struct {
		who, list string
		get       map[string]int
	}{
		{"root", "ops,sales", map[string]int{"ops": 200, "sales": 200, "nobody": 404}},
		{"all", "ops,sales", map[string]int{"ops": 200, "sales": 200}},
		{"ops", "ops", map[string]int{"ops": 200, "sales": 404, "nobody": 404}},
		{"one", "sales", map[string]int{"ops": 404, "sales": 200}},
		{"acme", "", map[string]int{"ops": 404, "sales": 404}},
	} {
		if got := list(c.who); got != c.list {
			t.Errorf("%s lists %q, want %q", c.who, got, c.list)
		}
		for id, status := range c.get {
			resp := b.do(t, c.who, "GET", "/api/agents/"+id, "")
			resp.Body.Close()
			if resp.StatusCode != status {
				t.Errorf("%s GET %s: %d, want %d", c.who, id, resp.StatusCode, status)
			}
		}
	}
	var got struct {
		SystemPrompt string `json:"systemPrompt"`
		Tools        struct {
			Profile string   `json:"profile"`
			Deny    []string `json:"deny"`
		} `json:"tools"`
	}
	readJSON(t, b.do(t, "ops", "GET", "/api/agents/ops", ""), &got)
	if got.SystemPrompt != "You run ops." || got.Tools.Profile != "coding" || got.Tools.Deny[0] != "exec" {
		t.Fatalf("GET ops: %+v", got)
	}
	for who, status := range map[string]int{"ops": 403, "root": 204} {
		resp := b.do(t, who, "DELETE", "/api/agents/ops", "")
		resp.Body.Close()
		if resp.StatusCode != status {
			t.Fatalf("%s DELETE ops: %d, want %d", who, resp.StatusCode, status)
		}
	}
	resp := b.do(t, "root", "DELETE", "/api/agents/ops", "")
	resp.Body.Close()
	if resp.StatusCode != 404 || list("root") != "sales" {
		t.Fatalf("after DELETE: %d, list %q", resp.StatusCode, list("root"))
	}
}

// TestAgentFilesAPI: an agent's workspace files are listed and read by
// the callers that read the agent, written and removed by admins only;
// a path that is no workspace path is refused naming the rule, a file
// over the per-file limit is 413, and a put the object store refuses
// for the fleet's byte limit (--max-agent-files-bytes) is 507 saying so.
// An agent that names another workspace reads and writes that one.
func TestAgentFilesAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{member: func(c *fleet.Config) { c.Limits.AgentFiles = 256 << 10 }, tokens: []TokenEntry{
		{Name: "root", Role: auth.Admin, Prefixes: []string{""}},
		{Name: "ops", Role: auth.Sender, Prefixes: []string{"agent:ops:"}},
		{Name: "acme", Role: auth.Sender, Prefixes: []string{"acme:"}},
	}})
	do := func(who, method, path, body string) (int, string) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(b.ctx, method, b.ts.URL+path, rd)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "text/markdown")
		if strings.HasPrefix(body, "{") {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("Authorization", "Bearer "+b.tokens[who])
		resp, err := b.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(got)
	}
	for _, def := range []string{`{"id":"ops"}`, `{"id":"night","workspace":"ops"}`} {
		var a struct{ ID string }
		_ = json.Unmarshal([]byte(def), &a)
		if st, body := do("root", "PUT", "/api/agents/"+a.ID, def); st != 200 {
			t.Fatalf("PUT agent %s: %d %s", a.ID, st, body)
		}
	}
	big := strings.Repeat("x", agents.MaxFileBytes+1)
	for _, c := range []struct {
		who, method, path, body string
		status                  int
		has                     string // in the body
	}{
		{"root", "PUT", "/api/agents/ops/files/AGENTS.md", "Be brief.", 200, `"digest":"SHA-256=`},
		{"root", "PUT", "/api/agents/night/files/memory/2026-11-29.md", "met the user", 200, `"path":"memory/2026-11-29.md"`},
		{"ops", "GET", "/api/agents/ops/files", "", 200, `{"workspace":"ops","files":[{"path":"AGENTS.md","size":9,`},
		{"ops", "GET", "/api/agents/ops/files/AGENTS.md", "", 200, "Be brief."},
		{"ops", "GET", "/api/agents/ops/files/memory/2026-11-29.md", "", 200, "met the user"}, // night's write: the shared workspace
		{"ops", "GET", "/api/agents/ops/files/MEMORY.md", "", 404, "the workspace has no file MEMORY.md"},
		{"ops", "PUT", "/api/agents/ops/files/AGENTS.md", "mine now", 403, "forbidden"},
		{"ops", "DELETE", "/api/agents/ops/files/AGENTS.md", "", 403, "forbidden"},
		{"ops", "GET", "/api/agents/night/files", "", 404, "no such agent"}, // night's sessions are not ops'
		{"acme", "GET", "/api/agents/ops/files", "", 404, "no such agent"},
		{"acme", "GET", "/api/agents/ops/files/AGENTS.md", "", 404, "no such agent"},
		{"root", "GET", "/api/agents/nobody/files", "", 404, "no such agent"},
		{"root", "PUT", "/api/agents/nobody/files/AGENTS.md", "x", 404, "no such agent"},
		{"root", "PUT", "/api/agents/ops/files/.env", "x", 400, "is not a workspace path"},
		{"root", "PUT", "/api/agents/ops/files/memory/.hidden", "x", 400, "is not a workspace path"},
		{"root", "PUT", "/api/agents/ops/files/%2e%2e%2fsecrets", "x", 400, "is not a workspace path"},
		{"root", "PUT", "/api/agents/ops/files/memory/..%2f..%2fx", "x", 400, "is not a workspace path"},
		{"root", "PUT", "/api/agents/ops/files/" + strings.Repeat("a", 300), "x", 400, "is not a workspace path"},
		{"root", "GET", "/api/agents/ops/files/", "", 400, "is not a workspace path"},
		{"root", "PUT", "/api/agents/ops/files/big.md", big, 413, "over the limit of 2097152 bytes"},
		{"root", "DELETE", "/api/agents/ops/files/AGENTS.md", "", 204, ""},
		{"root", "DELETE", "/api/agents/ops/files/AGENTS.md", "", 404, "the workspace has no file AGENTS.md"},
		{"ops", "GET", "/api/agents/ops/files", "", 200, `{"workspace":"ops","files":[{"path":"memory/2026-11-29.md"`},
	} {
		st, body := do(c.who, c.method, c.path, c.body)
		if st != c.status || !strings.Contains(body, c.has) {
			t.Errorf("%s %s %.80s: %d %.300s; want %d with %q", c.who, c.method, c.path, st, body, c.status, c.has)
		}
	}
	// The object store holds 256 KiB: the fourth file of 100 KB is refused.
	chunk := strings.Repeat("m", 100_000)
	var st int
	var body string
	for i := range 4 {
		if st, body = do("root", "PUT", fmt.Sprintf("/api/agents/ops/files/memory/%d.md", i), chunk); st != 200 {
			break
		}
	}
	if st != 507 || !strings.Contains(body, "--max-agent-files-bytes") {
		t.Fatalf("a put over the byte limit: %d %s", st, body)
	}
}
