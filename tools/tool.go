// Package tools defines what the run loop calls when a model asks for a tool,
// and holds the built-in tools that work inside a run's workspace directory:
// read, write, edit and apply_patch ([Builtin]) and, only when the operator
// turns them on, exec ([Exec]), a shell confined by package sandbox,
// process ([Processes]), background commands in the same sandbox, and
// memory_search and memory_get ([Memory]) over the workspace's memory
// files.
//
// Files: tool.go (Tool, Set, List), policy.go, names.go, workspace.go and
// path.go (the workspace and its confinement), read.go, write.go,
// edit.go, applypatch.go, exec.go and output.go (exec's head and tail),
// process.go and ring.go (background processes and their output),
// memory.go (the memory tools; ranking in tools/memsearch).
//
// A tool failure is never a run failure: whatever a tool returns as an error
// becomes an isError tool result that the model sees.
package tools

import (
	"context"

	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
)

// Tool is one callable tool.
type Tool interface {
	// Spec is the definition offered to the model.
	Spec() provider.Tool
	// Call runs the tool. A returned error becomes an isError result whose
	// text is the error's message; Call must not panic on any arguments.
	Call(ctx context.Context, call Call) (Result, error)
}

// Call is one tool call of the model.
type Call struct {
	ID   string
	Name string
	// Args are the decoded arguments; nil when the model sent none.
	Args map[string]any
	// Update, when set, receives partial results while the tool runs.
	Update func(partial Result)
	// Key is the call's idempotency key: the same for every execution of
	// this call (a turn re-run after its worker died asks again with the
	// same key), different for every other call. Remote tools receive it
	// in a header so a tool server can de-duplicate; "" outside a run.
	Key string
}

// Idempotent is implemented by tools that are safe to run again with the
// same arguments (reading, or writing the same content). A call of such a
// tool whose outcome was lost with its worker is run again on the turn's
// re-run; any other tool's is reported to the model as unknown instead.
type Idempotent interface {
	Idempotent() bool
}

// IsIdempotent reports whether t declares itself idempotent.
func IsIdempotent(t Tool) bool {
	i, ok := t.(Idempotent)
	return ok && i.Idempotent()
}

// TurnEnder is implemented by tools whose successful call ends the turn
// (sessions_yield: the session waits for its sub-agents, whose results
// arrive as messages of their own). Once every call of the model's reply
// has its result, the run makes no further model call and ends with the
// assistant's text so far; a failed call (an error result) ends nothing.
type TurnEnder interface {
	EndsTurn() bool
}

// EndsTurn reports whether a successful call of t ends the turn.
func EndsTurn(t Tool) bool {
	e, ok := t.(TurnEnder)
	return ok && e.EndsTurn()
}

// Result is a tool's answer.
type Result struct {
	// Content is what the model sees: text and image blocks.
	Content []message.Block
	// Details is kept in the transcript and events but never sent to models.
	Details map[string]any
	// IsError marks a failed call.
	IsError bool
}

// TextResult returns a result with one text block.
func TextResult(text string) Result {
	return Result{Content: []message.Block{message.Text(text)}}
}

// ErrorResult returns an isError result with one text block.
func ErrorResult(text string) Result {
	return Result{Content: []message.Block{message.Text(text)}, IsError: true}
}

// Set is the tools one run can call.
type Set interface {
	// Specs lists the tool definitions in a stable order.
	Specs() []provider.Tool
	// Lookup finds a tool by its exact name.
	Lookup(name string) (Tool, bool)
}

// List is a Set backed by a slice; later tools with the same name replace
// earlier ones.
type List []Tool

// Specs implements Set.
func (l List) Specs() []provider.Tool {
	out := make([]provider.Tool, 0, len(l))
	seen := make(map[string]int, len(l))
	for _, t := range l {
		s := t.Spec()
		if i, ok := seen[s.Name]; ok {
			out[i] = s
			continue
		}
		seen[s.Name] = len(out)
		out = append(out, s)
	}
	return out
}

// Lookup implements Set.
func (l List) Lookup(name string) (Tool, bool) {
	for i := len(l) - 1; i >= 0; i-- {
		if l[i].Spec().Name == name {
			return l[i], true
		}
	}
	return nil, false
}
