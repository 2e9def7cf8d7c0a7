package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/gateway/auth"
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
