package runner

import (
	"context"
	"errors"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools"
)

// errAttemptTimeout is the cause of an attempt's context when its timer
// fires.
var errAttemptTimeout = errors.New("request timed out")

// attempt is one attempt of the run on one model and key: the call loop.
// Each model reply is retried on the same key while the retry policy
// allows, kept, and its tool calls run; the loop goes on while the model
// calls tools or steering messages arrive, up to the tool loop's limit.
// The attempt's context ends after AttemptTimeout; ctx is the run's. What
// it reports is written to out.
//
// The attempt's start and what follows each call are in beginAttempt and
// afterCall, not inlined here: this frame stays on the turn's stack while
// the model answers (see docs/scaling.md, "What a turn in flight holds").
func (ru *run) attempt(ctx context.Context, req *attemptReq, out *attemptOut) {
	actx, cancel := ru.beginAttempt(ctx, req)
	defer cancel()
	timedOut := func() bool { return ctx.Err() == nil && errors.Is(context.Cause(actx), errAttemptTimeout) }

	ctxMsgs, ok := ru.compactFirst(actx, req, out, timedOut)
	if !ok {
		return
	}
	limit := ru.toolLoopLimit()
	// calls counts the model calls that answered (the tool loop's
	// iterations); retries the same-key retries since the last one.
	for calls, retries := 0, 0; ; {
		if calls >= limit {
			out.toolLoopLimit = calls
			return
		}
		var am message.Message
		err := ru.call(actx, req, ctxMsgs, out, &am)
		ctxMsgs = nil
		switch ru.afterCall(ctx, actx, req, out, &am, err, retries, timedOut) {
		case attemptEnds:
			return
		case callRetried:
			retries++
		case callAnswered:
			calls, retries = calls+1, 0
		}
	}
}

// beginAttempt counts and announces an attempt and returns its context,
// which ends after AttemptTimeout.
//
//go:noinline
func (ru *run) beginAttempt(ctx context.Context, req *attemptReq) (context.Context, context.CancelFunc) {
	ru.attempts++
	ru.alternates = req.alternates
	ru.sink.Emit(events.StreamAttempt, events.EventData{Attempt: ru.attempts, Provider: req.model.Provider, Model: req.model.ID,
		AuthProfile: req.profile, Hop: req.hop, Reason: string(req.after)})
	return context.WithTimeoutCause(ctx, ru.r.cfg.AttemptTimeout, errAttemptTimeout)
}

// afterCallNext is what follows a model call in an attempt.
type afterCallNext int

const (
	attemptEnds  afterCallNext = iota // the attempt ends (out says how)
	callRetried                       // the failed call is retried on the same key
	callAnswered                      // the model answered: the loop goes on with its next call
)

// afterCall handles the end of an attempt's model call, the reply am or
// err, the retries-th retry since the last answered call: it times the
// attempt out, passes on the Admission's refusal or move, retries a
// failed reply, or keeps the reply and runs its tool calls and the
// steering messages that arrived.
//
//go:noinline
func (ru *run) afterCall(ctx, actx context.Context, req *attemptReq, out *attemptOut, am *message.Message, err error, retries int, timedOut func() bool) afterCallNext {
	if ctx.Err() != nil {
		out.aborted = true
		return attemptEnds
	}
	if timedOut() {
		ru.keepTimedOut(out, am)
		return attemptEnds
	}
	if r := refusal(err); r != nil {
		// The call was not made: the turn ends here, whole.
		out.refused = r
		out.texts = ru.sub.texts
		return attemptEnds
	}
	if mv := moved(err); mv != nil {
		// The call was not made: the next attempt makes it with
		// another auth profile.
		out.moved = mv
		out.texts = ru.sub.texts
		return attemptEnds
	}
	markFailed(am, err)
	if d, ok := ru.retryWait(actx, *req, am, err, retries+1); ok {
		if ru.pause(actx, d, retries+1, retryWhy(err, am.ErrorMessage)) == nil {
			// The failed reply is not stored (a model never sees an
			// errored reply again, and the retrying event told why);
			// its usage counts.
			ru.addUsage(out, am.Usage)
			return callRetried
		}
		// The run was cancelled or the attempt timed out while
		// waiting: the loop sees the failed reply as it is.
		out.timedOut = timedOut()
		out.aborted = out.timedOut || ctx.Err() != nil
	}
	if ru.keep(out, am, err) {
		return attemptEnds
	}
	toolCalls := am.ToolCalls()
	usesTools := am.StopReason == message.StopToolUse && len(toolCalls) > 0
	if usesTools && ru.runCalls(ctx, actx, toolCalls, out, timedOut) {
		return attemptEnds
	}
	if ru.steer(actx) == 0 && !usesTools {
		return attemptEnds
	}
	return callAnswered
}

// compactFirst compacts before the attempt's first call when the
// compactor says it is due (pi compacts when the context is within
// reserveTokens of the window), after a memory flush when one is due
// (flush.go). The context it is judged on is the first
// call's, which it returns, or nil when a compaction re-shaped it; false
// when the attempt timed out compacting (out says so).
func (ru *run) compactFirst(actx context.Context, req *attemptReq, out *attemptOut, timedOut func() bool) ([]message.Message, bool) {
	ctxMsgs := ru.contextMessages()
	if c := ru.r.cfg.Compactor; c != nil && c.Due(ctxMsgs, ru.window) {
		if ru.flushDue() {
			ru.memoryFlush(actx, *req, ctxMsgs, out)
		}
		if ru.compactWith(actx, *req, "threshold") {
			out.compactions++
			ctxMsgs = nil
		}
		if timedOut() {
			out.timedOut, out.timedOutDuringCompaction, out.aborted = true, true, true
			return nil, false
		}
	}
	return ctxMsgs, true
}

// call makes one model call on ctxMsgs (nil: the run's context as it
// stands) and writes the reply, as it streamed, to am.
func (ru *run) call(actx context.Context, req *attemptReq, ctxMsgs []message.Message, out *attemptOut, am *message.Message) error {
	preq := ru.request(req, ctxMsgs, out)
	ru.sub.reset()
	err := ru.stream(actx, req.prov, req.profile, preq, am)
	ru.sub.flushBlocks(true)
	return err
}

// request is the provider request of a call on ctxMsgs (nil: the run's
// context as it stands); out keeps the messages it sends. Not inlined in
// call: that frame stays on the turn's stack while the model answers (see
// docs/scaling.md, "What a turn in flight holds").
//
//go:noinline
func (ru *run) request(req *attemptReq, ctxMsgs []message.Message, out *attemptOut) *provider.Request {
	if ctxMsgs == nil {
		ctxMsgs = ru.contextMessages()
	}
	msgs := ru.prepare(req.model, ctxMsgs)
	out.snapshot = msgs
	return &provider.Request{Model: *req.model, SystemPrompt: ru.system, Messages: msgs, Tools: ru.specs,
		Thinking: req.thinking, APIKey: req.key, SessionID: ru.in.SessionID, Immutable: ru.immutable}
}

// keepTimedOut ends an attempt whose time ran out during a call: what the
// reply had streamed is kept as an aborted reply.
func (ru *run) keepTimedOut(out *attemptOut, am *message.Message) {
	out.timedOut, out.aborted = true, true
	if len(am.Content.Blocks) > 0 {
		am.StopReason = message.StopAborted
		ru.addAssistant(am)
		ru.addUsage(out, am.Usage)
		out.last = ru.lastAssistant()
	}
	out.texts = ru.sub.texts
}

// markFailed makes a reply whose call failed an errored reply, with the
// error's text unless it has one.
func markFailed(am *message.Message, err error) {
	if err != nil && am.StopReason != message.StopError && am.StopReason != message.StopAborted {
		am.StopReason = message.StopError
		if am.ErrorMessage == "" {
			am.ErrorMessage = errText(err)
		}
	}
}

// keep adds a reply to the turn, and reports whether it ends the attempt:
// an errored or aborted reply (out.lastErr says why).
func (ru *run) keep(out *attemptOut, am *message.Message, err error) bool {
	ru.addAssistant(am)
	ru.addUsage(out, am.Usage)
	out.last = ru.lastAssistant()
	out.texts = ru.sub.texts
	if am.StopReason != message.StopError && am.StopReason != message.StopAborted {
		return false
	}
	out.lastErr = err
	if out.lastErr == nil {
		out.lastErr = errors.New(am.ErrorMessage)
	}
	return true
}

// runCalls runs a reply's tool calls in order, leaving the client's
// tools' and those waiting for approval pending, and reports whether the
// attempt ends here: cancelled, timed out, calls left pending, a tool
// loop stopped, or a call that ends the turn succeeded (sessions_yield;
// every call of the reply has its result: the turn is whole where it
// stops).
func (ru *run) runCalls(ctx, actx context.Context, calls []message.Block, out *attemptOut, timedOut func() bool) bool {
	for _, c := range calls {
		if approval := ru.needsApproval(c.Name); approval || ru.client[c.Name] {
			out.pending = append(out.pending, pendingCall(c, approval))
			continue
		}
		res := ru.runTool(actx, c, &out.toolErrors)
		if !res.IsError && ru.endsTurn(c.Name) {
			out.yielded = true
		}
		if n, stop := ru.repeats.Record(c.Name, c.Arguments, res.IsError, res.Content.Text()); stop {
			out.toolLoop = &toolLoopStop{name: c.Name, err: res.Content.Text(), times: n}
		}
		if timedOut() || ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		out.aborted = true
		return true
	}
	if timedOut() {
		out.timedOut, out.aborted = true, true
		return true
	}
	return len(out.pending) > 0 || out.toolLoop != nil || out.yielded
}

// endsTurn reports whether a successful call of the run's tool name ends
// the turn (tools.TurnEnder). It asks the tool, not the result, so a
// result replayed from the step journal ends a re-run where it ended the
// run before.
func (ru *run) endsTurn(name string) bool {
	if ru.tools == nil {
		return false
	}
	t, ok := ru.tools.Lookup(name)
	return ok && tools.EndsTurn(t)
}

// TextHookBlocked is the tool result the model sees for a call a
// ToolHook blocked without a reason.
const TextHookBlocked = "A hook blocked this tool call; it did not run."
