package agents

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/lanefleet/lanefleet/events"
)

// DefaultID is the agent of a session key that names none (the
// worker's --default-agent when not set), as in OpenClaw.
const DefaultID = "main"

// Bounds of a definition.
const (
	MaxIDBytes           = 64
	MaxNameBytes         = 128
	MaxSystemPromptBytes = 64 << 10
	MaxFallbacks         = 16
	MaxSkills            = 128
	MaxSkillBytes        = 64
	// MaxRecordBytes bounds an encoded definition (msgpack or JSON).
	MaxRecordBytes = 256 << 10
	// MaxFilePathBytes bounds a workspace file's path.
	MaxFilePathBytes = 256
	// MaxFileBytes bounds one workspace file (as agentprompt reads at
	// most 2 MiB of a context file).
	MaxFileBytes = 2 << 20
	// MaxFiles bounds the files of one workspace.
	MaxFiles = 512
)

// ErrInvalid is wrapped by every error Validate, Decode and ParseJSON
// return for a definition that breaks a rule.
var ErrInvalid = errors.New("agents: invalid agent")

// Tool profiles: the base allow list of an agent's tools before its own
// allow and deny lists (OpenClaw's tools.profile). An empty profile is
// ProfileFull.
const (
	// ProfileFull restricts nothing beyond the agent's lists.
	ProfileFull = "full"
	// ProfileCoding allows the workspace tools: files, patches, commands,
	// background processes and memory.
	ProfileCoding = "coding"
	// ProfileMessaging allows the session tools only.
	ProfileMessaging = "messaging"
	// ProfileMinimal allows no tool.
	ProfileMinimal = "minimal"
)

// profiles are the tool allow lists of the profiles; nil restricts
// nothing. The minimal profile's pattern matches no tool name (tool names
// never hold a space, and the allow list must not be empty, which would
// allow everything).
var profiles = map[string][]string{
	ProfileFull:      nil,
	ProfileCoding:    {"read", "write", "edit", "apply_patch", "exec", "process", "memory_*"},
	ProfileMessaging: {"sessions_*"},
	ProfileMinimal:   {"-"},
}

// Agent is a named agent's definition. The zero value of every field but
// ID means "as the worker is configured".
type Agent struct {
	// ID names the agent in session keys ("agent:<id>:…"): 1-64 of a-z,
	// 0-9, '_' and '-', starting with a letter or digit.
	ID string `json:"id" msgpack:"id"`
	// Name is the display name.
	Name string `json:"name,omitempty" msgpack:"name,omitempty"`
	// SystemPrompt replaces the worker's base prompt (--system-prompt-file);
	// the workspace, skills and identity files are still added after it.
	SystemPrompt string `json:"systemPrompt,omitempty" msgpack:"systemPrompt,omitempty"`
	// Model is the agent's default model, "provider/model-id": a session
	// setting and a message's own model still win over it.
	Model string `json:"model,omitempty" msgpack:"model,omitempty"`
	// Fallbacks replace the worker's fallback models when not empty.
	Fallbacks []string `json:"fallbacks,omitempty" msgpack:"fallbacks,omitempty"`
	// Thinking is the default thinking level (off, minimal, low, medium,
	// high, xhigh).
	Thinking string `json:"thinking,omitempty" msgpack:"thinking,omitempty"`
	// Tools is the agent's tool profile and policy: it narrows the
	// operator's policy (a tool the worker does not allow stays refused)
	// and is narrowed by a session's own.
	Tools *ToolPolicy `json:"tools,omitempty" msgpack:"tools,omitempty"`
	// Skills, when not nil, are the only skills the agent is offered (by
	// name); nil offers every skill, an empty list none.
	Skills []string `json:"skills,omitempty" msgpack:"skills,omitempty"`
	// Workspace names the workspace whose files (AGENTS.md, SOUL.md,
	// USER.md, MEMORY.md, HEARTBEAT.md, skills/…) the agent's sessions
	// share; "" is the agent's id. Two agents naming one workspace share
	// it. Same rules as ID.
	Workspace string `json:"workspace,omitempty" msgpack:"workspace,omitempty"`
	// ChatCommands, when false, makes the agent's sessions send /new,
	// /status, … to the model as text; nil or true answers them as the
	// worker does.
	ChatCommands *bool `json:"chatCommands,omitempty" msgpack:"chatCommands,omitempty"`
}

// ToolPolicy is an agent's tool profile and its allow, deny and approve
// lists (tool name patterns, * and ? match).
type ToolPolicy struct {
	// Profile is full (the default), coding, messaging or minimal.
	Profile string `json:"profile,omitempty" msgpack:"profile,omitempty"`
	events.ToolPolicy
}

// WorkspaceName is the workspace the agent's files are in.
func (a *Agent) WorkspaceName() string {
	if a.Workspace != "" {
		return a.Workspace
	}
	return a.ID
}

// CommandsOn reports whether the agent's sessions answer chat commands
// (when the worker does).
func (a *Agent) CommandsOn() bool { return a.ChatCommands == nil || *a.ChatCommands }

// Policies are the agent's tool policies, applied together (all must
// allow a tool): its profile's allow list, then its own lists. Empty for
// an agent without a tool policy.
func (a *Agent) Policies() []events.ToolPolicy {
	if a.Tools == nil {
		return nil
	}
	var out []events.ToolPolicy
	if allow := profiles[a.Tools.Profile]; allow != nil {
		out = append(out, events.ToolPolicy{Allow: allow})
	}
	if p := a.Tools.ToolPolicy; len(p.Allow)+len(p.Deny)+len(p.Approve) > 0 {
		out = append(out, p)
	}
	return out
}

// Validate checks every field against its rules and bounds. Its errors
// wrap ErrInvalid and name the field.
func (a *Agent) Validate() error {
	if err := ValidID(a.ID); err != nil {
		return err
	}
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
	}
	switch {
	case len(a.Name) > MaxNameBytes || !utf8.ValidString(a.Name) || strings.ContainsAny(a.Name, "\x00\r\n"):
		return bad("name", "at most %d bytes of UTF-8 on one line", MaxNameBytes)
	case len(a.SystemPrompt) > MaxSystemPromptBytes || !utf8.ValidString(a.SystemPrompt) || strings.ContainsRune(a.SystemPrompt, 0):
		return bad("systemPrompt", "at most %d bytes of UTF-8 without NUL (it is %d bytes)", MaxSystemPromptBytes, len(a.SystemPrompt))
	case len(a.Fallbacks) > MaxFallbacks:
		return bad("fallbacks", "%d models, the limit is %d", len(a.Fallbacks), MaxFallbacks)
	case len(a.Skills) > MaxSkills:
		return bad("skills", "%d skills, the limit is %d", len(a.Skills), MaxSkills)
	}
	// The model, thinking level and tool lists follow a session's run
	// settings' rules (one home: events.RunSettings).
	rs := events.RunSettings{Model: a.Model, Thinking: a.Thinking}
	if a.Tools != nil {
		rs.Tools = &a.Tools.ToolPolicy
	}
	if err := rs.Validate(); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalid, strings.TrimPrefix(detail(err), "runSettings."))
	}
	for i, f := range a.Fallbacks {
		if err := (&events.RunSettings{Model: f}).Validate(); err != nil {
			return bad(fmt.Sprintf("fallbacks[%d]", i), "%.80q is not provider/model-id", f)
		}
	}
	if a.Tools != nil && a.Tools.Profile != "" {
		if _, ok := profiles[a.Tools.Profile]; !ok {
			return bad("tools.profile", "%.40q is not full, coding, messaging or minimal", a.Tools.Profile)
		}
	}
	for i, s := range a.Skills {
		if s == "" || len(s) > MaxSkillBytes || !nameChars(s, true) {
			return bad(fmt.Sprintf("skills[%d]", i), "%.80q is not a skill name (1-%d of a-z A-Z 0-9 _ - .)", s, MaxSkillBytes)
		}
	}
	if a.Workspace != "" {
		if err := ValidID(a.Workspace); err != nil {
			return bad("workspace", "%.80q is not a workspace name (an agent id's rules)", a.Workspace)
		}
	}
	return nil
}

// detail is a validation error's text without "invalid message: ".
func detail(err error) string {
	if de, ok := errors.AsType[*events.DecodeError](err); ok {
		return de.Detail()
	}
	return err.Error()
}

// ValidID checks an agent id (or workspace name): 1-64 of a-z, 0-9, '_'
// and '-', starting with a letter or digit. Its error wraps ErrInvalid.
func ValidID(id string) error {
	if id == "" || len(id) > MaxIDBytes || !nameChars(id, false) || id[0] == '-' || id[0] == '_' {
		return fmt.Errorf("%w: id: %.80q is not an agent id (1-%d of a-z 0-9 _ -, starting with a letter or digit)", ErrInvalid, id, MaxIDBytes)
	}
	return nil
}

// nameChars reports whether s is made of a-z, 0-9, '_' and '-' (and, with
// skill, A-Z and '.').
func nameChars(s string, skill bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '-':
		case skill && (c >= 'A' && c <= 'Z' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// ValidFilePath checks a workspace file's path: relative, slash-separated,
// clean (no "." or ".." element, no empty element), at most
// MaxFilePathBytes, each element of letters, digits, '_', '-' and '.',
// not starting with '.'. Its error wraps ErrInvalid.
func ValidFilePath(p string) error {
	bad := fmt.Errorf("%w: file: %.80q is not a workspace path (relative, clean, elements of A-Z a-z 0-9 _ - . not starting with '.')", ErrInvalid, p)
	if p == "" || len(p) > MaxFilePathBytes || path.Clean(p) != p || path.IsAbs(p) {
		return bad
	}
	for el := range strings.SplitSeq(p, "/") {
		if el == "" || el[0] == '.' || !nameChars(el, true) {
			return bad
		}
	}
	return nil
}

// Writable reports whether sessions may change a workspace file: the
// memory files (MEMORY.md, memory.md, memory/…) go back to the workspace
// when a turn changed them; every other file (identity, instructions,
// skills) is the operator's and is put back as stored at every turn.
func Writable(p string) bool {
	return p == "MEMORY.md" || p == "memory.md" || strings.HasPrefix(p, "memory/")
}
