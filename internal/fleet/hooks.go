package fleet

import (
	"context"
	"fmt"

	"github.com/lanefleet/lanefleet/hooks"
	"github.com/lanefleet/lanefleet/runner"
)

// startHooks discovers the listed hooks and plugs them into the runner's
// configuration.
func (m *Member) startHooks(ctx context.Context, rcfg *runner.Config) error {
	hc := m.cfg.Hooks
	var err error
	if m.Hooks, err = hooks.NewRegistry(m.Conn, hooks.Config{Names: hc.Names, Timeout: hc.Timeout, ToolFailure: hc.ToolFailure, Logger: m.cfg.Logger}); err != nil {
		return fmt.Errorf("fleet: --hooks: %w", err)
	}
	// Know the hooks served now before the first turn; Run refreshes.
	if err := m.Hooks.Refresh(ctx); err != nil {
		m.log.Warn().Err(err).Msg("hooks: first discovery failed")
	}
	rcfg.Hooks = maskStartHooks(m.Hooks.StartHooks(), m.cfg.Redactor)
	rcfg.ToolHook = maskingToolHook{ToolHook: hookAdapter{m.Hooks}, red: m.cfg.Redactor}
	rcfg.EndHook = hookAdapter{m.Hooks}
	return nil
}

// hookAdapter is the runner's ToolHook and EndHook over the run hooks
// served over NATS (package hooks, which does not know the runner).
type hookAdapter struct{ r *hooks.Registry }

// BeforeToolCall implements runner.ToolHook.
func (h hookAdapter) BeforeToolCall(ctx context.Context, in runner.ToolHookInput) (runner.ToolHookResult, error) {
	v, err := h.r.BeforeToolCall(ctx, hooks.ToolCall{SessionKey: in.SessionKey, RunID: in.RunID, ToolCallID: in.ToolCallID,
		ToolName: in.ToolName, Args: in.Args})
	return runner.ToolHookResult{Block: v.Block, Reason: v.Reason, Args: v.Args}, err
}

// AgentEnd implements runner.EndHook.
func (h hookAdapter) AgentEnd(in runner.EndHookInput) {
	h.r.AgentEnd(hooks.RunEnd{SessionKey: in.SessionKey, RunID: in.RunID, Attempt: in.Attempt, Result: in.Result})
}

var (
	_ runner.ToolHook = hookAdapter{}
	_ runner.EndHook  = hookAdapter{}
)
