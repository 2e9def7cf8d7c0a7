package events

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// RunSettings are a session's stored run settings, or a change to them:
// how the session's turns run when their message does not say. The fields
// set replace the stored ones (Tools as a whole: an empty Tools clears the
// stored tool policy); Reset first clears every stored run setting. Unset
// fields fall back to the worker's defaults. A message's own Model,
// Thinking and AuthProfile win over the stored ones.
type RunSettings struct {
	Model    string `json:"model,omitempty" msgpack:"model,omitempty"`       // "provider/model-id"; must pass the fleet's model allowlist when used
	Thinking string `json:"thinking,omitempty" msgpack:"thinking,omitempty"` // thinking level
	// AuthProfile pins the session's turns to one auth profile (the run
	// uses only it, even while it cools down); each turn refuses it
	// (invalid_input) unless the fleet's operator made it pinnable and it
	// exists and is not disabled. Without it a session sticks to the
	// profile that answered its last turn, and rotates away from it when
	// it fails.
	AuthProfile       string      `json:"authProfile,omitempty" msgpack:"authProfile,omitempty"`
	HistoryLimit      int         `json:"historyLimit,omitempty" msgpack:"historyLimit,omitempty"`           // user turns kept in requests; 1..MaxHistoryLimit
	MaxToolIterations int         `json:"maxToolIterations,omitempty" msgpack:"maxToolIterations,omitempty"` // model calls of a turn's tool loop, within the worker's limit
	MaxToolRepeats    int         `json:"maxToolRepeats,omitempty" msgpack:"maxToolRepeats,omitempty"`       // the same tool call failing the same way this often stops the turn (tool_loop), within the worker's limit
	Tools             *ToolPolicy `json:"tools,omitempty" msgpack:"tools,omitempty"`                         // narrows the worker's tool policy
	// Verbose is "on" or "off" (unset: on): off leaves the tool events
	// (start, update, result) out of the run's events; the final result
	// is the same. The chat command /verbose sets it.
	Verbose string `json:"verbose,omitempty" msgpack:"verbose,omitempty"`
	// Reasoning is "on", "off" or "stream" (unset: stream): off leaves
	// the thinking events out of the run's events (the model still thinks
	// at its thinking level); on and stream publish them as they come.
	// The chat command /reasoning sets it.
	Reasoning string `json:"reasoning,omitempty" msgpack:"reasoning,omitempty"`
	Reset     bool   `json:"reset,omitempty" msgpack:"reset,omitempty"` // clear the stored run settings first
}

// ToolPolicy is a session's tool policy: tool name patterns ("exec",
// "web_*"; * and ? match) the session allows, denies, or wants to approve
// call by call. It applies on top of the worker's policy, so it can only
// narrow it: a tool the worker refuses stays refused.
type ToolPolicy struct {
	Allow   []string `json:"allow,omitempty" msgpack:"allow,omitempty"`
	Deny    []string `json:"deny,omitempty" msgpack:"deny,omitempty"`
	Approve []string `json:"approve,omitempty" msgpack:"approve,omitempty"`
}

// Bounds of stored run settings.
const (
	MaxHistoryLimit      = 100000
	MaxToolIterationsSet = 10000
	MaxToolRepeatsSet    = 1000
	MaxToolPatterns      = 64 // per list
	maxProfileBytes      = 128
)

// toolPatternRE is a tool name pattern: a tool name (toolNameRE) that may
// hold the wildcards * and ?.
var toolPatternRE = regexp.MustCompile(`^[A-Za-z0-9_*?-]{1,64}$`)

// Validate checks the run settings' values.
func (r *RunSettings) Validate() error {
	if err := validateRunChoices("runSettings.", r.Model, r.Thinking, r.AuthProfile); err != nil {
		return err
	}
	switch {
	case r.HistoryLimit < 0 || r.HistoryLimit > MaxHistoryLimit:
		return &DecodeError{Field: "runSettings.historyLimit", Reason: fmt.Sprintf("%d is not between 1 and %d", r.HistoryLimit, MaxHistoryLimit)}
	case r.MaxToolIterations < 0 || r.MaxToolIterations > MaxToolIterationsSet:
		return &DecodeError{Field: "runSettings.maxToolIterations", Reason: fmt.Sprintf("%d is not between 1 and %d", r.MaxToolIterations, MaxToolIterationsSet)}
	case r.MaxToolRepeats < 0 || r.MaxToolRepeats > MaxToolRepeatsSet:
		return &DecodeError{Field: "runSettings.maxToolRepeats", Reason: fmt.Sprintf("%d is not between 1 and %d", r.MaxToolRepeats, MaxToolRepeatsSet)}
	}
	if r.Verbose != "" && !VerboseLevels[r.Verbose] {
		return &DecodeError{Field: "runSettings.verbose", Reason: fmt.Sprintf("%q is not on or off", clip(r.Verbose))}
	}
	if r.Reasoning != "" && !ReasoningLevels[r.Reasoning] {
		return &DecodeError{Field: "runSettings.reasoning", Reason: fmt.Sprintf("%q is not on, off or stream", clip(r.Reasoning))}
	}
	if r.Tools != nil {
		return r.Tools.validate("runSettings.tools")
	}
	return nil
}

// VerboseLevels and ReasoningLevels are the values RunSettings.Verbose
// and RunSettings.Reasoning take.
var (
	VerboseLevels   = map[string]bool{"on": true, "off": true}
	ReasoningLevels = map[string]bool{"on": true, "off": true, "stream": true}
)

func (p *ToolPolicy) validate(field string) error {
	for _, l := range []struct {
		name string
		list []string
	}{{"allow", p.Allow}, {"deny", p.Deny}, {"approve", p.Approve}} {
		if len(l.list) > MaxToolPatterns {
			return &DecodeError{Field: field + "." + l.name, Reason: fmt.Sprintf("%d patterns, the limit is %d", len(l.list), MaxToolPatterns)}
		}
		for i, pat := range l.list {
			if !toolPatternRE.MatchString(pat) {
				return &DecodeError{Field: fmt.Sprintf("%s.%s[%d]", field, l.name, i),
					Reason: fmt.Sprintf("%q is not a tool name pattern (1-64 of A-Z a-z 0-9 _ - * ?)", clip(pat))}
			}
		}
	}
	return nil
}

func (p *ToolPolicy) empty() bool {
	return p == nil || len(p.Allow) == 0 && len(p.Deny) == 0 && len(p.Approve) == 0
}

// thinkingLevels are the thinking levels a message or run settings may
// name (case-insensitive).
var thinkingLevels = map[string]bool{
	"off": true, "minimal": true, "low": true, "medium": true, "high": true, "xhigh": true,
}

// maxModelRefBytes bounds a "provider/model-id".
const maxModelRefBytes = 200

// validateRunChoices is the one home of the rules for the three choices
// both a message (for its own turn) and a session's run settings (for its
// later turns) make: model, thinking level and auth profile. An empty value
// is unset. field prefixes the offending field's name ("" for a message's
// own fields, "runSettings." for stored ones); the reason is the same on
// both paths.
func validateRunChoices(field, model, thinking, authProfile string) error {
	switch {
	case model != "" && !validModelRef(model):
		return &DecodeError{Field: field + "model", Reason: fmt.Sprintf("%q is not provider/model-id", clip(model))}
	case thinking != "" && !thinkingLevels[strings.ToLower(thinking)]:
		return &DecodeError{Field: field + "thinking", Reason: fmt.Sprintf("unknown thinking level %q (off, minimal, low, medium, high, xhigh)", clip(thinking))}
	case authProfile != "" && !validProfileID(authProfile):
		return &DecodeError{Field: field + "authProfile", Reason: fmt.Sprintf("%q is not an auth profile id (1-%d printable bytes, no spaces)", clip(authProfile), maxProfileBytes)}
	}
	return nil
}

// validModelRef accepts "provider/model-id": both parts set, at most
// maxModelRefBytes of UTF-8, no whitespace.
func validModelRef(s string) bool {
	p, id, ok := strings.Cut(s, "/")
	return ok && p != "" && id != "" && len(s) <= maxModelRefBytes && utf8.ValidString(s) && !strings.ContainsAny(s, " \t\r\n")
}

// validProfileID accepts an auth profile id as the profiles file names
// them ("anthropic:default", "openai:work-2"): printable, no spaces.
func validProfileID(s string) bool {
	if len(s) == 0 || len(s) > maxProfileBytes || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

// Apply returns the stored run settings r (nil = none) changed by ch; nil
// when none remain. The thinking level is stored in lower case.
func (r *RunSettings) Apply(ch *RunSettings) *RunSettings {
	var out RunSettings
	if r != nil && !ch.Reset {
		out = *r
	}
	out.Reset = false
	if ch.Model != "" {
		out.Model = ch.Model
	}
	if ch.Thinking != "" {
		out.Thinking = strings.ToLower(ch.Thinking)
	}
	if ch.AuthProfile != "" {
		out.AuthProfile = ch.AuthProfile
	}
	if ch.HistoryLimit != 0 {
		out.HistoryLimit = ch.HistoryLimit
	}
	if ch.MaxToolIterations != 0 {
		out.MaxToolIterations = ch.MaxToolIterations
	}
	if ch.MaxToolRepeats != 0 {
		out.MaxToolRepeats = ch.MaxToolRepeats
	}
	if ch.Verbose != "" {
		out.Verbose = ch.Verbose
	}
	if ch.Reasoning != "" {
		out.Reasoning = ch.Reasoning
	}
	if ch.Tools != nil {
		out.Tools = nil
		if !ch.Tools.empty() {
			t := ToolPolicy{Allow: clone(ch.Tools.Allow), Deny: clone(ch.Tools.Deny), Approve: clone(ch.Tools.Approve)}
			out.Tools = &t
		}
	}
	if out == (RunSettings{}) {
		return nil
	}
	return &out
}

func clone(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return append([]string(nil), s...)
}

// String describes the run settings, e.g. "model acme/m1, thinking high,
// tools deny exec".
func (r *RunSettings) String() string {
	if r == nil {
		return "defaults"
	}
	var parts []string
	add := func(name, v string) {
		if v != "" {
			parts = append(parts, name+" "+v)
		}
	}
	add("model", r.Model)
	add("thinking", r.Thinking)
	add("auth profile", r.AuthProfile)
	add("verbose", r.Verbose)
	add("reasoning", r.Reasoning)
	if r.HistoryLimit != 0 {
		parts = append(parts, fmt.Sprintf("history limit %d", r.HistoryLimit))
	}
	if r.MaxToolIterations != 0 {
		parts = append(parts, fmt.Sprintf("tool-loop limit %d", r.MaxToolIterations))
	}
	if r.MaxToolRepeats != 0 {
		parts = append(parts, fmt.Sprintf("tool-repeat limit %d", r.MaxToolRepeats))
	}
	if t := r.Tools; !t.empty() {
		add("tools allow", strings.Join(t.Allow, " "))
		add("tools deny", strings.Join(t.Deny, " "))
		add("tools approve", strings.Join(t.Approve, " "))
	}
	if len(parts) == 0 {
		return "defaults"
	}
	return strings.Join(parts, ", ")
}

// Settings are what a lane stores under <token>.settings (as JSON): the
// session's queue settings, whose fields stay at the top level as records
// written before run settings existed have them, and its run settings.
// Both change together, exactly between two of the lane's messages.
type Settings struct {
	QueueSettings
	Run *RunSettings `json:"run,omitempty" msgpack:"run,omitempty"`
}

// Validate checks stored settings.
func (s *Settings) Validate() error {
	if err := s.QueueSettings.Validate(); err != nil {
		return err
	}
	if s.Run != nil {
		return s.Run.Validate()
	}
	return nil
}

// Apply returns the stored settings s (nil = none) changed by a settings
// message's queue and run changes (either may be nil: that part stays).
func (s *Settings) Apply(q *QueueSettings, r *RunSettings) *Settings {
	var out Settings
	if s != nil {
		out = *s
	}
	if q != nil {
		var stored *QueueSettings
		if s != nil {
			stored = &s.QueueSettings
		}
		out.QueueSettings = *stored.Apply(q)
	}
	if r != nil {
		out.Run = out.Run.Apply(r)
	}
	return &out
}

// Queue returns the stored queue settings (nil for none).
func (s *Settings) Queue() *QueueSettings {
	if s == nil {
		return nil
	}
	return &s.QueueSettings
}

// RunSettings returns the stored run settings (nil for none).
func (s *Settings) RunSettings() *RunSettings {
	if s == nil {
		return nil
	}
	return s.Run
}

// String describes the settings in force: "queue settings: …", followed
// by "; run settings: …" when any are stored.
func (s *Settings) String() string {
	text := "queue settings: " + s.Queue().String()
	if r := s.RunSettings(); r != nil {
		text += "; run settings: " + r.String()
	}
	return text
}

// SessionState is what a session carries from turn to turn besides its
// transcript and settings. The lane keeps it in the session's newest turn
// record, so it changes exactly when a turn commits: a turn run again
// after a crash is never counted twice.
type SessionState struct {
	// AuthProfile is the auth profile that answered the session's last
	// model call: its next turn starts on it (provider prompt caches stay
	// warm) unless a message or the session's settings pin another.
	AuthProfile string `json:"authProfile,omitempty" msgpack:"authProfile,omitempty"`
	// Usage is the running total of every committed turn's usage: every
	// model call's tokens and cost summed.
	Usage *UsageMeta `json:"usage,omitempty" msgpack:"usage,omitempty"`
	// Turns counts the committed turns whose usage is in Usage.
	Turns int64 `json:"turns,omitempty" msgpack:"turns,omitempty"`
	// Approvals are the calls this fleet left waiting for the user's
	// approval at the end of the transcript (the Approval calls of the
	// final event of the last turn that added to it): an answer
	// "approve" runs one of these and nothing else, whatever calls the
	// transcript shows (an import or a crafted history can put any call
	// there). Every turn that adds to the transcript replaces them.
	Approvals []ApprovalCall `json:"approvals,omitempty" msgpack:"approvals,omitempty"`
	// Parent is, for a sub-agent session, the session and run that
	// spawned it (from its spawn message); Delivered once its completion
	// was committed for delivery.
	Parent *Parent `json:"parent,omitempty" msgpack:"parent,omitempty"`
	// Children are the sub-agents this session spawned whose completion
	// it has not received: pending children.
	Children []Child `json:"children,omitempty" msgpack:"children,omitempty"`
	// ChildUsage is the part of Usage its sub-agents used: each child's
	// whole use, added when its completion is delivered.
	ChildUsage *UsageMeta `json:"childUsage,omitempty" msgpack:"childUsage,omitempty"`
}

// ApprovalCall is a call waiting for the user's approval: its id and its
// tool's name.
type ApprovalCall struct {
	ID   string `json:"id" msgpack:"id"`
	Name string `json:"name" msgpack:"name"`
}

// ApprovalCalls returns the calls of pending that wait for approval (nil
// when none do).
func ApprovalCalls(pending []PendingCall) []ApprovalCall {
	var out []ApprovalCall
	for _, c := range pending {
		if c.Approval {
			out = append(out, ApprovalCall{ID: c.ID, Name: c.Name})
		}
	}
	return out
}

// Plus returns the sum of u and v (nil is zero; nil when both are).
func (u *UsageMeta) Plus(v *UsageMeta) *UsageMeta {
	if u == nil && v == nil {
		return nil
	}
	var a, b UsageMeta
	if u != nil {
		a = *u
	}
	if v != nil {
		b = *v
	}
	out := &UsageMeta{Input: a.Input + b.Input, Output: a.Output + b.Output, CacheRead: a.CacheRead + b.CacheRead,
		CacheWrite: a.CacheWrite + b.CacheWrite, Total: a.Total + b.Total}
	if a.Cost != nil || b.Cost != nil {
		var x, y CostMeta
		if a.Cost != nil {
			x = *a.Cost
		}
		if b.Cost != nil {
			y = *b.Cost
		}
		out.Cost = &CostMeta{Input: x.Input + y.Input, Output: x.Output + y.Output, CacheRead: x.CacheRead + y.CacheRead,
			CacheWrite: x.CacheWrite + y.CacheWrite, Total: x.Total + y.Total}
	}
	return out
}

// MaxSettingsBytes bounds a stored settings record.
const MaxSettingsBytes = 64 << 10

// DecodeSettings reads a stored settings record (JSON; nil or empty = none
// stored) and checks it.
func DecodeSettings(data []byte) (*Settings, error) {
	if len(data) == 0 {
		return nil, nil
	}
	if len(data) > MaxSettingsBytes {
		return nil, &DecodeError{Field: "settings", Reason: fmt.Sprintf("%d bytes, the limit is %d", len(data), MaxSettingsBytes), Err: ErrTooLarge}
	}
	var s Settings
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, &DecodeError{Field: "settings", Reason: "malformed JSON: " + jsonReason(err), Err: err}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// EncodeSettings encodes settings for the store.
func EncodeSettings(s *Settings) ([]byte, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("events: encode settings: %w", err)
	}
	return b, nil
}
