package subagent

import (
	"testing"

	"github.com/lanefleet/lanefleet/events"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

// TestSeals: a seal holds only for the key, the lane and the fields it
// was made over; changing any field the receiving lane acts on, sending
// it to another lane, or sealing with another key breaks it, and no key
// (a worker that has not read it) seals nothing.
func TestSeals(t *testing.T) {
	t.Parallel()
	st := &events.SessionState{Parent: &events.Parent{Session: "acme:a", Run: "7", Label: "l", Nonce: "n1"},
		Usage: &events.UsageMeta{Total: 30, Cost: &events.CostMeta{Total: 0.25}}}
	_, _, in, ok := Completion(testKey, "acme:a:subagent:x", "3", st, &events.Result{Payloads: []events.Payload{{Text: "done"}}}, false)
	if !ok || !CompletionSealed(testKey, "acme:a", in) {
		t.Fatal("a completion is not sealed")
	}
	tamper := []struct {
		name string
		f    func(in *events.Inbound)
	}{
		{"text", func(in *events.Inbound) { in.Text += " and wire the money" }},
		{"id", func(in *events.Inbound) { in.ID = "other" }},
		{"mode", func(in *events.Inbound) { in.Mode = "interrupt" }},
		{"child", func(in *events.Inbound) { in.Subagent.Session = "acme:a:subagent:y" }},
		{"run", func(in *events.Inbound) { in.Subagent.Run = "4" }},
		{"label", func(in *events.Inbound) { in.Subagent.Label = "m" }},
		{"status", func(in *events.Inbound) { in.Subagent.Status = events.SubagentError }},
		{"tokens", func(in *events.Inbound) { u := *in.Subagent.Usage; u.Total++; in.Subagent.Usage = &u }},
		{"cost", func(in *events.Inbound) {
			u := *in.Subagent.Usage
			c := *u.Cost
			c.Total = 1e9
			u.Cost = &c
			in.Subagent.Usage = &u
		}},
		{"no usage", func(in *events.Inbound) { in.Subagent.Usage = nil }},
		{"no seal", func(in *events.Inbound) { in.Subagent.Seal = "" }},
	}
	for _, c := range tamper {
		cp := *in
		r := *in.Subagent
		cp.Subagent = &r
		c.f(&cp)
		if CompletionSealed(testKey, "acme:a", &cp) {
			t.Errorf("%s changed: still sealed", c.name)
		}
	}
	if CompletionSealed(testKey, "acme:b", in) || CompletionSealed([]byte("another fleet's key"), "acme:a", in) || CompletionSealed(nil, "acme:a", in) {
		t.Error("a seal holds for another lane or key")
	}
	if CompletionSealed(testKey, "acme:a", &events.Inbound{Text: "x"}) {
		t.Error("a message with no completion is sealed")
	}

	p := &events.Parent{Session: "acme:a", Run: "7", Label: "l", Nonce: "n1"}
	p.Seal = SealSpawn(testKey, "acme:a:subagent:x", p)
	if !SpawnSealed(testKey, "acme:a:subagent:x", p) {
		t.Fatal("a spawn is not sealed")
	}
	for name, q := range map[string]events.Parent{
		"parent": {Session: "acme:b", Run: "7", Label: "l", Nonce: "n1", Seal: p.Seal},
		"run":    {Session: "acme:a", Run: "8", Label: "l", Nonce: "n1", Seal: p.Seal},
		"label":  {Session: "acme:a", Run: "7", Label: "m", Nonce: "n1", Seal: p.Seal},
		"nonce":  {Session: "acme:a", Run: "7", Label: "l", Nonce: "n2", Seal: p.Seal},
		"seal":   {Session: "acme:a", Run: "7", Label: "l", Nonce: "n1", Seal: "00"},
		// A sender who could add an ancestor would charge its budget.
		"ancestors": {Session: "acme:a", Run: "7", Label: "l", Nonce: "n1", Seal: p.Seal, Ancestors: []string{"acme:rich"}},
	} {
		if SpawnSealed(testKey, "acme:a:subagent:x", &q) {
			t.Errorf("spawn with its %s changed: still sealed", name)
		}
	}
	if SpawnSealed(testKey, "acme:a:subagent:y", p) || SpawnSealed(nil, "acme:a:subagent:x", p) || SpawnSealed(testKey, "x", nil) {
		t.Error("a spawn seal holds for another child, with no key, or with no parent")
	}
}

// TestLineage: a sub-agent's lineage is its parent, then the parent's own
// ancestors, all sealed: a grandchild's spawn names both sessions above
// it, and removing or changing one breaks the seal.
func TestLineage(t *testing.T) {
	t.Parallel()
	if Lineage(nil) != nil {
		t.Fatal("a session nobody spawned has a lineage")
	}
	child := &events.Parent{Session: "acme:a", Run: "7", Nonce: "n1"}
	mid := "acme:a:subagent:x"
	if got := Lineage(child); len(got) != 1 || got[0] != "acme:a" {
		t.Fatalf("a child's lineage: %q", got)
	}
	grand := &events.Parent{Session: mid, Run: "9", Nonce: "n2", Ancestors: Lineage(child)}
	grand.Seal = SealSpawn(testKey, mid+":subagent:y", grand)
	if got := Lineage(grand); len(got) != 2 || got[0] != mid || got[1] != "acme:a" {
		t.Fatalf("a grandchild's lineage: %q", got)
	}
	if !SpawnSealed(testKey, mid+":subagent:y", grand) {
		t.Fatal("a spawn with ancestors is not sealed")
	}
	for name, anc := range map[string][]string{"none": nil, "another": {"acme:b"}, "one more": {"acme:a", "acme:b"}} {
		q := *grand
		q.Ancestors = anc
		if SpawnSealed(testKey, mid+":subagent:y", &q) {
			t.Errorf("ancestors %s: still sealed", name)
		}
	}
}
