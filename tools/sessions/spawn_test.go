package sessions

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/subagent"
	"github.com/lanefleet/lanefleet/tools"
)

func spawnIn(t *testing.T, p Policy, caller string, n int, args map[string]any, lineage ...string) (*memBackend, []error) {
	t.Helper()
	b := &memBackend{}
	l, err := Tools(b, p, caller, "7", lineage)
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := l.Lookup("sessions_spawn")
	var errs []error
	for i := range n {
		_, err := tool.Call(context.Background(), tools.Call{ID: fmt.Sprint("c", i), Key: fmt.Sprint("7.1.c", i), Name: "sessions_spawn", Args: args})
		errs = append(errs, err)
	}
	return b, errs
}

// TestSpawn: a spawn publishes the task onto a child session keyed under
// the caller (same tenant), with the caller's lineage; the limits refuse
// with errors the model can act on: depth, fan-out per run, another
// agent under --session-tools agent, a caller without a tenant.
func TestSpawn(t *testing.T) {
	t.Parallel()
	task := map[string]any{"task": "find the bug", "label": "hunter"}
	b, errs := spawnIn(t, Policy{}, "acme:a", 1, task)
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	s := b.spawned[0]
	if !strings.HasPrefix(s.key, "acme:a:subagent:") || s.in.Parent == nil || s.in.Parent.Session != "acme:a" || s.in.Parent.Run != "7" ||
		s.in.Parent.Label != "hunter" || len(s.in.Parent.Nonce) != 32 || !strings.HasSuffix(s.in.Text, "\n\nfind the bug") ||
		s.in.ID != "spawn-"+subagent.ID("acme:a", "7.1.c0") || s.publishID == s.in.ID {
		t.Errorf("spawn: %+v %+v", s, s.in.Parent)
	}
	if err := s.in.Validate(); err != nil {
		t.Errorf("the spawn message does not validate: %v", err)
	}
	if s.in.Parent.Ancestors != nil {
		t.Errorf("a spawn by a session nobody spawned names ancestors %q", s.in.Parent.Ancestors)
	}
	// A sub-agent's spawn carries its own lineage: the grandchild's calls
	// count against both sessions above it.
	b, errs = spawnIn(t, Policy{}, "acme:a:subagent:x", 1, task, "acme:a")
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	if got := b.spawned[0].in.Parent.Ancestors; len(got) != 1 || got[0] != "acme:a" {
		t.Errorf("a sub-agent's spawn names ancestors %q, want its parent", got)
	}
	cases := []struct {
		name   string
		p      Policy
		caller string
		n      int
		args   map[string]any
		refuse string // in the last call's error; "" = all accepted
	}{
		{"fan-out: the sixth of a run", Policy{}, "acme:a", 6, task, "spawned 5 sub-agents, the most allowed"},
		{"fan-out set to 2", Policy{MaxChildren: 2}, "acme:a", 3, task, "spawned 2 sub-agents"},
		{"depth 1 spawns", Policy{}, "acme:a:subagent:x", 1, task, ""},
		{"depth 2 does not", Policy{}, "acme:a:subagent:x:subagent:y", 1, task, "at depth 2, the deepest allowed (2)"},
		{"depth 3 allowed", Policy{MaxDepth: 3}, "acme:a:subagent:x:subagent:y", 1, task, ""},
		{"no tenant", Policy{}, "alice", 1, task, "out of reach"},
		{"another agent, agent scope", Policy{Scope: ScopeAgent}, "agent:main:x", 1, map[string]any{"task": "t", "agentId": "ops"}, "out of reach"},
		{"another agent, tenant scope", Policy{}, "agent:main:x", 1, map[string]any{"task": "t", "agentId": "ops"}, ""},
		{"another agent, no agent key", Policy{}, "acme:a", 1, map[string]any{"task": "t", "agentId": "ops"}, "names no agent"},
		{"empty task", Policy{}, "acme:a", 1, map[string]any{"task": " "}, "task is empty"},
		{"two-line label", Policy{}, "acme:a", 1, map[string]any{"task": "t", "label": "a\nb"}, "label must be one line"},
		{"key too long", Policy{}, "acme:" + strings.Repeat("k", 240), 1, task, "too long to nest under"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b, errs := spawnIn(t, c.p, c.caller, c.n, c.args)
			for _, err := range errs[:len(errs)-1] {
				if err != nil {
					t.Fatal(err)
				}
			}
			last := errs[len(errs)-1]
			switch {
			case c.refuse == "" && last != nil:
				t.Fatalf("refused: %v", last)
			case c.refuse != "" && (last == nil || !strings.Contains(last.Error(), c.refuse)):
				t.Fatalf("got %v, want %q", last, c.refuse)
			case c.refuse != "" && len(b.spawned) != c.n-1:
				t.Fatalf("%d spawned", len(b.spawned))
			}
		})
	}
}
