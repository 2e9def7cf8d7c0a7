package hooks_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/lanefleet/lanefleet/agentprompt"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/hooks"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// setup starts a server and returns a hook-side and a worker-side
// connection.
func setup(t *testing.T) (hookConn, workerConn *nats.Conn) {
	t.Helper()
	s := natstest.Start(t)
	return natstest.Connect(t, s.URL), natstest.Connect(t, s.URL)
}

func serve(t *testing.T, nc *nats.Conn, name string, h hooks.Hook) *hooks.Service {
	t.Helper()
	h.Name = name
	svc, err := hooks.Serve(nc, hooks.ServeConfig{}, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	return svc
}

// registry discovers cfg's hooks; it refreshes until each hook named in
// wait is found serving kind (a busy machine can answer after a window,
// which a worker's Run rides out the same way), for a minute at most.
func registry(t *testing.T, nc *nats.Conn, cfg hooks.Config, kind hooks.Kind, wait ...string) *hooks.Registry {
	t.Helper()
	if cfg.Window == 0 {
		cfg.Window = 200 * time.Millisecond
	}
	r, err := hooks.NewRegistry(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if err := r.Refresh(t.Context()); err != nil {
			t.Fatal(err)
		}
		missing := slices.DeleteFunc(slices.Clone(wait), func(n string) bool { return r.Serves(n, kind) })
		if len(missing) == 0 {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("hooks %q not found serving %s", missing, kind)
		}
	}
}

// TestStartHooks: listed hooks contribute in listed order (contexts joined,
// the last system prompt wins); an unlisted hook is never called; a failing
// or slow hook warns and contributes nothing.
func TestStartHooks(t *testing.T) {
	t.Parallel()
	hc, wc := setup(t)
	var mu sync.Mutex
	var calls []string
	start := func(name, ctxText, sys string, err error) hooks.Hook {
		return hooks.Hook{BeforeAgentStart: func(ctx context.Context, ev hooks.StartEvent) (hooks.StartResult, error) {
			mu.Lock()
			calls = append(calls, name+":"+ev.Prompt+":"+ev.SessionKey)
			mu.Unlock()
			if name == "slow" {
				<-ctx.Done()
				return hooks.StartResult{PrependContext: "too late"}, ctx.Err()
			}
			return hooks.StartResult{PrependContext: ctxText, SystemPrompt: sys}, err
		}}
	}
	serve(t, hc, "first", start("first", "ctx one", "sys one", nil))
	serve(t, hc, "second", start("second", "ctx two", "sys two", nil))
	serve(t, hc, "failing", start("failing", "never", "never", errors.New("boom")))
	serve(t, hc, "slow", start("slow", "", "", nil))
	serve(t, hc, "unlisted", start("unlisted", "never", "never", nil))

	r := registry(t, wc, hooks.Config{Names: []string{"second", "failing", "slow", "first", "missing"}, Timeout: time.Second},
		hooks.BeforeAgentStart, "second", "failing", "slow", "first")
	var warns []string
	prepend, sys := agentprompt.RunHooks(t.Context(), r.StartHooks(), agentprompt.HookInput{Prompt: "hi", SessionKey: "s1"},
		func(err error) { warns = append(warns, err.Error()) })
	if prepend != "ctx two\n\nctx one" || sys != "sys one" {
		t.Fatalf("prepend %q, system %q", prepend, sys)
	}
	if len(warns) != 2 || !strings.Contains(warns[0], "boom") || !strings.Contains(warns[1], "timed out") {
		t.Fatalf("warnings %q", warns)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(calls, ",") != "second:hi:s1,failing:hi:s1,slow:hi:s1,first:hi:s1" {
		t.Fatalf("calls %v", calls)
	}
}

// TestBeforeToolCall: allow, block (with and without a reason), rewrite
// chained through the listed hooks in order.
func TestBeforeToolCall(t *testing.T) {
	t.Parallel()
	hc, wc := setup(t)
	serve(t, hc, "rewrite", hooks.Hook{BeforeToolCall: func(_ context.Context, ev hooks.ToolCallEvent) (hooks.ToolCallResult, error) {
		if ev.ToolName == "write" {
			return hooks.ToolCallResult{Params: map[string]any{"path": "safe/" + ev.Params["path"].(string)}}, nil
		}
		return hooks.ToolCallResult{}, nil
	}})
	serve(t, hc, "deny", hooks.Hook{BeforeToolCall: func(_ context.Context, ev hooks.ToolCallEvent) (hooks.ToolCallResult, error) {
		switch {
		case ev.ToolName == "exec":
			return hooks.ToolCallResult{Block: true, BlockReason: "  no shell  "}, nil
		case ev.ToolName == "read":
			return hooks.ToolCallResult{Block: true}, nil
		case ev.ToolName == "write" && !strings.HasPrefix(ev.Params["path"].(string), "safe/"):
			return hooks.ToolCallResult{Block: true, BlockReason: "saw the model's path, not the rewritten one"}, nil
		}
		return hooks.ToolCallResult{}, nil
	}})
	r := registry(t, wc, hooks.Config{Names: []string{"rewrite", "deny"}}, hooks.BeforeToolCall, "rewrite", "deny")
	for _, tc := range []struct {
		tool   string
		block  bool
		reason string
		args   map[string]any
	}{
		{"edit", false, "", nil},
		{"exec", true, "no shell", nil},
		{"read", true, "Tool call blocked by hook deny.", nil},
		{"write", false, "", map[string]any{"path": "safe/a.md"}},
	} {
		d, err := r.BeforeToolCall(t.Context(), hooks.ToolCall{ToolName: tc.tool, ToolCallID: "c1", Args: map[string]any{"path": "a.md"}})
		if err != nil || d.Block != tc.block || d.Reason != tc.reason || (tc.args == nil) != (d.Args == nil) || (tc.args != nil && d.Args["path"] != tc.args["path"]) {
			t.Errorf("%s: %+v, %v", tc.tool, d, err)
		}
	}
}

// TestToolCallFailure: a before_tool_call hook that cannot decide blocks
// the call by default and lets it through with FailOpen — whether it is
// gone (no responders), slow, failing, or hostile.
func TestToolCallFailure(t *testing.T) {
	t.Parallel()
	hc, wc := setup(t)
	gone := serve(t, hc, "gone", hooks.Hook{BeforeToolCall: func(context.Context, hooks.ToolCallEvent) (hooks.ToolCallResult, error) {
		return hooks.ToolCallResult{}, nil
	}})
	serve(t, hc, "slow", hooks.Hook{BeforeToolCall: func(ctx context.Context, _ hooks.ToolCallEvent) (hooks.ToolCallResult, error) {
		<-ctx.Done()
		return hooks.ToolCallResult{}, nil
	}})
	serve(t, hc, "failing", hooks.Hook{BeforeToolCall: func(context.Context, hooks.ToolCallEvent) (hooks.ToolCallResult, error) {
		panic("bug")
	}})
	hostile := map[string]string{
		"big":    `{"blockReason":"` + strings.Repeat("x", hooks.MaxReplyBytes) + `"}`,
		"deep":   `{"params":{"a":` + strings.Repeat("[", hooks.MaxDepth+1) + strings.Repeat("]", hooks.MaxDepth+1) + `}}`,
		"params": `{"params":"rm -rf /"}`,
		"junk":   `not json`,
		"two":    `{} {"block":true}`,
	}
	rawHook(t, hc, hostile)

	type reg struct {
		name string
		mode hooks.FailMode
		r    *hooks.Registry
	}
	var regs []reg
	for _, name := range []string{"gone", "slow", "failing", "big", "deep", "params", "junk", "two"} {
		for _, mode := range []hooks.FailMode{hooks.FailClosed, hooks.FailOpen} {
			r, err := hooks.NewRegistry(wc, hooks.Config{Names: []string{name}, Timeout: 300 * time.Millisecond, ToolFailure: mode, Window: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			regs = append(regs, reg{name, mode, r})
		}
	}
	// Discover concurrently: each refresh waits out its window. Kinds
	// are kept, so a reply a busy machine delays past the window is
	// found by the next refresh, as a worker's Run does.
	var wg sync.WaitGroup
	errs := make([]error, len(regs))
	for i, g := range regs {
		wg.Go(func() {
			for range 10 {
				if errs[i] = g.r.Refresh(t.Context()); errs[i] != nil || g.r.Serves(g.name, hooks.BeforeToolCall) {
					return
				}
			}
		})
	}
	wg.Wait()
	for i, g := range regs {
		if errs[i] != nil || !g.r.Serves(g.name, hooks.BeforeToolCall) {
			t.Fatalf("%s not discovered: %v", g.name, errs[i])
		}
	}
	if err := gone.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, g := range regs {
		if g.name == "gone" {
			if err := g.r.Refresh(t.Context()); err != nil { // known kinds are kept
				t.Fatal(err)
			}
		}
		d, err := g.r.BeforeToolCall(t.Context(), hooks.ToolCall{ToolName: "exec", Args: map[string]any{"command": "ls"}})
		if err != nil {
			t.Fatal(err)
		}
		if d.Block != (g.mode == hooks.FailClosed) || d.Args != nil {
			t.Errorf("%s, fail %s: %+v", g.name, g.mode, d)
		}
		if d.Block && !strings.Contains(d.Reason, "hook "+g.name+" that must check it could not") {
			t.Errorf("%s: reason %q", g.name, d.Reason)
		}
	}
}

// rawHook serves hooks named by replies' keys whose before_tool_call
// endpoint answers with the given raw bytes.
func rawHook(t *testing.T, nc *nats.Conn, replies map[string]string) {
	t.Helper()
	for name, body := range replies {
		svc, err := micro.AddService(nc, micro.Config{Name: hooks.ServiceName, Version: "1.0.0"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svc.Stop() })
		err = svc.AddEndpoint(string(hooks.BeforeToolCall), micro.HandlerFunc(func(req micro.Request) { _ = req.Respond([]byte(body)) }),
			micro.WithEndpointSubject(hooks.Subject(name, hooks.BeforeToolCall)), micro.WithEndpointMetadata(map[string]string{hooks.MetaHook: name, hooks.MetaKind: string(hooks.BeforeToolCall)}))
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestDiscoveryRefuses: an endpoint claiming a listed hook on another
// subject, or of an unknown kind, is not used.
func TestDiscoveryRefuses(t *testing.T) {
	t.Parallel()
	hc, wc := setup(t)
	svc, err := micro.AddService(hc, micro.Config{Name: hooks.ServiceName, Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	nop := micro.HandlerFunc(func(req micro.Request) { _ = req.Respond([]byte(`{}`)) })
	_ = svc.AddEndpoint(string(hooks.BeforeToolCall), nop, micro.WithEndpointSubject("agent.tool.exec"), micro.WithEndpointMetadata(map[string]string{hooks.MetaHook: "guard", hooks.MetaKind: string(hooks.BeforeToolCall)}))
	_ = svc.AddEndpoint("after_everything", nop, micro.WithEndpointSubject("agent.hook.guard.after_everything"), micro.WithEndpointMetadata(map[string]string{hooks.MetaHook: "guard", hooks.MetaKind: "after_everything"}))
	r := registry(t, wc, hooks.Config{Names: []string{"guard"}}, hooks.BeforeToolCall)
	for _, k := range hooks.Kinds() {
		if r.Serves("guard", k) {
			t.Fatalf("guard serves %s", k)
		}
	}
	if _, err := hooks.NewRegistry(wc, hooks.Config{Names: []string{"a.b"}}); err == nil {
		t.Fatal("a hook name with a dot was accepted")
	}
	if _, err := hooks.NewRegistry(wc, hooks.Config{Names: []string{"a", "a"}}); err == nil {
		t.Fatal("a repeated hook was accepted")
	}
	if _, err := hooks.NewRegistry(wc, hooks.Config{ToolFailure: "maybe"}); err == nil {
		t.Fatal("an unknown fail mode was accepted")
	}
}

// TestAgentEnd: each listed agent_end hook gets the run's result without
// a reply; a result too large for one message goes cut.
func TestAgentEnd(t *testing.T) {
	t.Parallel()
	hc, wc := setup(t)
	got := make(chan hooks.EndEvent, 4)
	serve(t, hc, "audit", hooks.Hook{AgentEnd: func(_ context.Context, ev hooks.EndEvent) { got <- ev }})
	r := registry(t, wc, hooks.Config{Names: []string{"audit"}}, hooks.AgentEnd, "audit")
	r.AgentEnd(hooks.RunEnd{SessionKey: "s", RunID: "9", Attempt: 2, Result: &events.Result{Payloads: []events.Payload{{Text: "done"}}}})
	ev := <-got
	if ev.Hook != "audit" || ev.RunID != "9" || ev.Attempt != 2 || ev.Truncated || ev.Result.Payloads[0].Text != "done" {
		t.Fatalf("event %+v", ev)
	}
	huge := strings.Repeat("é", int(wc.MaxPayload()))
	r.AgentEnd(hooks.RunEnd{RunID: "10", Result: &events.Result{Payloads: []events.Payload{{Text: huge}, {Text: "tail"}}}})
	ev = <-got
	if ev.RunID != "10" || !ev.Truncated || len(ev.Result.Payloads) != 2 || !strings.HasSuffix(ev.Result.Payloads[0].Text, "…") || ev.Result.Payloads[1].Text != "tail" {
		t.Fatalf("large event: truncated %v, payloads %d", ev.Truncated, len(ev.Result.Payloads))
	}
}
