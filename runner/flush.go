package runner

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/sanitize"
	"github.com/lanefleet/lanefleet/sessionfile"
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

// CustomMemoryFlush is the customType of the transcript entry a memory
// flush leaves (a pi "custom" entry, which no model sees): the session
// flushed in the compaction cycle it is in, the one since the latest
// compaction on its branch. Its data names that compaction
// ("compactionId", "" before the first) and the run that flushed.
const CustomMemoryFlush = "memory-flush"

// MemorySyncer is a ToolSource whose runs' memory files are kept
// somewhere other than the run's workspace (the fleet's agent workspaces
// in the object store). SyncMemory puts what a memory flush wrote there
// before the flush's tool results are journaled, so a re-run of the turn
// that replays the flush (instead of flushing again) finds its writes.
// An error only warns.
type MemorySyncer interface {
	SyncMemory(ctx context.Context, in Input) error
}

// flushDue reports whether the run flushes memory before a threshold
// compaction: Config.MemoryFlush is on, the run offers its worker's write
// tool (not the client's, not behind approval), and neither the run nor
// the session flushed in this compaction cycle yet (flushedThisCycle). A
// run flushes once at most, as OpenClaw's reply run does: a second
// attempt that compacts again (after a failover) does not flush again.
func (ru *run) flushDue() bool {
	if !ru.r.cfg.MemoryFlush || ru.flushed || ru.tools == nil || ru.client["write"] || ru.needsApproval("write") {
		return false
	}
	if _, ok := ru.tools.Lookup("write"); !ok {
		return false
	}
	if !slices.ContainsFunc(ru.specs, func(t provider.Tool) bool { return t.Name == "write" }) {
		return false
	}
	flushed, _ := flushedThisCycle(sessionfile.Branch(ru.entries()))
	return !flushed
}

// flushedThisCycle reports whether a memory-flush entry follows the
// latest compaction on branch (a session's path from its root to its
// leaf), and returns the id of that compaction ("" when there is none):
// OpenClaw's one flush per compaction cycle (its memoryFlushCompactionCount
// against compactionCount). A turn whose compaction failed, or a later
// turn still over the threshold before the next compaction, does not
// flush again.
func flushedThisCycle(branch []message.Entry) (bool, string) {
	for i := len(branch) - 1; i >= 0; i-- {
		switch e := &branch[i]; {
		case e.Type == message.EntryCompaction:
			return false, e.ID
		case e.Type == message.EntryCustom && e.Field("customType") == CustomMemoryFlush:
			return true, ""
		}
	}
	return false, ""
}

// memoryFlush runs the flush turn on ctxMsgs: at most MemoryFlushRounds
// model calls offered the memoryFlushTools, their calls run, and nothing
// kept but the files written, within a CompactionTimeout of its own. A
// failed call ends it; the compaction runs all the same. The transcript
// gets a CustomMemoryFlush entry: the session flushed in this cycle.
//
// It is journaled apart from the turn's steps: a re-run of the turn
// replays its recorded replies and results instead of calling the model
// and the tools again. A round's results are recorded only once a
// MemorySyncer has put the files they wrote where a re-run on another
// worker reads them: a call with no recorded result runs again there
// when its tool is idempotent (write, read, the memory tools), and its
// outcome is unknown otherwise (edit), as the turn's own calls.
func (ru *run) memoryFlush(ctx context.Context, req attemptReq, ctxMsgs []message.Message, out *attemptOut) {
	ru.flushed = true
	_, after := flushedThisCycle(sessionfile.Branch(ru.entries()))
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
	prov := admitted(ru.r.cfg, ru.sink, ru.in, req.profile, req.prov)
	calls, errText := 0, ""
	for step := 1; step <= MemoryFlushRounds; step++ {
		preq := &provider.Request{Model: *req.model, SystemPrompt: ru.system + "\n\n" + memoryFlushSystem, Messages: ru.prepare(req.model, msgs),
			Tools: specs, Thinking: req.thinking, APIKey: req.key, SessionID: ru.in.SessionID}
		am, err := ru.flushStream(ctx, prov, preq, step, out)
		if err != nil || am.StopReason == message.StopError || am.StopReason == message.StopAborted || ctx.Err() != nil {
			errText = am.ErrorMessage
			if err != nil {
				errText = err.Error()
			}
			errText = cmp.Or(errText, "aborted")
			break
		}
		tc := am.ToolCalls()
		if am.StopReason != message.StopToolUse || len(tc) == 0 {
			break
		}
		msgs = append(msgs, am)
		var live []message.Message
		for _, c := range tc {
			calls++
			res, from := ru.flushCall(ctx, step, c, specs)
			switch {
			case ctx.Err() != nil:
				// A call cut short by the flush's end is not recorded:
				// a re-run reports its outcome unknown.
			case from == callLive:
				live = append(live, res)
			case from == callUnknown:
				ru.recordStep(ctx, true, step, res)
			}
			msgs = append(msgs, res)
		}
		if len(live) > 0 && ctx.Err() == nil {
			ru.syncMemory(ctx)
			for _, res := range live {
				ru.recordStep(ctx, true, step, res)
			}
		}
	}
	if errText != "" {
		ru.r.cfg.Logger.Warn().Str("run_id", ru.in.RunID).Str("error", errText).Msg("memory flush failed; compacting all the same")
	}
	ru.b.addEntry(sessionfile.NewCustomEntry(CustomMemoryFlush, map[string]any{"compactionId": after, "runId": ru.in.RunID}, nil, now))
	ru.sink.Emit(events.StreamCompaction, events.EventData{Phase: PhaseMemoryFlush, Text: fmt.Sprint(calls), Error: errText})
}

// flushStream is the flush's model call of step n through the journal: a
// recorded reply is replayed, otherwise the model is called and a reply
// that calls tools is recorded. Its usage counts in out.
func (ru *run) flushStream(ctx context.Context, prov provider.Provider, req *provider.Request, n int, out *attemptOut) (message.Message, error) {
	if j := ru.journal; j != nil {
		if m, ok := j.flush.nextReply(n); ok {
			return m, nil
		}
	}
	am, err := prov.Stream(ctx, req, func(provider.Event) {})
	ru.addUsage(out, am.Usage)
	sanitize.TrimCallNames(&am)
	if err == nil && am.StopReason == message.StopToolUse && len(am.ToolCalls()) > 0 && ctx.Err() == nil {
		ru.recordStep(ctx, true, n, am)
	}
	return am, err
}

// flushCall runs call c of the flush's model step n through the journal
// (journaledIn): a tool the flush was not offered is refused. The flush's
// tools (files and memory) send no updates, so the call emits no events.
func (ru *run) flushCall(ctx context.Context, n int, c message.Block, specs []provider.Tool) (message.Message, callSource) {
	if ru.journal != nil {
		if m, from := ru.journaledIn(&ru.journal.flush, n, c); from != callLive {
			return m, from
		}
	}
	var res tools.Result
	if !slices.ContainsFunc(specs, func(t provider.Tool) bool { return t.Name == c.Name }) {
		res = tools.ErrorResult(fmt.Sprintf("Tool %s is not available during the memory flush", c.Name))
	} else {
		res = ru.callToolKeyed(ctx, c, ru.in.RunID+".flush"+strconv.Itoa(n)+"."+c.ID)
	}
	m := message.Message{Role: message.RoleToolResult, ToolCallID: c.ID, ToolName: c.Name,
		Content: message.BlocksOf(res.Content...), IsError: res.IsError, Timestamp: ru.r.cfg.Now().UnixMilli()}
	m, _ = guard.CapForPersistence(m)
	return m, callLive
}

// syncMemory asks a MemorySyncer tool source to put the flush's writes
// where the session's next run reads them; a failure only warns (the
// files go back at the turn's end as always).
func (ru *run) syncMemory(ctx context.Context) {
	s, ok := ru.r.cfg.Tools.(MemorySyncer)
	if !ok {
		return
	}
	if err := s.SyncMemory(ctx, ru.in); err != nil {
		ru.r.cfg.Logger.Warn().Err(err).Str("run_id", ru.in.RunID).Msg("memory flush: memory files not put back yet")
	}
}
