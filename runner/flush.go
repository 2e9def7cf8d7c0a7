package runner

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/sanitize"
	"github.com/lanefleet/lanefleet/tools"
)

// The pre-compaction memory flush (OpenClaw's compaction.memoryFlush):
// before a threshold compaction summarises the older history away, the
// model gets one silent agentic turn to write what must survive into the
// workspace's memory files (MEMORY.md, memory/YYYY-MM-DD.md).
//
// The flush runs on a detached view of the context: its prompt, replies
// and tool results never enter the transcript and none of its deltas or
// tool events are emitted; only its file writes stay. The event stream
// shows it as one compaction event of phase PhaseMemoryFlush (Data.Text
// the number of tool calls it made, Data.Error when a call failed) just
// before the compaction's start. Its usage counts in the run's.

// PhaseMemoryFlush is the phase of the compaction event that says a
// memory flush ran before the compaction that follows it.
const PhaseMemoryFlush = "memory_flush"

// MemoryFlushRounds bounds the model calls of one memory flush.
const MemoryFlushRounds = 4

// memoryFlushTools are the tools a flush may call: reading and writing
// workspace files and the memory tools. Others get an error result.
var memoryFlushTools = []string{"read", "write", "edit", "memory_search", "memory_get"}

// memoryFlushSystem is added to the run's system prompt for the flush.
const memoryFlushSystem = "Pre-compaction memory flush. The session is near its context limit and older messages are about to be compacted away. " +
	"This is a silent housekeeping turn: nothing you write here reaches the user."

// memoryFlushPrompt is the flush's user message; %s is today's date.
const memoryFlushPrompt = "Pre-compaction memory flush: store durable memories now. Write anything worth keeping from this conversation " +
	"(decisions, facts, open tasks, preferences) to memory/%s.md in the workspace (create memory/ if needed; if the file exists, append to it, " +
	"do not overwrite it), or to MEMORY.md for lasting facts. If there is nothing to store, reply with NO_REPLY. Reply with NO_REPLY when done."

// flushDue reports whether the run flushes memory before a threshold
// compaction: Config.MemoryFlush is on, the run offers its worker's write
// tool (not the client's, not behind approval), and it has not flushed
// for this compaction cycle yet.
func (ru *run) flushDue() bool {
	if !ru.r.cfg.MemoryFlush || ru.flushed || ru.tools == nil || ru.client["write"] || ru.needsApproval("write") {
		return false
	}
	if _, ok := ru.tools.Lookup("write"); !ok {
		return false
	}
	return slices.ContainsFunc(ru.specs, func(t provider.Tool) bool { return t.Name == "write" })
}

// memoryFlush runs the flush turn on ctxMsgs: at most MemoryFlushRounds
// model calls offered the memoryFlushTools, their calls run, and nothing
// kept but the files written, within a CompactionTimeout of its own. A
// failed call ends it; the compaction runs all the same. It is not
// journaled: a re-run of the turn flushes again.
func (ru *run) memoryFlush(ctx context.Context, req attemptReq, ctxMsgs []message.Message, out *attemptOut) {
	ru.flushed = true
	ctx, cancel := context.WithTimeout(ctx, ru.r.cfg.CompactionTimeout)
	defer cancel()
	var specs []provider.Tool
	for _, t := range ru.specs {
		if slices.Contains(memoryFlushTools, t.Name) && !ru.client[t.Name] && !ru.needsApproval(t.Name) {
			specs = append(specs, t)
		}
	}
	now := ru.r.cfg.Now()
	msgs := append(slices.Clip(ctxMsgs), message.User(fmt.Sprintf(memoryFlushPrompt, now.Format("2006-01-02")), now.UnixMilli()))
	prov := admitted(ru.r.cfg, ru.sink, ru.in.SessionKey, req.profile, req.prov)
	calls, errText := 0, ""
	for range MemoryFlushRounds {
		preq := &provider.Request{Model: req.model, SystemPrompt: ru.system + "\n\n" + memoryFlushSystem, Messages: ru.prepare(req.model, msgs),
			Tools: specs, Thinking: req.thinking, APIKey: req.key, SessionID: ru.in.SessionID}
		am, err := prov.Stream(ctx, preq, func(provider.Event) {})
		ru.addUsage(out, am.Usage)
		if err != nil || am.StopReason == message.StopError || am.StopReason == message.StopAborted || ctx.Err() != nil {
			errText = am.ErrorMessage
			if err != nil {
				errText = err.Error()
			}
			errText = cmp.Or(errText, "aborted")
			break
		}
		sanitize.TrimCallNames(&am)
		tc := am.ToolCalls()
		if am.StopReason != message.StopToolUse || len(tc) == 0 {
			break
		}
		msgs = append(msgs, am)
		for _, c := range tc {
			calls++
			res := ru.callFlushTool(ctx, c, specs)
			msgs = append(msgs, message.Message{Role: message.RoleToolResult, ToolCallID: c.ID, ToolName: c.Name,
				Content: message.BlocksOf(res.Content...), IsError: res.IsError, Timestamp: now.UnixMilli()})
		}
	}
	if errText != "" {
		ru.r.cfg.Logger.Warn().Str("run_id", ru.in.RunID).Str("error", errText).Msg("memory flush failed; compacting all the same")
	}
	ru.sink.Emit(events.StreamCompaction, events.EventData{Phase: PhaseMemoryFlush, Text: fmt.Sprint(calls), Error: errText})
}

// callFlushTool runs one call of a flush: a tool it was not offered is
// refused. The flush's tools (files and memory) send no updates, so the
// call emits no events.
func (ru *run) callFlushTool(ctx context.Context, c message.Block, specs []provider.Tool) tools.Result {
	if !slices.ContainsFunc(specs, func(t provider.Tool) bool { return t.Name == c.Name }) {
		return tools.ErrorResult(fmt.Sprintf("Tool %s is not available during the memory flush", c.Name))
	}
	return ru.callTool(ctx, c)
}
