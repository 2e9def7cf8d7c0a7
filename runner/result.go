package runner

import (
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/provider"
)

// result is the run's result (the reference's, runtime spec §3.3) once
// the loop of model returned out, after d.
func (out *loopOut) result(model provider.Model, sessionID string, d time.Duration) *events.Result {
	res := &events.Result{Payloads: out.payloads, Meta: events.Meta{DurationMs: d.Milliseconds(), Error: out.runErr, Aborted: out.aborted}}
	am := &events.AgentMeta{SessionID: sessionID, Provider: model.Provider, Model: model.ID, CompactionCount: out.compactions,
		Usage: out.usage.total(), LastCallUsage: out.usage.lastCall(), PromptTokens: out.usage.promptTokens()}
	if out.last != nil && out.last.Provider != "" {
		am.Provider, am.Model = out.last.Provider, out.last.Model
	}
	res.Meta.AgentMeta = am
	if out.last != nil {
		res.Meta.StopReason = string(out.last.StopReason)
	}
	if out.yielded {
		// It waits for its sub-agents (the lanes count them: Meta.Waiting).
		res.Meta.StopReason = events.StopYielded
	}
	if len(out.pending) > 0 {
		// The run stopped for the client's tools (hosted client tools,
		// or calls waiting for approval).
		res.Meta.StopReason = "tool_calls"
		res.Meta.PendingToolCalls = out.pending
	}
	return res
}
