package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/tools"
)

// toolHookFunc adapts a function to ToolHook.
type toolHookFunc func(ctx context.Context, in ToolHookInput) (ToolHookResult, error)

func (f toolHookFunc) BeforeToolCall(ctx context.Context, in ToolHookInput) (ToolHookResult, error) {
	return f(ctx, in)
}

// endLog records AgentEnd calls.
type endLog struct {
	mu   sync.Mutex
	ends []EndHookInput
}

func (l *endLog) AgentEnd(in EndHookInput) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ends = append(l.ends, in)
}

// TestToolAndEndHooks: a ToolHook sees each worker-tool call and may block
// it (the model gets the reason), rewrite its arguments (the tool runs with
// them, the transcript keeps the model's call) or fail (the call runs as
// made); the EndHook is told every run's result once, including a run
// that fails before any attempt.
func TestToolAndEndHooks(t *testing.T) {
	t.Parallel()
	const script = `#script {"replies":[{"toolCalls":[{"id":"w1","name":"write","arguments":{"path":"a.md","content":"hi"}}]},{"text":"Done."}]}`
	for _, tc := range []struct {
		name     string
		hook     toolHookFunc
		file     string // the file the call wrote, "" = none
		isError  bool
		wantText string
	}{
		{"allow", func(context.Context, ToolHookInput) (ToolHookResult, error) { return ToolHookResult{}, nil }, "a.md", false, ""},
		{"block with a reason", func(context.Context, ToolHookInput) (ToolHookResult, error) {
			return ToolHookResult{Block: true, Reason: "no writing on Sundays"}, nil
		}, "", true, "no writing on Sundays"},
		{"block without a reason", func(context.Context, ToolHookInput) (ToolHookResult, error) {
			return ToolHookResult{Block: true}, nil
		}, "", true, TextHookBlocked},
		{"rewrite", func(_ context.Context, in ToolHookInput) (ToolHookResult, error) {
			return ToolHookResult{Args: map[string]any{"path": "b.md", "content": in.Args["content"]}}, nil
		}, "b.md", false, ""},
		{"failing hook", func(context.Context, ToolHookInput) (ToolHookResult, error) {
			return ToolHookResult{Block: true}, errors.New("hook down")
		}, "a.md", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			set, err := tools.Builtin(tools.Workspace{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			var seen []ToolHookInput
			ends := &endLog{}
			hook := func(ctx context.Context, in ToolHookInput) (ToolHookResult, error) {
				seen = append(seen, in)
				return tc.hook(ctx, in)
			}
			cfg := Config{DefaultModel: "scripted/script", Resolver: multiResolver{}, Tools: workspaceTools{set},
				ToolHook: toolHookFunc(hook), EndHook: ends}
			in := events.Inbound{Text: script}
			r, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			out, err := r.Run(t.Context(), Input{SessionKey: "s", RunID: "r7", Attempt: 2, Inbound: &in}, &sink{})
			if err != nil {
				t.Fatal(err)
			}
			if len(seen) != 1 || seen[0].ToolName != "write" || seen[0].ToolCallID != "w1" || seen[0].RunID != "r7" || seen[0].Args["path"] != "a.md" {
				t.Fatalf("hook saw %+v", seen)
			}
			for _, f := range []string{"a.md", "b.md"} {
				_, err := os.Stat(filepath.Join(dir, f))
				if (err == nil) != (f == tc.file) {
					t.Fatalf("%s written = %v, want only %q", f, err == nil, tc.file)
				}
			}
			var res, call *message.Message
			for _, e := range out.Entries {
				if m := e.Message; m != nil && m.Role == message.RoleToolResult {
					res = m
				} else if m != nil && m.Role == message.RoleAssistant && len(m.ToolCalls()) > 0 {
					call = m
				}
			}
			if res == nil || res.IsError != tc.isError || !strings.Contains(res.Content.Text(), tc.wantText) {
				t.Fatalf("result %+v", res)
			}
			if call == nil || call.ToolCalls()[0].Arguments["path"] != "a.md" {
				t.Fatalf("the transcript's call = %+v, want the model's arguments", call)
			}
			if len(ends.ends) != 1 || ends.ends[0].RunID != "r7" || ends.ends[0].SessionKey != "s" || ends.ends[0].Attempt != 2 ||
				ends.ends[0].Result != out.Result || out.Result.Payloads[0].Text != "Done." {
				t.Fatalf("end hook got %+v", ends.ends)
			}
		})
	}

	t.Run("end of a run that fails before any attempt", func(t *testing.T) {
		t.Parallel()
		ends := &endLog{}
		r, err := New(Config{DefaultModel: "scripted/echo", Resolver: multiResolver{}, EndHook: ends})
		if err != nil {
			t.Fatal(err)
		}
		out, err := r.Run(t.Context(), Input{RunID: "r1", Inbound: &events.Inbound{Text: "hi", Model: "no-provider"}}, &sink{})
		if err != nil {
			t.Fatal(err)
		}
		if out.Result.Meta.Error == nil || len(ends.ends) != 1 || ends.ends[0].Result != out.Result {
			t.Fatalf("result %+v, ends %+v", out.Result.Meta, ends.ends)
		}
	})
}
