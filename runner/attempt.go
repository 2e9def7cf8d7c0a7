package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"time"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/replytext"
	"github.com/lanefleet/lanefleet/sanitize"
	"github.com/lanefleet/lanefleet/sessionfile"
	"github.com/lanefleet/lanefleet/tools"
)

// steerPollTimeout bounds one poll for steering messages.
const steerPollTimeout = 5 * time.Second

// errAttemptTimeout is the cause of an attempt's context when its timer
// fires.
var errAttemptTimeout = errors.New("request timed out")

// run is one turn in progress: the transcript so far and what every attempt
// shares.
type run struct {
	r       *Runner
	in      Input
	sink    Sink
	b       *builder
	history []message.Entry // the session before this turn, as stored
	tools   tools.Set
	specs   []provider.Tool
	client  map[string]bool // client tool names
	policy  tools.Policies  // the worker's and the session's tool policies
	// usage sums the usage of every model call of the run, cost
	// included (Output.Usage).
	usage  message.Usage
	window int
	sub    *subscriber
	base   []message.Message // the history's context (ru.lease.base)
	// lease is the session's context the run holds from the Runner's
	// cache until it ends.
	lease *sessionContext
	// branched is set once overflow truncation re-appended part of the
	// history on a new branch (the context is then built from the branch).
	branched bool
	system   string // the run's system prompt
	// repeats stops the turn when its model makes the same failing call
	// again and again.
	repeats *guard.Repeats
	// stateErrs are the auth-profile state writes that failed.
	stateErrs []error
	// journal replays and records the run's steps (nil without a
	// StepStore); steps counts its completed model replies.
	journal *journal
	steps   int
	// fatal ends the run (a step that could not be recorded); cancel
	// cancels the run's context with it.
	fatal  error
	cancel context.CancelCauseFunc
}

// entries returns the session as it stands: the history and this turn.
func (ru *run) entries() []message.Entry {
	all := make([]message.Entry, 0, len(ru.history)+len(ru.b.entries))
	return append(append(all, ru.history...), ru.b.entries...)
}

// contextMessages is what the model sees: the branch's messages (after the
// latest compaction) converted for the LLM. The history's messages come
// from the Runner's context cache (a session's history is converted once,
// then only what each run finds added); this turn's entries are appended
// to them as long as they only add messages on the same branch.
func (ru *run) contextMessages() []message.Message {
	if ru.branched {
		// The turn re-appended part of the history on a new branch.
		return contextOf(ru.entries())
	}
	if ru.base == nil {
		if ru.lease == nil {
			ru.lease = ru.r.contexts.acquire(ru.contextKey(), ru.history)
		}
		ru.base = ru.lease.base
	}
	// This turn's messages go after the history's in the spare capacity
	// of the run's leased context (each call overwrites the last call's:
	// that request is done), or in a new array once it is full.
	out := ru.base
	for _, e := range ru.b.entries {
		if e.Type != message.EntryMessage || e.Message == nil {
			// A compaction (or anything else) re-shapes the branch.
			return contextOf(ru.entries())
		}
		switch e.Message.Role {
		case message.RoleUser, message.RoleAssistant, message.RoleToolResult:
			out = append(out, *e.Message)
		}
	}
	return out
}

// contextKey names the run's session in the Runner's context cache, ""
// when the run has none.
func (ru *run) contextKey() string {
	if ru.in.SessionKey == "" && ru.in.SessionID == "" {
		return ""
	}
	return ru.in.SessionKey + "\x00" + ru.in.SessionID
}

func (ru *run) attempt(ctx context.Context, req attemptReq) attemptOut {
	var out attemptOut
	timeout := ru.r.cfg.AttemptTimeout
	actx, cancel := context.WithTimeoutCause(ctx, timeout, errAttemptTimeout)
	defer cancel()
	timedOut := func() bool { return ctx.Err() == nil && errors.Is(context.Cause(actx), errAttemptTimeout) }

	// Threshold compaction before the prompt (pi compacts when the context
	// is within reserveTokens of the window). The context it is judged on
	// is the first call's, unless a compaction re-shapes it.
	ctxMsgs := ru.contextMessages()
	if c := ru.r.cfg.Compactor; c != nil && c.Due(ctxMsgs, ru.window) {
		if ru.compactWith(actx, req, "threshold") {
			out.compactions++
			ctxMsgs = nil
		}
		if timedOut() {
			out.timedOut, out.timedOutDuringCompaction, out.aborted = true, true, true
			return out
		}
	}

	limit := ru.toolLoopLimit()
	// calls counts the model calls that answered (the tool loop's
	// iterations); retries the same-key retries since the last one.
	for calls, retries := 0, 0; ; {
		if calls >= limit {
			out.toolLoopLimit = calls
			return out
		}
		if ctxMsgs == nil {
			ctxMsgs = ru.contextMessages()
		}
		msgs := ru.prepare(req.model, ctxMsgs)
		ctxMsgs = nil
		out.snapshot = msgs
		preq := &provider.Request{Model: req.model, SystemPrompt: ru.system, Messages: msgs, Tools: ru.specs,
			Thinking: req.thinking, APIKey: req.key, SessionID: ru.in.SessionID}
		ru.sub.reset()
		am, err := ru.stream(actx, req.prov, preq)
		ru.sub.flushBlocks(true)
		if ctx.Err() != nil {
			out.aborted = true
			return out
		}
		if timedOut() {
			out.timedOut, out.aborted = true, true
			if len(am.Content.Blocks) > 0 {
				am.StopReason = message.StopAborted
				ru.addAssistant(&am)
				ru.addUsage(&out, am.Usage)
				out.last = ru.lastAssistant()
			}
			out.texts = ru.sub.texts
			return out
		}
		if err != nil && am.StopReason != message.StopError && am.StopReason != message.StopAborted {
			am.StopReason = message.StopError
			if am.ErrorMessage == "" {
				am.ErrorMessage = errText(err)
			}
		}
		if d, ok := ru.retryWait(actx, req, &am, err, retries+1); ok {
			retries++
			if ru.pause(actx, d, retries, retryWhy(err, am.ErrorMessage)) == nil {
				// The failed reply is not stored (a model never sees an
				// errored reply again, and the retrying event told why);
				// its usage counts.
				ru.addUsage(&out, am.Usage)
				continue
			}
			// The run was cancelled or the attempt timed out while
			// waiting: the loop sees the failed reply as it is.
			out.timedOut = timedOut()
			out.aborted = out.timedOut || ctx.Err() != nil
		}
		ru.addAssistant(&am)
		ru.addUsage(&out, am.Usage)
		out.last = ru.lastAssistant()
		out.texts = ru.sub.texts
		if am.StopReason == message.StopError || am.StopReason == message.StopAborted {
			out.lastErr = err
			if out.lastErr == nil {
				out.lastErr = errors.New(am.ErrorMessage)
			}
			return out
		}
		calls, retries = calls+1, 0
		toolCalls := am.ToolCalls()
		if am.StopReason == message.StopToolUse && len(toolCalls) > 0 {
			for _, c := range toolCalls {
				if approval := ru.needsApproval(c.Name); approval || ru.client[c.Name] {
					out.pending = append(out.pending, pendingCall(c, approval))
					continue
				}
				res := ru.runTool(actx, c, &out.toolErrors)
				if n, stop := ru.repeats.Record(c.Name, c.Arguments, res.IsError, res.Content.Text()); stop {
					out.toolLoop = &toolLoopStop{name: c.Name, err: res.Content.Text(), times: n}
				}
				if timedOut() || ctx.Err() != nil {
					break
				}
			}
			if ctx.Err() != nil {
				out.aborted = true
				return out
			}
			if timedOut() {
				out.timedOut, out.aborted = true, true
				return out
			}
			if len(out.pending) > 0 || out.toolLoop != nil {
				// Every call of the reply has its result: the turn is
				// whole where it stops.
				return out
			}
		}
		if ru.steer(actx) == 0 && (am.StopReason != message.StopToolUse || len(toolCalls) == 0) {
			return out
		}
	}
}

// pendingCall is a call the run leaves to the client: a client tool's
// (hosted client tools: the run stops, the result's meta lists it as the
// reference does, runtime spec §3.3) or one waiting for approval. Its id
// is the model's, which the client's answer names.
func pendingCall(c message.Block, approval bool) events.PendingCall {
	args, _ := json.Marshal(c.Arguments)
	if c.Arguments == nil {
		args = []byte("{}")
	}
	return events.PendingCall{ID: c.ID, Name: c.Name, Arguments: string(args), Approval: approval}
}

// toolLoopLimit is the run's tool-loop limit: its setting, within the
// worker's.
func (ru *run) toolLoopLimit() int {
	limit := ru.r.cfg.MaxToolIterations
	if n := ru.in.Settings.MaxToolIterations; n > 0 && n < limit {
		return n
	}
	return limit
}

// toolRepeats is the run's loop-detector limit: its setting, within the
// worker's.
func (ru *run) toolRepeats() int {
	limit := ru.r.cfg.MaxToolRepeats
	if n := ru.in.Settings.MaxToolRepeats; n > 0 && n < limit {
		return n
	}
	return limit
}

// historyLimit is the run's history limit: its setting, else the worker's.
func (ru *run) historyLimit() int {
	if n := ru.in.Settings.HistoryLimit; n > 0 {
		return n
	}
	return ru.r.cfg.HistoryLimit
}

// prepare builds the messages of one model call from its context: sanitised for
// the model (runtime spec §4 step 7), then bounded by the per-request
// tool-result guard (§11.2).
//
// Unlike the reference, which drops the calls of tools the run does not
// offer with their results (its allowlist), the fleet keeps every call a
// provider accepts: a model that no longer sees its call of a tool that
// is not offered, and the "not found" it got, makes the call again, every
// request, until the tool-loop limit. A call a provider would refuse (no
// arguments, no id, a name that is no tool name) becomes a note saying
// what was called and what came of it (sanitize.NoteRejectedCalls). The
// user messages of a request to Anthropic lose its refusal test string
// (sanitize.ScrubRefusalTrigger, §3.1 step 6).
func (ru *run) prepare(m provider.Model, msgs []message.Message) []message.Message {
	msgs = sanitize.ScrubRefusalTrigger(m.Provider, sanitize.NoteRejectedCalls(msgs))
	res := sanitize.Prepare(sanitize.Request{Provider: m.Provider, API: m.API, ModelID: m.ID, Messages: msgs,
		HistoryLimit: ru.historyLimit()})
	if len(res.Final) > 0 {
		msgs = res.Final
	}
	// The estimates of the messages the session's last request had are
	// reused (the lease is the run's alone; contextMessages took it).
	return ru.lease.sizes.Guard(msgs, ru.window)
}

func (ru *run) addAssistant(am *message.Message) {
	am.Timestamp = max(am.Timestamp, 1)
	ru.b.add(*am)
}

// addUsage counts a model call's usage in the attempt's and the run's.
func (ru *run) addUsage(out *attemptOut, u *message.Usage) {
	if u == nil || u.IsZero() {
		return
	}
	out.usage = out.usage.Add(*u)
	out.usage.Extra = nil
	ru.usage = ru.usage.Add(*u)
	ru.usage.Extra = nil
}

func (ru *run) lastAssistant() *message.Message {
	for i := len(ru.b.entries) - 1; i >= 0; i-- {
		if m := ru.b.entries[i].Message; m != nil && m.Role == message.RoleAssistant {
			return m
		}
	}
	return nil
}

// runTool executes one tool call, appends its result and records its end
// in the attempt's tool-error memory; it returns the result.
func (ru *run) runTool(ctx context.Context, c message.Block, te *replytext.ToolErrors) message.Message {
	ru.sub.flushBlocks(true)
	ru.sink.Emit(events.StreamTool, events.EventData{Phase: events.PhaseStart, Name: c.Name, ToolCallID: c.ID, Args: c.Arguments})
	msg, from := ru.journaledCall(c)
	if from == callLive {
		res := ru.callTool(ctx, c)
		msg = message.Message{Role: message.RoleToolResult, ToolCallID: c.ID, ToolName: c.Name,
			Content: message.BlocksOf(res.Content...), IsError: res.IsError, Timestamp: ru.r.cfg.Now().UnixMilli()}
		if len(res.Details) > 0 {
			msg.Details = res.Details
		}
		msg, _ = guard.CapForPersistence(msg)
	}
	if ctx.Err() == nil && from != callRecorded {
		// A call cut short by the run's end is not recorded: its re-run
		// reports its outcome unknown.
		ru.recordResult(ctx, msg)
	}
	ru.b.add(msg)
	res := tools.Result{Content: msg.Content.Blocks, IsError: msg.IsError}
	res.Details, _ = msg.Details.(map[string]any)
	view := toolResultView(res)
	ru.sink.Emit(events.StreamTool, events.EventData{Phase: events.PhaseResult, Name: c.Name, ToolCallID: c.ID, IsError: res.IsError,
		Payload: replytext.SanitizeToolResult(view)})
	end := replytext.ToolEnd{Name: c.Name, Args: c.Arguments, Failed: res.IsError}
	if res.IsError {
		end.Error, _ = replytext.ToolErrorMessage(view)
	}
	te.Record(end)
	return msg
}

// callTool finds and runs a tool; every failure becomes an error result.
func (ru *run) callTool(ctx context.Context, c message.Block) (res tools.Result) {
	if ru.tools == nil {
		return tools.ErrorResult(fmt.Sprintf("Tool %s not found", c.Name))
	}
	t, ok := ru.tools.Lookup(c.Name)
	if !ok {
		return tools.ErrorResult(fmt.Sprintf("Tool %s not found", c.Name))
	}
	defer func() {
		if p := recover(); p != nil {
			ru.r.cfg.Logger.Error().Str("tool", c.Name).Interface("panic", p).Bytes("stack", debug.Stack()).Msg("tool panicked")
			res = tools.ErrorResult(fmt.Sprintf("Tool %s failed: internal error", c.Name))
		}
	}()
	args := c.Arguments
	if h := ru.r.cfg.ToolHook; h != nil {
		d, err := h.BeforeToolCall(ctx, ToolHookInput{SessionKey: ru.in.SessionKey, RunID: ru.in.RunID, ToolCallID: c.ID, ToolName: c.Name, Args: c.Arguments})
		switch {
		case err != nil:
			ru.r.cfg.Logger.Warn().Err(err).Str("run_id", ru.in.RunID).Str("tool", c.Name).Msg("before-tool-call hook failed; the call runs as made")
		case d.Block:
			return tools.ErrorResult(cmp.Or(d.Reason, TextHookBlocked))
		case d.Args != nil:
			args = d.Args
		}
	}
	call := tools.Call{ID: c.ID, Name: c.Name, Args: args, Key: ru.callKeyOf(c.ID), Update: func(p tools.Result) {
		ru.sink.Emit(events.StreamTool, events.EventData{Phase: events.PhaseUpdate, Name: c.Name, ToolCallID: c.ID, Payload: replytext.SanitizeToolResult(toolResultView(p))})
	}}
	res, err := t.Call(ctx, call)
	if err != nil {
		return tools.ErrorResult(err.Error())
	}
	if len(res.Content) == 0 {
		res.Content = []message.Block{message.Text("(no output)")}
	}
	return res
}

// TextHookBlocked is the tool result the model sees for a call a
// ToolHook blocked without a reason.
const TextHookBlocked = "A hook blocked this tool call; it did not run."

// toolResultView is a tool result as events show it.
func toolResultView(res tools.Result) map[string]any {
	content := make([]any, 0, len(res.Content))
	for _, b := range res.Content {
		switch b.Type {
		case message.BlockImage:
			content = append(content, map[string]any{"type": "image", "mimeType": b.MimeType, "data": b.Data})
		default:
			content = append(content, map[string]any{"type": "text", "text": b.Text})
		}
	}
	out := map[string]any{"content": content}
	if len(res.Details) > 0 {
		out["details"] = res.Details
	}
	return out
}

// steer appends the steer-mode messages that arrived since the last poll;
// the model answers them in this turn.
func (ru *run) steer(ctx context.Context) int {
	if ru.in.Steer == nil {
		return 0
	}
	// The poll reads the lane's stream: bound it, so a store in failover
	// delays the turn instead of hanging it.
	sctx, cancel := context.WithTimeout(ctx, steerPollTimeout)
	defer cancel()
	n := 0
	for _, s := range ru.in.Steer(sctx) {
		ru.b.add(userMessage(s, ru.r.cfg.Now()))
		n++
	}
	return n
}

// compact runs an overflow compaction for the loop.
func (ru *run) compact(ctx context.Context, req attemptReq, trigger string) bool {
	if ru.r.cfg.Compactor == nil {
		return false
	}
	return ru.compactWith(ctx, req, trigger)
}

func (ru *run) compactWith(ctx context.Context, req attemptReq, trigger string) bool {
	ru.sink.Emit(events.StreamCompaction, events.EventData{Phase: events.PhaseStart})
	cctx, cancel := context.WithTimeout(ctx, ru.r.cfg.CompactionTimeout)
	defer cancel()
	e, err := ru.r.cfg.Compactor.Compact(cctx, CompactRequest{Model: req.model, Provider: req.prov, APIKey: req.key,
		Entries: ru.entries(), Trigger: trigger})
	if err != nil {
		ru.r.cfg.Logger.Warn().Err(err).Str("trigger", trigger).Msg("compaction failed")
		ru.sink.Emit(events.StreamCompaction, events.EventData{Phase: events.PhaseEnd, Error: err.Error()})
		return false
	}
	ru.b.addEntry(e)
	ru.sink.Emit(events.StreamCompaction, events.EventData{Phase: events.PhaseEnd, WillRetry: trigger == "overflow"})
	return true
}

// truncate shortens oversized tool results (overflow recovery §11.3, the
// pass guard.TruncateToolResults makes) on the session's current branch.
// This turn's entries are not stored yet and are cut in place. An oversized
// result of an earlier turn is stored in that turn's record, which is never
// rewritten; instead, as the reference rewrites its session file, the turn
// branches: it re-appends every entry of the branch from that result on,
// with the results cut, as a new branch off the result's parent, and this
// turn's entries follow. The session's leaf is then on the cut branch, so
// later turns read the cut results and never pay for this recovery again.
func (ru *run) truncate(_ context.Context, window int) int {
	n := truncateEntries(ru.b.entries, window)
	own := make(map[string]bool, len(ru.b.entries))
	for _, e := range ru.b.entries {
		own[e.ID] = true
	}
	path := sessionfile.Branch(ru.entries())
	first := -1
	for i, e := range path {
		if own[e.ID] {
			break
		}
		if e.Message != nil && guard.HasOversizedToolResult([]message.Message{*e.Message}, window) {
			first = i
			break
		}
	}
	if first < 0 {
		return n
	}
	copies := rebranch(path[first:], own, ru.r.cfg.Now())
	n += truncateEntries(copies, window)
	if len(ru.b.entries) > 0 {
		last := copies[len(copies)-1].ID
		ru.b.entries[0].ParentID = &last
	} else {
		ru.b.parent = copies[len(copies)-1].ID
	}
	ru.b.entries = append(copies, ru.b.entries...)
	ru.base, ru.branched = nil, true
	return n
}

// rebranch copies the stored entries of a branch tail (those not in own,
// this turn's) as a new chain off the tail's first parent, with fresh ids,
// as the reference re-appends a session branch: messages, compactions,
// thinking-level and model changes, custom entries and session info are
// kept, branch summaries and labels dropped. A compaction's first kept
// entry follows its copy.
func rebranch(tail []message.Entry, own map[string]bool, now time.Time) []message.Entry {
	ids := make(map[string]string, len(tail))
	parent := tail[0].ParentID
	ts := now.UTC().Format("2006-01-02T15:04:05.000Z")
	out := make([]message.Entry, 0, len(tail))
	for _, e := range tail {
		if own[e.ID] {
			break
		}
		switch e.Type {
		case message.EntryBranchSummary, message.EntryLabel, message.EntrySession:
			continue
		}
		c := e
		c.ID = sessionfile.NewEntryID()
		c.Timestamp = ts
		if parent != nil {
			p := *parent
			c.ParentID = &p
		}
		if e.Type == message.EntryCompaction {
			if first, ok := e.Fields["firstKeptEntryId"].(string); ok && ids[first] != "" {
				c.Fields = maps.Clone(e.Fields)
				c.Fields["firstKeptEntryId"] = ids[first]
			}
		}
		ids[e.ID] = c.ID
		parent = &c.ID
		out = append(out, c)
	}
	return out
}

// truncateEntries replaces, in es, the messages guard.TruncateToolResults
// cut, and returns how many it cut.
func truncateEntries(es []message.Entry, window int) int {
	idx := make([]int, 0, len(es))
	msgs := make([]message.Message, 0, len(es))
	for i := range es {
		if m := es[i].Message; m != nil {
			idx = append(idx, i)
			msgs = append(msgs, *m)
		}
	}
	out, res := guard.TruncateToolResults(msgs, window)
	for j, cuts := range res.PerMessage {
		for _, c := range cuts {
			if c.Truncated {
				es[idx[j]].Message = &out[j]
				break
			}
		}
	}
	return res.Truncated
}
