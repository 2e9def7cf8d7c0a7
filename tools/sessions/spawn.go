package sessions

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/subagent"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/internal/toolargs"
)

// Bounds of a spawn.
const (
	// maxTaskBytes caps a task's text.
	maxTaskBytes = 32 << 10
	// maxLabelBytes caps a label (events' bound on lineage labels).
	maxLabelBytes = 128
)

// maxDepth and maxChildren are the policy's limits, defaults filled in.
func (p Policy) maxDepth() int {
	if p.MaxDepth == 0 {
		return subagent.MaxDepthDefault
	}
	return p.MaxDepth
}

func (p Policy) maxChildren() int {
	if p.MaxChildren == 0 {
		return subagent.MaxChildrenDefault
	}
	return p.MaxChildren
}

// TaskHeader is the line a spawned session's task starts with.
func TaskHeader(parent string) string {
	return fmt.Sprintf("[Task from session %s, which spawned you as its sub-agent with sessions_spawn. Do the task; your final reply is delivered to that session as your result.]", parent)
}

type spawnTool struct{ r *run }

// Idempotent: a re-run names the same child (subagent.ID of the call's
// key) and publishes the same message id, which the stream drops.
func (spawnTool) Idempotent() bool { return true }

func (t spawnTool) Spec() provider.Tool {
	return provider.Tool{
		Name: subagent.ToolSpawn,
		Description: fmt.Sprintf("Start a sub-agent: a new session of its own that works on task in the background. This returns at once with the child's session key; "+
			"when the child finishes, its final reply arrives in this session as a message marked as a sub-agent result (not from the user), and you answer in a new turn. "+
			"Do not poll for it: end your turn (sessions_yield) and wait. At most %d sub-agents per turn, nested at most %d deep; agentId picks another agent of this %s.",
			t.r.p.maxChildren(), t.r.p.maxDepth(), t.r.scopeName()),
		Parameters: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"task":    map[string]any{"type": "string", "description": "What the sub-agent should do: everything it needs to know, it does not see this conversation"},
				"label":   map[string]any{"type": "string", "description": "A short name for the sub-agent"},
				"agentId": map[string]any{"type": "string", "description": "The agent to run (default: this session's own)"},
			},
			"required": []any{"task"},
		},
	}
}

func (t spawnTool) Call(ctx context.Context, c tools.Call) (tools.Result, error) {
	r := t.r
	task, _, err := toolargs.String(c.Args, "task", true)
	if err != nil {
		return tools.Result{}, err
	}
	label, _, err := toolargs.String(c.Args, "label", false)
	if err != nil {
		return tools.Result{}, err
	}
	target, _, err := toolargs.String(c.Args, "agentId", false)
	if err != nil {
		return tools.Result{}, err
	}
	label, target = strings.TrimSpace(label), strings.TrimSpace(target)
	switch {
	case strings.TrimSpace(task) == "":
		return tools.Result{}, errors.New("task is empty: say what the sub-agent should do")
	case len(task) > maxTaskBytes:
		return tools.Result{}, fmt.Errorf("task is %d bytes, more than %d: shorten it, or write the details to a file the sub-agent can read", len(task), maxTaskBytes)
	case !utf8.ValidString(task) || strings.IndexByte(task, 0) >= 0:
		return tools.Result{}, errors.New("task has invalid characters (not UTF-8, or NUL)")
	case len(label) > maxLabelBytes || !utf8.ValidString(label) || strings.ContainsAny(label, "\x00\r\n"):
		return tools.Result{}, fmt.Errorf("label must be one line of at most %d bytes", maxLabelBytes)
	case len(target) > 64 || strings.ContainsAny(target, ": \x00\r\n"):
		return tools.Result{}, errors.New("agentId is not an agent id")
	}
	if d := subagent.Depth(r.caller); d >= r.p.maxDepth() {
		return tools.Result{}, fmt.Errorf("this session is a sub-agent at depth %d, the deepest allowed (%d): it cannot spawn sub-agents; do the work yourself", d, r.p.maxDepth())
	}
	id := c.Key
	if id == "" {
		id = r.runID + "." + c.ID
	}
	child, err := subagent.ChildKey(r.caller, target, subagent.ID(r.caller, id))
	if err != nil {
		return tools.Result{}, fmt.Errorf("no sub-agent was started: %v", err)
	}
	if !r.p.Allows(r.caller, child) {
		return tools.Result{}, fmt.Errorf("agent %.64q is out of reach: sub-agents run in this session's own %s (the operator's --session-tools policy)", target, r.scopeName())
	}
	if n := r.spawned.Add(1); int(n) > r.p.maxChildren() {
		r.spawned.Add(-1)
		return tools.Result{}, fmt.Errorf("this turn has spawned %d sub-agents, the most allowed: wait for their results (sessions_yield), or do the rest yourself", r.p.maxChildren())
	}
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails (Go 1.24+)
	in := &events.Inbound{ID: "spawn-" + subagent.ID(r.caller, id), Text: TaskHeader(r.caller) + "\n\n" + task, Mode: "followup",
		Parent: &events.Parent{Session: r.caller, Run: r.runID, Label: label, Nonce: hex.EncodeToString(nonce), Ancestors: r.lineage}}
	// The stream's de-duplication key is the nonce (nobody else knows it:
	// that de-duplication is stream-wide); a spawn made again after a
	// crash has another, and the child's lane drops it by in.ID.
	runID, err := r.b.Spawn(ctx, child, in, "spawn-"+in.Parent.Nonce)
	if err != nil {
		r.spawned.Add(-1)
		return tools.Result{}, fmt.Errorf("the sub-agent was not started: %v", err)
	}
	text := fmt.Sprintf("Sub-agent started: session %s, run %s. Its result will arrive in this session as a message once it finishes; end your turn with sessions_yield to wait for it.", child, runID)
	d := map[string]any{"status": "accepted", "childSessionKey": child, "runId": runID}
	if label != "" {
		d["label"] = label
	}
	return tools.Result{Content: []message.Block{message.Text(text)}, Details: d}, nil
}

type yieldTool struct{ r *run }

func (yieldTool) Idempotent() bool { return true }

// EndsTurn: the run makes no model call after the reply that yielded
// (tools.TurnEnder); the turn ends with its text so far.
func (yieldTool) EndsTurn() bool { return true }

func (yieldTool) Spec() provider.Tool {
	return provider.Tool{
		Name: "sessions_yield",
		Description: "End this turn to wait for your sub-agents: the turn ends once this reply's tool calls have their results (you get no further reply in it, so say anything the user should read in this same reply). " +
			"Each sub-agent's result arrives later as its own message, and you answer it in a new turn.",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{}},
	}
}

func (yieldTool) Call(context.Context, tools.Call) (tools.Result, error) {
	return tools.Result{Content: []message.Block{message.Text("Yielded: this turn has ended. Your sub-agents' results will arrive as messages, each answered in a turn of its own.")},
		Details: map[string]any{"status": "yielded"}}, nil
}
