package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// toolSource gives each run the built-in tools in its session's workspace
// (<root>/<lane token>) and the remote tools the fleet offers over NATS.
type toolSource struct {
	root   string           // workspaces root; "" = no built-in tools
	env    []string         // the exact environment of exec'd commands
	remote *remote.Registry // nil = no remote tools
}

// Tools implements runner.ToolSource.
func (s *toolSource) Tools(_ context.Context, in runner.Input) (tools.Set, error) {
	var list tools.List
	if s.remote != nil {
		for _, t := range s.remote.Tools() {
			list = append(list, withRun{t, remote.RunInfo{SessionKey: in.SessionKey, RunID: in.RunID}})
		}
	}
	if s.root != "" {
		tok, err := events.KeyToken(in.SessionKey)
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(s.root, tok)
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("fleet: workspace %s: %w", dir, err)
		}
		env := append([]string{"HOME=" + dir, "PWD=" + dir}, s.env...)
		builtin, err := tools.Builtin(tools.Workspace{Dir: dir, Env: env})
		if err != nil {
			return nil, err
		}
		// Built-in tools win over remote tools of the same name.
		list = append(list, builtin...)
	}
	return list, nil
}

// withRun tells a remote tool which run calls it.
type withRun struct {
	tools.Tool
	ri remote.RunInfo
}

func (w withRun) Spec() provider.Tool { return w.Tool.Spec() }

func (w withRun) Call(ctx context.Context, c tools.Call) (tools.Result, error) {
	return w.Tool.Call(remote.WithRunInfo(ctx, w.ri), c)
}
