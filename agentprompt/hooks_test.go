package agentprompt

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/message"
)

// result is a hook that returns r.
func result(r HookResult) Hook {
	return HookFunc(func(context.Context, HookInput) (HookResult, error) { return r, nil })
}

// warnings collects what RunHooks warns about.
type warnings []error

func (w *warnings) warn(err error) { *w = append(*w, err) }

func TestRunHooksMerge(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	tests := []struct {
		name        string
		hooks       []Hook
		wantPrepend string
		wantSystem  string
		wantWarns   []string // substrings, one per warning
	}{
		{
			name: "no hooks",
		},
		{
			// As in OpenClaw: prepend contexts joined with blank lines,
			// the last system prompt wins, empty fields contribute nothing.
			name: "merge",
			hooks: []Hook{
				result(HookResult{PrependContext: "first", SystemPrompt: "system 1"}),
				result(HookResult{}),
				result(HookResult{PrependContext: "second"}),
				nil, // skipped
				result(HookResult{SystemPrompt: "system 2"}),
				result(HookResult{PrependContext: "third\n"}),
			},
			wantPrepend: "first\n\nsecond\n\nthird\n",
			wantSystem:  "system 2",
		},
		{
			name: "a failing hook only warns",
			hooks: []Hook{
				result(HookResult{PrependContext: "a"}),
				HookFunc(func(context.Context, HookInput) (HookResult, error) {
					return HookResult{PrependContext: "ignored", SystemPrompt: "ignored"}, errBoom
				}),
				result(HookResult{PrependContext: "b"}),
			},
			wantPrepend: "a\n\nb",
			wantWarns:   []string{"agentprompt: before-start hook 2 (agentprompt.HookFunc): boom"},
		},
		{
			name: "a panicking hook only warns, with its stack",
			hooks: []Hook{
				HookFunc(func(context.Context, HookInput) (HookResult, error) { panic("kaboom") }),
				result(HookResult{SystemPrompt: "s"}),
			},
			wantSystem: "s",
			wantWarns:  []string{"hook 1 (agentprompt.HookFunc): panic: kaboom\ngoroutine "},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, ctx := range []context.Context{context.Background(), t.Context()} {
				var w warnings
				prepend, system := RunHooks(ctx, tc.hooks, HookInput{}, w.warn)
				if prepend != tc.wantPrepend || system != tc.wantSystem {
					t.Errorf("RunHooks = %q, %q; want %q, %q", prepend, system, tc.wantPrepend, tc.wantSystem)
				}
				if len(w) != len(tc.wantWarns) {
					t.Fatalf("warnings = %v, want %d", w, len(tc.wantWarns))
				}
				for i, want := range tc.wantWarns {
					if !strings.Contains(w[i].Error(), want) {
						t.Errorf("warning %d = %v, want it to contain %q", i, w[i], want)
					}
				}
				if len(w) > 0 && errors.Is(w[0], errBoom) != strings.Contains(tc.name, "failing") {
					t.Errorf("errors.Is(%v, errBoom) wrong", w[0])
				}
			}
		})
	}
}

func TestRunHooksInput(t *testing.T) {
	t.Parallel()
	in := HookInput{
		Prompt:       "hello",
		Messages:     []message.Message{{Role: message.RoleUser}},
		SystemPrompt: "system",
		Workspace:    "/ws",
		AgentID:      "main",
		SessionKey:   "session:main",
		RunID:        "run-1",
	}
	var got HookInput
	RunHooks(t.Context(), []Hook{HookFunc(func(_ context.Context, in HookInput) (HookResult, error) {
		got = in
		return HookResult{}, nil
	})}, in, nil)
	if got.Prompt != in.Prompt || len(got.Messages) != 1 || got.SystemPrompt != in.SystemPrompt ||
		got.Workspace != in.Workspace || got.AgentID != in.AgentID || got.SessionKey != in.SessionKey || got.RunID != in.RunID {
		t.Errorf("hook saw %+v, want %+v", got, in)
	}
}

// TestRunHooksBoundedByContext checks that a hook ignoring its context does
// not hold the run: RunHooks returns when ctx is done, keeps what finished
// hooks contributed and does not start the rest.
func TestRunHooksBoundedByContext(t *testing.T) {
	t.Parallel()
	errStop := errors.New("run stopped")
	ctx, cancel := context.WithCancelCause(t.Context())
	started, release := make(chan struct{}), make(chan struct{})
	finished := make(chan struct{})
	t.Cleanup(func() {
		close(release) // let the abandoned hook end
		<-finished
	})
	ranLast := false
	hooks := []Hook{
		result(HookResult{PrependContext: "kept"}),
		HookFunc(func(context.Context, HookInput) (HookResult, error) {
			defer close(finished)
			close(started)
			<-release // ignores ctx
			return HookResult{PrependContext: "too late"}, nil
		}),
		HookFunc(func(context.Context, HookInput) (HookResult, error) {
			ranLast = true
			return HookResult{}, nil
		}),
	}
	go func() {
		<-started
		cancel(errStop)
	}()
	var w warnings
	prepend, system := RunHooks(ctx, hooks, HookInput{}, w.warn)
	if prepend != "kept" || system != "" {
		t.Errorf("RunHooks = %q, %q; want %q, \"\"", prepend, system, "kept")
	}
	if ranLast {
		t.Error("a hook ran after the context was done")
	}
	// One warning for the abandoned hook, one for the hook not run.
	if len(w) != 2 || !errors.Is(w[0], errStop) || !strings.Contains(w[0].Error(), "hook 2") ||
		!errors.Is(w[1], errStop) || !strings.Contains(w[1].Error(), "hooks 3 to 3 not run") {
		t.Errorf("warnings = %v", w)
	}
}

// TestRunHooksDoneContext checks that no hook starts once ctx is done.
func TestRunHooksDoneContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	ran := false
	var w warnings
	prepend, system := RunHooks(ctx, []Hook{HookFunc(func(context.Context, HookInput) (HookResult, error) {
		ran = true
		return HookResult{PrependContext: "x"}, nil
	})}, HookInput{}, w.warn)
	if ran || prepend != "" || system != "" {
		t.Errorf("ran=%t, RunHooks = %q, %q", ran, prepend, system)
	}
	if len(w) != 1 || !errors.Is(w[0], context.Canceled) {
		t.Errorf("warnings = %v", w)
	}
}

// TestRunHooksContextAware checks a well-behaved hook that returns ctx's
// error when the run is cancelled.
func TestRunHooksContextAware(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	hook := HookFunc(func(ctx context.Context, _ HookInput) (HookResult, error) {
		cancel()
		<-ctx.Done()
		return HookResult{}, ctx.Err()
	})
	var w warnings
	RunHooks(ctx, []Hook{hook}, HookInput{}, w.warn)
	if len(w) != 1 || !errors.Is(w[0], context.Canceled) {
		t.Errorf("warnings = %v", w)
	}
}

func TestJoinPrompt(t *testing.T) {
	t.Parallel()
	if got := JoinPrompt("", "hi"); got != "hi" {
		t.Errorf("no context: %q", got)
	}
	if got := JoinPrompt("ctx", "hi"); got != "ctx\n\nhi" {
		t.Errorf("with context: %q", got)
	}
}
