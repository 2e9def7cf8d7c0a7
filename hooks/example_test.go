package hooks_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/agentprompt"
	"github.com/lanefleet/lanefleet/hooks"
	"github.com/lanefleet/lanefleet/internal/embedded"
)

// One process serves a hook that adds context to every prompt and keeps
// the exec tool away from rm; a worker lists it by name and calls it.
func Example() {
	dir, _ := os.MkdirTemp("", "hooks-example")
	defer os.RemoveAll(dir)
	no := false
	srv, err := embedded.Start(embedded.Config{Name: "example", DataDir: dir, SyncAlways: &no})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Shutdown()

	// The process serving the hook.
	hookConn, _ := nats.Connect(srv.ClientURL())
	defer hookConn.Close()
	svc, err := hooks.Serve(hookConn, hooks.ServeConfig{}, hooks.Hook{
		Name: "guard",
		BeforeAgentStart: func(ctx context.Context, ev hooks.StartEvent) (hooks.StartResult, error) {
			return hooks.StartResult{PrependContext: "The user is on call this week."}, nil
		},
		BeforeToolCall: func(ctx context.Context, ev hooks.ToolCallEvent) (hooks.ToolCallResult, error) {
			if cmd, _ := ev.Params["command"].(string); ev.ToolName == "exec" && strings.Contains(cmd, "rm ") {
				return hooks.ToolCallResult{Block: true, BlockReason: "Deleting files is not allowed here."}, nil
			}
			return hooks.ToolCallResult{}, nil
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer svc.Stop()

	// A worker (--hooks guard).
	workerConn, _ := nats.Connect(srv.ClientURL())
	defer workerConn.Close()
	reg, err := hooks.NewRegistry(workerConn, hooks.Config{Names: []string{"guard"}, Window: 100 * time.Millisecond})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Discovery listens for one window; a busy machine can answer after
	// it, and the next refresh finds the hook (a worker refreshes on its
	// own, every RefreshInterval).
	for !reg.Serves("guard", hooks.BeforeToolCall) {
		if err := reg.Refresh(ctx); err != nil {
			fmt.Println(err)
			return
		}
	}
	prepend, _ := agentprompt.RunHooks(ctx, reg.StartHooks(), agentprompt.HookInput{Prompt: "Anything new?"}, nil)
	fmt.Println(agentprompt.JoinPrompt(prepend, "Anything new?"))
	d, _ := reg.BeforeToolCall(ctx, hooks.ToolCall{ToolName: "exec", Args: map[string]any{"command": "rm -rf /srv"}})
	fmt.Println(d.Block, d.Reason)
	// Output:
	// The user is on call this week.
	//
	// Anything new?
	// true Deleting files is not allowed here.
}
