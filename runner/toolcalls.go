package runner

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/lanefleet/lanefleet/ecmatext"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/guard"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/replytext"
	"github.com/lanefleet/lanefleet/sessionfile"
	"github.com/lanefleet/lanefleet/tools"
)

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
func (ru *run) callTool(ctx context.Context, c message.Block) tools.Result {
	return ru.callToolKeyed(ctx, c, ru.callKeyOf(c.ID))
}

// callToolKeyed is callTool with the call's idempotency key.
func (ru *run) callToolKeyed(ctx context.Context, c message.Block, key string) (res tools.Result) {
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
	call := tools.Call{ID: c.ID, Name: c.Name, Args: args, Key: key, Update: func(p tools.Result) {
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

// setupTools gathers the run's tools: the source's and the client's.
func (ru *run) setupTools(ctx context.Context) (raw tools.Set, err error) {
	if ru.r.cfg.Tools != nil {
		if raw, err = ru.r.cfg.Tools.Tools(ctx, ru.in); err != nil {
			return nil, fmt.Errorf("runner: tools: %w", err)
		}
	}
	if st := ru.in.Settings.Tools; len(ru.in.Settings.AgentTools) == 0 && len(st.Allow) == 0 && len(st.Deny) == 0 && len(st.Approve) == 0 {
		// The session adds no policy (an empty one allows every tool and
		// asks approval of none): the worker's alone, not a slice of
		// the run's own held while its model answers.
		ru.policy = ru.r.policy
	} else {
		ru.policy = append(append(tools.Policies{ru.r.cfg.ToolPolicy}, ru.in.Settings.AgentTools...), ru.in.Settings.Tools)
	}
	ru.tools = ru.policy.Filter(raw)
	if ru.tools != nil {
		ru.specs = ru.tools.Specs()
	}
	for _, t := range ru.in.Inbound.Tools {
		if ru.client == nil {
			ru.client = map[string]bool{}
		}
		ru.client[t.Name] = true
		ru.specs = append(ru.specs, provider.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	return raw, nil
}

// needsApproval reports whether a call of the named tool waits for the
// client's approval: a worker tool (not the client's own) its policies mark.
func (ru *run) needsApproval(name string) bool {
	return !ru.client[name] && ru.policy.NeedsApproval(name)
}

// answer is a tool result matched with the call it answers.
type answer struct {
	call     message.Block
	result   events.ToolResult
	approval bool // the call waits for the user's approval (Input.Approvals)
}

// matchToolResults matches the message's tool results with the calls of
// the session's last assistant message that have no result yet. It
// returns a refusal (the run's invalid_input error) when a result answers
// no such call, answers one twice, or answers a call of a tool that needs
// approval which the fleet did not leave waiting for it (Input.Approvals):
// nothing runs and the transcript is left as it was, so a call that does
// wait can still be answered.
func (ru *run) matchToolResults(results []events.ToolResult) ([]answer, string) {
	if len(results) == 0 {
		return nil, ""
	}
	pending := map[string]message.Block{}
	var order []message.Block // the waiting calls, in call order
	msgs := sessionfile.Messages(ru.in.History)
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == message.RoleAssistant {
			for _, c := range msgs[i].ToolCalls() {
				pending[c.ID] = c
			}
			for _, m := range msgs[i+1:] {
				if m.Role == message.RoleToolResult {
					delete(pending, m.ToolCallID)
				}
			}
			for _, c := range msgs[i].ToolCalls() {
				if _, ok := pending[c.ID]; ok {
					order = append(order, c)
				}
			}
			break
		}
	}
	answers := make([]answer, 0, len(results))
	for _, tr := range results {
		call, ok := pending[tr.ToolCallID]
		if !ok {
			return nil, fmt.Sprintf("tool result for call %q: no call of this session is waiting for a result with this id; %s", shortID(tr.ToolCallID), waitingCalls(order))
		}
		delete(pending, tr.ToolCallID) // a second result for it is refused
		a := answer{call: call, result: tr, approval: slices.Contains(ru.in.Approvals, events.ApprovalCall{ID: call.ID, Name: call.Name})}
		if !a.approval && ru.needsApproval(call.Name) {
			return nil, fmt.Sprintf("tool result for call %q: this %s call is not waiting for approval (only a call this fleet proposed and left pending can be approved); it was not run",
				shortID(tr.ToolCallID), shortID(call.Name))
		}
		answers = append(answers, a)
	}
	return answers, ""
}

// waitingCalls says which calls wait for a result: "waiting: "id" (name),
// …", or that none does.
func waitingCalls(calls []message.Block) string {
	if len(calls) == 0 {
		return "none is waiting"
	}
	parts := make([]string, 0, min(len(calls), maxListedCalls)+1)
	for i, c := range calls {
		if i == maxListedCalls {
			parts = append(parts, fmt.Sprintf("and %d more", len(calls)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%q (%s)", shortID(c.ID), shortID(c.Name)))
	}
	return "waiting: " + strings.Join(parts, ", ")
}

// shortID bounds an id or name quoted in a refusal.
func shortID(s string) string {
	if ecmatext.Len(s) <= 64 {
		return s
	}
	return ecmatext.Prefix(s, 64) + "…"
}

// addToolResults adds the answers to the session's pending tool calls
// (matchToolResults): a client tool's result is stored as given; a call
// that waited for approval runs now when the answer approves it
// (ApprovalWords), and is answered with a refusal otherwise.
func (ru *run) addToolResults(ctx context.Context, answers []answer) {
	for _, a := range answers {
		tr, name := a.result, a.call.Name
		if a.approval {
			ru.answerApproval(ctx, a.call, tr)
			continue
		}
		m := message.Message{Role: message.RoleToolResult, ToolCallID: tr.ToolCallID, ToolName: name,
			Content: message.BlocksOf(message.Text(tr.Text)), IsError: tr.IsError, Timestamp: ru.r.cfg.Now().UnixMilli()}
		m, _ = guard.CapForPersistence(m)
		ru.b.add(m)
		ru.sink.Emit(events.StreamTool, events.EventData{Phase: events.PhaseResult, Name: name, ToolCallID: tr.ToolCallID, IsError: tr.IsError,
			Payload: map[string]any{"content": []any{map[string]any{"type": "text", "text": replytext.TruncateToolText(tr.Text)}}}})
	}
}

// answerApproval runs a call the client approved, or records its refusal.
func (ru *run) answerApproval(ctx context.Context, call message.Block, tr events.ToolResult) {
	answer := strings.ToLower(strings.TrimSpace(tr.Text))
	if !tr.IsError && slices.Contains(ApprovalWords, answer) {
		var te replytext.ToolErrors // the turn's reply warns about its own attempt's tools
		ru.runTool(ctx, call, &te)
		return
	}
	text := TextDenied
	if answer != "" && answer != "deny" && answer != "denied" && answer != "no" {
		text += " The user said: " + strings.TrimSpace(tr.Text)
	}
	m := message.Message{Role: message.RoleToolResult, ToolCallID: call.ID, ToolName: call.Name,
		Content: message.BlocksOf(message.Text(text)), IsError: true, Timestamp: ru.r.cfg.Now().UnixMilli()}
	ru.b.add(m)
	ru.sink.Emit(events.StreamTool, events.EventData{Phase: events.PhaseResult, Name: call.Name, ToolCallID: call.ID, IsError: true,
		Payload: map[string]any{"content": []any{map[string]any{"type": "text", "text": text}}}})
}
