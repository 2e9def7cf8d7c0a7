package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/hooks"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/permission"
)

// TestHooksThroughTheFleet: a hook process (its own connection, under the
// hook-server role) serves hooks a worker (worker role) lists with
// --hooks: its before_agent_start context reaches the model's request, its
// before_tool_call blocks one call (the model sees the reason) and
// rewrites another (the tool runs with the new arguments), its agent_end
// sees the run's result; a before_agent_start hook that does not answer in
// time only delays the run by the hook timeout, and the server logs no
// permission violation.
func TestHooksThroughTheFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	const session = "hooks:1"
	a := newAuthFleet(t, []permission.User{
		{Grant: permission.Grant{Role: permission.Worker, User: "worker"}},
		{Grant: permission.Grant{Role: permission.Sender, User: "alice", Sessions: []string{session, "hooks:slow"}}},
		{Grant: permission.Grant{Role: permission.HookServer, User: "hooks", Hooks: []string{"context", "guard", "slow"}}},
	}, "")
	_, v := a.start(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("permission violations: %q", v.list())
		}
	})

	// The hook process.
	hc := a.connectAs(t, "hooks")
	ended := make(chan hooks.EndEvent, 4)
	var mu sync.Mutex
	var calls []string
	svc, err := hooks.Serve(hc.nc, hooks.ServeConfig{},
		hooks.Hook{Name: "context", BeforeAgentStart: func(_ context.Context, ev hooks.StartEvent) (hooks.StartResult, error) {
			return hooks.StartResult{PrependContext: "Hook context: the user is on call."}, nil
		}},
		hooks.Hook{Name: "guard",
			BeforeToolCall: func(_ context.Context, ev hooks.ToolCallEvent) (hooks.ToolCallResult, error) {
				mu.Lock()
				calls = append(calls, ev.ToolName+":"+ev.Params["path"].(string)+":"+ev.SessionKey)
				mu.Unlock()
				switch ev.Params["path"] {
				case "secret.txt":
					return hooks.ToolCallResult{Block: true, BlockReason: "Secrets stay secret."}, nil
				case "a.md":
					return hooks.ToolCallResult{Params: map[string]any{"path": "b.md", "content": ev.Params["content"]}}, nil
				}
				return hooks.ToolCallResult{}, nil
			},
			AgentEnd: func(_ context.Context, ev hooks.EndEvent) { ended <- ev },
		},
		hooks.Hook{Name: "slow", BeforeAgentStart: func(ctx context.Context, ev hooks.StartEvent) (hooks.StartResult, error) {
			if ev.SessionKey == "hooks:slow" {
				<-ctx.Done()
				return hooks.StartResult{PrependContext: "too late"}, nil
			}
			return hooks.StartResult{}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })

	cs := newChatServer(t,
		sseToolCalls([2]string{"write", `{"path":"secret.txt","content":"s3cr3t"}`}, [2]string{"write", `{"path":"a.md","content":"hello"}`}),
		sseText("All done."), sseText("Still here."))
	models, profiles := acmeFiles(t, cs.URL)
	root := t.TempDir()
	startMember(t, a.url(), fleet.Config{WorkerID: "w1", User: "worker", Password: a.passwords["worker"],
		ModelsFile: models, AuthProfiles: profiles, DefaultModel: "acme/m1", WorkspaceRoot: root, Env: func(string) string { return "" },
		// 5 s: the hooks that must answer (context, guard) are handlers in
		// this process, and a loaded machine can keep one from answering
		// within a second; the slow hook's run waits it out once.
		Hooks: fleet.HooksConfig{Names: []string{"slow", "context", "guard", "unserved"}, Timeout: 5 * time.Second}})

	alice := a.connectAs(t, "alice")
	live := subscribeEvents(t, alice, session)
	run := sendRaw(t, alice, session, events.Inbound{Text: "write the notes"})
	evs := live.run(t, run)
	var results []string
	for _, ev := range evs {
		if ev.Stream == events.StreamTool && ev.Data.Phase == events.PhaseResult {
			b, _ := json.Marshal(ev.Data.Payload)
			results = append(results, string(b))
		}
	}
	final := evs[len(evs)-1].Data.Result
	if final == nil || final.Payloads[0].Text != "All done." {
		t.Fatalf("final %+v", final)
	}
	if len(results) != 2 || !strings.Contains(results[0], "Secrets stay secret.") {
		t.Fatalf("tool results %q", results)
	}

	cs.mu.Lock()
	first, _ := json.Marshal(cs.requests[0])
	second, _ := json.Marshal(cs.requests[1])
	cs.mu.Unlock()
	if !strings.Contains(string(first), `Hook context: the user is on call.\n\nwrite the notes`) || strings.Contains(string(first), "too late") {
		t.Fatalf("the model's first request: %s", first)
	}
	if !strings.Contains(string(second), "Secrets stay secret.") {
		t.Fatalf("the model did not see the refusal: %s", second)
	}

	tok, _ := events.KeyToken(session)
	for file, want := range map[string]string{"secret.txt": "", "a.md": "", "b.md": "hello"} {
		data, err := os.ReadFile(filepath.Join(root, tok, file))
		if got := string(data); (err == nil) != (want != "") || got != want {
			t.Errorf("%s: %q, %v; want %q", file, got, err, want)
		}
	}
	mu.Lock()
	if strings.Join(calls, " ") != "write:secret.txt:"+session+" write:a.md:"+session {
		t.Errorf("the guard saw %q", calls)
	}
	mu.Unlock()

	select {
	case ev := <-ended:
		if ev.RunID != run || ev.SessionKey != session || ev.Result == nil || ev.Result.Payloads[0].Text != "All done." {
			t.Fatalf("agent_end %+v", ev)
		}
	case <-time.After(callTimeout):
		t.Fatal("no agent_end")
	}
	// A hook that does not answer in time only warns: the run goes on
	// without its context.
	slow := subscribeEvents(t, alice, "hooks:slow")
	run = sendRaw(t, alice, "hooks:slow", events.Inbound{Text: "and now?"})
	if evs := slow.run(t, run); evs[len(evs)-1].Data.Result == nil || evs[len(evs)-1].Data.Result.Meta.Error != nil {
		t.Fatalf("slow hook's run: %+v", evs[len(evs)-1].Data.Result)
	}
	cs.mu.Lock()
	last, _ := json.Marshal(cs.requests[len(cs.requests)-1])
	cs.mu.Unlock()
	if strings.Contains(string(last), "too late") || !strings.Contains(string(last), `Hook context: the user is on call.\n\nand now?`) {
		t.Fatalf("the model's request after a slow hook: %s", last)
	}
	if vs := v.list(); len(vs) > 0 {
		t.Fatalf("the server logged permission violations:\n%s", strings.Join(vs, "\n"))
	}
}
