package agentprompt

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/lanefleet/lanefleet/message"
)

// Hook runs before a run's first model call (OpenClaw's before_agent_start
// plugin hook): it may add context in front of the user's prompt or replace
// the system prompt.
type Hook interface {
	// BeforeStart returns the hook's contribution. It must return when ctx
	// is done and must not modify in.Messages. An error only skips this
	// hook's contribution.
	BeforeStart(ctx context.Context, in HookInput) (HookResult, error)
}

// HookFunc adapts a function to Hook.
type HookFunc func(ctx context.Context, in HookInput) (HookResult, error)

// BeforeStart calls f.
func (f HookFunc) BeforeStart(ctx context.Context, in HookInput) (HookResult, error) {
	return f(ctx, in)
}

// HookInput is what a hook sees of the run about to start.
type HookInput struct {
	// Prompt is the user's prompt of this run.
	Prompt string
	// Messages is the session's history before the prompt; read-only.
	Messages []message.Message
	// SystemPrompt is the system prompt Build made for the run.
	SystemPrompt string
	// Workspace is the run's workspace directory.
	Workspace string
	// AgentID, SessionKey and RunID identify the run.
	AgentID, SessionKey, RunID string
}

// HookResult is one hook's contribution; empty fields contribute nothing.
type HookResult struct {
	// PrependContext is text to put before the user's prompt.
	PrependContext string
	// SystemPrompt replaces the run's system prompt.
	SystemPrompt string
}

// RunHooks runs hooks one after another, in order, and merges their results
// as OpenClaw does: the PrependContext values joined with blank lines, and
// the last non-empty SystemPrompt (empty when no hook sets one). Give the
// prepend context to JoinPrompt.
//
// A hook that returns an error or panics contributes nothing; warn receives
// the error (with the panic's stack) and the remaining hooks still run. Each
// hook is bounded by ctx: when ctx is done, RunHooks stops waiting for the
// running hook, warns with ctx's cause, skips the hooks not yet run and
// returns what the finished ones contributed. A hook that ignores ctx keeps
// running in the background until it returns, and its result is discarded;
// with a ctx that is never done, hooks run on the caller's goroutine.
// warn may be nil.
func RunHooks(ctx context.Context, hooks []Hook, in HookInput, warn func(error)) (prependContext, systemPromptOverride string) {
	if warn == nil {
		warn = func(error) {}
	}
	var prepend []string
	for i, h := range hooks {
		if h == nil {
			continue
		}
		if ctx.Err() != nil {
			warn(fmt.Errorf("agentprompt: before-start hooks %d to %d not run: %w", i+1, len(hooks), context.Cause(ctx)))
			break
		}
		res, err := runHook(ctx, h, in)
		if err != nil {
			warn(fmt.Errorf("agentprompt: before-start hook %d (%T): %w", i+1, h, err))
			continue
		}
		if res.PrependContext != "" {
			prepend = append(prepend, res.PrependContext)
		}
		if res.SystemPrompt != "" {
			systemPromptOverride = res.SystemPrompt
		}
	}
	return strings.Join(prepend, "\n\n"), systemPromptOverride
}

// runHook runs one hook, recovering a panic, and returns early when ctx is
// done.
func runHook(ctx context.Context, h Hook, in HookInput) (HookResult, error) {
	if ctx.Done() == nil {
		return callHook(ctx, h, in)
	}
	type outcome struct {
		res HookResult
		err error
	}
	// Buffered: an abandoned hook can still deliver its outcome and end.
	done := make(chan outcome, 1)
	go func() {
		res, err := callHook(ctx, h, in)
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		return o.res, o.err
	case <-ctx.Done():
		select {
		case o := <-done: // finished just in time
			return o.res, o.err
		default:
		}
		return HookResult{}, fmt.Errorf("abandoned, still running: %w", context.Cause(ctx))
	}
}

// callHook calls h, turning a panic into an error.
func callHook(ctx context.Context, h Hook, in HookInput) (res HookResult, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = HookResult{}, fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return h.BeforeStart(ctx, in)
}

// JoinPrompt returns the prompt a run sends the model: prependContext and
// prompt separated by a blank line, or prompt alone when prependContext is
// empty.
func JoinPrompt(prependContext, prompt string) string {
	if prependContext == "" {
		return prompt
	}
	return prependContext + "\n\n" + prompt
}
