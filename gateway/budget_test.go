package gateway

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/budgetstore"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestBudgetEndpoints: an admin sets, reads, resets and removes budgets
// through the gateway, each change audited under its token's name; a
// tenant's sender reads its own tenant's budget (GET /api/budgets) and
// its sessions' own, never another tenant's, and may change none.
func TestBudgetEndpoints(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	call := func(who, method, path, body string, want int) string {
		t.Helper()
		resp := b.do(t, who, method, path, body)
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s %s %s: %d %s, want %d", who, method, path, resp.StatusCode, got, want)
		}
		return string(got)
	}
	got := call("root", "PUT", "/api/budgets/tenants/acme", `{"usd":2.5,"turns":10,"window":"day","softPct":80}`, 200)
	if !strings.Contains(got, `"limits":{"usd":2.5,"turns":10,"window":"day","softPct":80}`) || !strings.Contains(got, `"paused":false`) {
		t.Fatalf("set: %s", got)
	}
	call("root", "PUT", "/api/budgets/tenants/globex", `{"tokens":1000}`, 200)
	call("root", "PUT", "/api/budgets/sessions/acme:1", `{"turns":3}`, 200)
	call("root", "PUT", "/api/budgets/agents/support", `{"turns":7}`, 200)
	call("root", "PUT", "/api/budgets/profiles/openai:work", `{"tokens":5000}`, 200)
	call("root", "PUT", "/api/budgets/agents/Sup%20port", `{"turns":7}`, 400)
	call("root", "PUT", "/api/budgets/tenants/acme", `{"usd":-1}`, 400)
	call("root", "PUT", "/api/budgets/tenants/acme", `{"window":"week"}`, 400)
	call("root", "PUT", "/api/budgets/tenants/acme", `{"usd":1,"extra":1}`, 400)
	if got := call("root", "GET", "/api/budgets/tenants/globex", "", 200); !strings.Contains(got, `"tokens":1000`) {
		t.Fatalf("get: %s", got)
	}
	if got := call("root", "GET", "/api/budgets/profiles/openai:work", "", 200); !strings.Contains(got, `"kind":"profile","name":"openai:work"`) {
		t.Fatalf("get a profile's: %s", got)
	}
	// The admin lists every budget; acme's sender and viewer their tenant's.
	if got := call("root", "GET", "/api/budgets", "", 200); !strings.Contains(got, `"name":"acme"`) || !strings.Contains(got, `"name":"globex"`) ||
		!strings.Contains(got, `"kind":"agent","name":"support"`) || !strings.Contains(got, `"kind":"profile","name":"openai:work"`) || !strings.Contains(got, `"kind":"session","name":"acme:1"`) {
		t.Fatalf("admin's list: %s", got)
	}
	for _, who := range []string{"acme", "acme-viewer"} {
		got := call(who, "GET", "/api/budgets", "", 200)
		if !strings.Contains(got, `"name":"acme"`) || strings.Contains(got, "globex") || strings.Contains(got, "support") {
			t.Fatalf("%s's list: %s", who, got)
		}
		if got := call(who, "GET", "/api/budgets/sessions/acme:1", "", 200); !strings.Contains(got, `"turns":3`) {
			t.Fatalf("%s's session budget: %s", who, got)
		}
		call(who, "GET", "/api/budgets/sessions/globex:1", "", 404)
		call(who, "GET", "/api/budgets/tenants/acme", "", 403)
		call(who, "GET", "/api/budgets/agents/support", "", 403)
		call(who, "PUT", "/api/budgets/profiles/openai:work", `{"tokens":1}`, 403)
		call(who, "PUT", "/api/budgets/sessions/acme:1", `{"turns":100}`, 403)
	}
	call("acme", "GET", "/api/budgets/sessions/acme:2", "", 404) // no budget on it
	if got := call("root", "POST", "/api/budgets/tenants/acme/reset", "", 200); !strings.Contains(got, `"used":{"usd":0,"tokens":0,"turns":0}`) {
		t.Fatalf("reset: %s", got)
	}
	call("root", "DELETE", "/api/budgets/sessions/acme:1", "", 204)
	if got := call("acme", "GET", "/api/budgets/sessions/acme:1", "", 200); !strings.Contains(got, `"limits":{"window":"total"}`) {
		t.Fatalf("after remove: %s", got)
	}
	// Every change is audited under the token's name.
	js, err := jetstream.New(natstest.Connect(t, b.url))
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(b.ctx, budgetstore.AuditStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for len(ops) < 7 {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("audit after %v: %v", ops, err)
		}
		var rec budgetstore.AuditRecord
		if err := json.Unmarshal(m.Data(), &rec); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, rec.Who+":"+rec.Op)
	}
	if strings.Join(ops, ",") != "root:set,root:set,root:set,root:set,root:set,root:reset,root:remove" {
		t.Fatalf("audit %v", ops)
	}
}
