package agents

import (
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/lanefleet/lanefleet/events"
)

func TestOf(t *testing.T) {
	t.Parallel()
	cases := []struct {
		key, id string
		named   bool
	}{
		{"agent:x:s1", "x", true},
		{"agent:ops-2:telegram:dm:42", "ops-2", true},
		{"agent::s1", "", true},            // named, with an id no agent has: refused, never the default
		{"agent:BAD:s1", "BAD", true},      // likewise
		{"agent:x:", "main", false},        // nothing after the id: not the form
		{"agent:x", "main", false},         // no second ':'
		{"acme:agent:x:s1", "main", false}, // a tenant's key: the agent form only opens a key
		{"s1", "main", false},
	}
	for _, c := range cases {
		id, named := Of(c.key, "main")
		if id != c.id || named != c.named {
			t.Errorf("Of(%q) = %q, %v; want %q, %v", c.key, id, named, c.id, c.named)
		}
	}
}

func valid() *Agent {
	off := false
	return &Agent{ID: "ops", Name: "Ops", SystemPrompt: "You run ops.", Model: "anthropic/claude", Fallbacks: []string{"openai/gpt"},
		Thinking: "high", Tools: &ToolPolicy{Profile: ProfileCoding, ToolPolicy: events.ToolPolicy{Deny: []string{"exec"}}},
		Skills: []string{"git.helper"}, Workspace: "shared", ChatCommands: &off}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		edit  func(a *Agent)
		field string // in the error; "" = valid
	}{
		{"valid", func(*Agent) {}, ""},
		{"minimal definition", func(a *Agent) { *a = Agent{ID: "a"} }, ""},
		{"empty id", func(a *Agent) { a.ID = "" }, "id:"},
		{"upper case id", func(a *Agent) { a.ID = "Ops" }, "id:"},
		{"id with a colon", func(a *Agent) { a.ID = "a:b" }, "id:"},
		{"id with a dot", func(a *Agent) { a.ID = "a.b" }, "id:"},
		{"id starting with -", func(a *Agent) { a.ID = "-a" }, "id:"},
		{"id of 65 bytes", func(a *Agent) { a.ID = strings.Repeat("a", 65) }, "id:"},
		{"id of 64 bytes", func(a *Agent) { a.ID = strings.Repeat("a", 64) }, ""},
		{"name on two lines", func(a *Agent) { a.Name = "a\nb" }, "name:"},
		{"long name", func(a *Agent) { a.Name = strings.Repeat("n", MaxNameBytes+1) }, "name:"},
		{"long prompt", func(a *Agent) { a.SystemPrompt = strings.Repeat("p", MaxSystemPromptBytes+1) }, "systemPrompt:"},
		{"prompt not UTF-8", func(a *Agent) { a.SystemPrompt = "\xff" }, "systemPrompt:"},
		{"model without provider", func(a *Agent) { a.Model = "claude" }, "model:"},
		{"unknown thinking", func(a *Agent) { a.Thinking = "max" }, "thinking:"},
		{"bad fallback", func(a *Agent) { a.Fallbacks = []string{"openai/gpt", "x y"} }, "fallbacks[1]:"},
		{"too many fallbacks", func(a *Agent) { a.Fallbacks = make([]string, MaxFallbacks+1) }, "fallbacks:"},
		{"unknown profile", func(a *Agent) { a.Tools.Profile = "all" }, "tools.profile:"},
		{"bad tool pattern", func(a *Agent) { a.Tools.Allow = []string{"a b"} }, "tools.allow[0]:"},
		{"bad skill", func(a *Agent) { a.Skills = []string{"../x"} }, "skills[0]:"},
		{"bad workspace", func(a *Agent) { a.Workspace = "../etc" }, "workspace:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			a := valid()
			c.edit(a)
			err := a.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("Validate = %v; want ErrInvalid naming %s", err, c.field)
			}
		})
	}
}

func TestCodec(t *testing.T) {
	t.Parallel()
	a := valid()
	b, err := Encode(a)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != a.ID || got.Tools.Profile != ProfileCoding || got.Tools.Deny[0] != "exec" || got.CommandsOn() || got.WorkspaceName() != "shared" {
		t.Fatalf("round trip = %+v", got)
	}
	j, err := ParseJSON([]byte(`{"id":"ops","model":"anthropic/claude","tools":{"profile":"minimal","approve":["exec"]},"chatCommands":false}`))
	if err != nil {
		t.Fatal(err)
	}
	if j.Tools.Profile != ProfileMinimal || j.Tools.Approve[0] != "exec" || j.CommandsOn() {
		t.Fatalf("JSON = %+v", j)
	}

	hostile := map[string][]byte{
		"not msgpack":   []byte("\xc1\xc1"),
		"a string":      mustMsgpack(t, "ops"),
		"unknown field": mustMsgpack(t, map[string]any{"id": "ops", "root": true}),
		"bad id":        mustMsgpack(t, map[string]any{"id": "../x"}),
		"too large":     make([]byte, MaxRecordBytes+1),
		"empty":         nil,
	}
	for name, b := range hostile {
		if _, err := Decode(b); !errors.Is(err, ErrInvalid) {
			t.Errorf("Decode(%s) = %v; want ErrInvalid", name, err)
		}
	}
	for name, s := range map[string]string{
		"unknown field": `{"id":"ops","sytemPrompt":"typo"}`,
		"two values":    `{"id":"ops"} {"id":"x"}`,
		"not an object": `"ops"`,
		"no id":         `{}`,
	} {
		if _, err := ParseJSON([]byte(s)); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseJSON(%s) = %v; want ErrInvalid", name, err)
		}
	}
}

func mustMsgpack(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPolicies(t *testing.T) {
	t.Parallel()
	a := valid()
	ps := a.Policies()
	if len(ps) != 2 || ps[0].Allow[0] != "read" || ps[1].Deny[0] != "exec" {
		t.Fatalf("Policies = %+v", ps)
	}
	if (&Agent{ID: "a"}).Policies() != nil {
		t.Fatal("no tool policy must give no policies")
	}
}

func TestValidFilePath(t *testing.T) {
	t.Parallel()
	for p, ok := range map[string]bool{
		"AGENTS.md": true, "memory/2026-01-01.md": true, "skills/git/SKILL.md": true,
		"": false, "/etc/passwd": false, "../x": false, "a/../b": false, "a//b": false, ".env": false,
		"a/.git/config": false, "a b": false, "a\x00": false, strings.Repeat("a", MaxFilePathBytes+1): false,
	} {
		if err := ValidFilePath(p); (err == nil) != ok {
			t.Errorf("ValidFilePath(%q) = %v; want ok=%v", p, err, ok)
		}
	}
	for p, w := range map[string]bool{"MEMORY.md": true, "memory/a.md": true, "AGENTS.md": false, "skills/x/SKILL.md": false} {
		if Writable(p) != w {
			t.Errorf("Writable(%q) != %v", p, w)
		}
	}
}
