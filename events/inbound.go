package events

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/vmihailenco/msgpack/v5"
)

// Version is the schema version this package writes and the highest it reads.
const Version = 1

// DefaultMaxPayload is the default limit on an inbound payload, in bytes.
const DefaultMaxPayload = 4 << 20

// Image is an image attached to an inbound message.
type Image struct {
	MimeType string `json:"mimeType" msgpack:"mimeType"`
	Data     string `json:"data" msgpack:"data"` // base64, no data: prefix
}

// Inbound is what a client publishes to agent.in.<lane>. Only Text (or an
// image) is required: `{"text":"hi"}` is a complete message.
type Inbound struct {
	V        int     `json:"v,omitempty" msgpack:"v,omitempty"`               // schema version; 0 means 1
	ID       string  `json:"id,omitempty" msgpack:"id,omitempty"`             // client message id (the Go client sends it as the Lanefleet-Msg-Id header too)
	Session  string  `json:"session,omitempty" msgpack:"session,omitempty"`   // optional; must match the subject when set
	Text     string  `json:"text,omitempty" msgpack:"text,omitempty"`         // the user's message
	Images   []Image `json:"images,omitempty" msgpack:"images,omitempty"`     // prompt images
	Mode     string  `json:"mode,omitempty" msgpack:"mode,omitempty"`         // queue mode for this message
	Model    string  `json:"model,omitempty" msgpack:"model,omitempty"`       // "provider/model-id"
	Thinking string  `json:"thinking,omitempty" msgpack:"thinking,omitempty"` // thinking level
	Sent     int64   `json:"sent,omitempty" msgpack:"sent,omitempty"`         // client send time, Unix ms
	// Tools are client tools: offered to the model for this run; a call to
	// one ends the run with stopReason "tool_calls" and pendingToolCalls,
	// and the client answers with ToolResults in its next message.
	Tools []ClientTool `json:"tools,omitempty" msgpack:"tools,omitempty"`
	// ToolResults answer the pending client tool calls of the session's
	// previous run. Text may then be empty.
	ToolResults []ToolResult `json:"toolResults,omitempty" msgpack:"toolResults,omitempty"`
	// QueueSettings makes this a settings message: instead of running a
	// turn, the lane stores the session's queue settings, which apply to
	// every later message of the session that has no Mode. It travels
	// through the lane like any message, so it takes effect exactly
	// between the messages sent before and after it. It carries nothing
	// else (no text, images or tools).
	QueueSettings *QueueSettings `json:"queueSettings,omitempty" msgpack:"queueSettings,omitempty"`
	// RunSettings makes this a settings message too (with or without
	// QueueSettings): the lane stores the session's run settings (model,
	// thinking level, auth profile, history and tool-loop limits, tool
	// policy), which apply to every later turn of the session, exactly
	// between the messages sent before and after it.
	RunSettings *RunSettings `json:"runSettings,omitempty" msgpack:"runSettings,omitempty"`
	// AuthProfile pins this message's turn to one auth profile; it wins
	// over the session's stored one and its sticky last profile. The fleet
	// refuses (invalid_input) a profile its operator did not make
	// pinnable, one it does not have and a disabled one.
	AuthProfile string `json:"authProfile,omitempty" msgpack:"authProfile,omitempty"`
	// Stop makes this a stop command: it ends the session's running turn
	// (its run ends interrupted) and drops the messages queued before it,
	// without running a prompt; its own run ends with a final event saying
	// what it stopped. It carries nothing else.
	Stop bool `json:"stop,omitempty" msgpack:"stop,omitempty"`
	// Heartbeat marks a scheduled check-in prompt (a heartbeat turn): it
	// runs when the session is idle and is dropped (error kind dropped)
	// when it arrives while the session is busy, instead of queueing
	// behind the turn (runtime spec §19). It never cuts or steers a turn.
	Heartbeat bool `json:"heartbeat,omitempty" msgpack:"heartbeat,omitempty"`
	// Parent makes this a sub-agent's spawn message (sessions_spawn): the
	// session and run that spawned it, to whose lane the session's
	// completion is delivered (package subagent).
	Parent *Parent `json:"parent,omitempty" msgpack:"parent,omitempty"`
	// Subagent makes this a sub-agent's completion, delivered to its
	// parent's lane: Text is the child's result as the parent's model
	// reads it (marked as a sub-agent's, not the user's).
	Subagent *SubagentResult `json:"subagent,omitempty" msgpack:"subagent,omitempty"`
}

// QueueSettings are a session's stored queue settings, or a change to them:
// the fields set replace the stored ones; Reset first clears everything.
// Unset fields fall back to the fleet's defaults: mode followup, and the
// reference's debounce 1000 ms, cap 20, drop summarize for collect mode.
type QueueSettings struct {
	Mode       string `json:"mode,omitempty" msgpack:"mode,omitempty"`             // a queue mode name or alias
	DebounceMs *int64 `json:"debounceMs,omitempty" msgpack:"debounceMs,omitempty"` // collect: quiet time before a queued batch runs; 0 is valid
	Cap        int    `json:"cap,omitempty" msgpack:"cap,omitempty"`               // collect: most messages merged into one turn (≥ 1)
	Drop       string `json:"drop,omitempty" msgpack:"drop,omitempty"`             // over the cap: old, new or summarize
	Reset      bool   `json:"reset,omitempty" msgpack:"reset,omitempty"`           // clear the stored settings first
}

// MaxDebounceMs bounds a debounce (one minute): a collect batch waits that
// long at most after its last message, and its lane's owner holds a slot
// meanwhile. lanes/queue clamps a stored longer one (queue.DebounceMax; a
// test pins that the two agree).
const MaxDebounceMs = 60 * 1000

// Validate checks the settings' values.
func (q *QueueSettings) Validate() error {
	switch {
	case q.Mode != "" && !validMode(q.Mode):
		return &DecodeError{Field: "queueSettings.mode", Reason: fmt.Sprintf("unknown queue mode %q", clip(q.Mode))}
	case q.DebounceMs != nil && (*q.DebounceMs < 0 || *q.DebounceMs > MaxDebounceMs):
		return &DecodeError{Field: "queueSettings.debounceMs", Reason: fmt.Sprintf("%d is not between 0 and %d", *q.DebounceMs, MaxDebounceMs)}
	case q.Cap < 0 || q.Cap > 1000:
		return &DecodeError{Field: "queueSettings.cap", Reason: fmt.Sprintf("%d is not between 1 and 1000", q.Cap)}
	}
	if _, ok := dropName(q.Drop); q.Drop != "" && !ok {
		return &DecodeError{Field: "queueSettings.drop", Reason: fmt.Sprintf("unknown drop policy %q (old, new, summarize)", clip(q.Drop))}
	}
	return nil
}

// Apply returns the stored settings q (nil = none) changed by ch. Mode and
// drop names are stored by their canonical names.
func (q *QueueSettings) Apply(ch *QueueSettings) *QueueSettings {
	var out QueueSettings
	if q != nil && !ch.Reset {
		out = *q
	}
	out.Reset = false
	if ch.Mode != "" {
		out.Mode, _ = modeName(ch.Mode)
	}
	if ch.DebounceMs != nil {
		d := *ch.DebounceMs
		out.DebounceMs = &d
	}
	if ch.Cap != 0 {
		out.Cap = ch.Cap
	}
	if ch.Drop != "" {
		out.Drop, _ = dropName(ch.Drop)
	}
	return &out
}

// The wire schema names queue modes and drop policies itself: it is a leaf
// package and validates at the edge without importing the lane runtime.
// lanes/queue's ParseMode and ParseDropPolicy read exactly these names (a
// test pins that the two agree).
var (
	modeNames = map[string]string{
		"steer": "steer", "steering": "steer", "queue": "steer", "queued": "steer",
		"followup": "followup", "follow-ups": "followup", "followups": "followup", "enqueue": "followup",
		"collect": "collect", "coalesce": "collect",
		"steer-backlog": "steer-backlog", "steer+backlog": "steer-backlog", "steer_backlog": "steer-backlog",
		"interrupt": "interrupt", "interrupts": "interrupt", "abort": "interrupt",
		"reject":   "reject",
		"rollback": "rollback",
	}
	dropNames = map[string]string{
		"old": "old", "oldest": "old",
		"new": "new", "newest": "new",
		"summarize": "summarize", "summary": "summarize",
	}
)

// modeName returns the canonical name of a queue mode name or alias
// (case-insensitive, trimmed), or false when there is none.
func modeName(s string) (string, bool) {
	m, ok := modeNames[strings.ToLower(strings.TrimSpace(s))]
	return m, ok
}

// dropName returns the canonical name of a drop policy name or alias
// (case-insensitive, trimmed), or false when there is none.
func dropName(s string) (string, bool) {
	d, ok := dropNames[strings.ToLower(strings.TrimSpace(s))]
	return d, ok
}

// String describes the settings, e.g. "mode collect, debounce 1000ms, cap 20, drop summarize".
func (q *QueueSettings) String() string {
	if q == nil {
		return "defaults"
	}
	var parts []string
	if q.Mode != "" {
		parts = append(parts, "mode "+q.Mode)
	}
	if q.DebounceMs != nil {
		parts = append(parts, fmt.Sprintf("debounce %dms", *q.DebounceMs))
	}
	if q.Cap != 0 {
		parts = append(parts, fmt.Sprintf("cap %d", q.Cap))
	}
	if q.Drop != "" {
		parts = append(parts, "drop "+q.Drop)
	}
	if len(parts) == 0 {
		return "defaults"
	}
	return strings.Join(parts, ", ")
}

// ClientTool is a tool the client executes itself.
type ClientTool struct {
	Name        string         `json:"name" msgpack:"name"`
	Description string         `json:"description,omitempty" msgpack:"description,omitempty"`
	Parameters  map[string]any `json:"parameters,omitempty" msgpack:"parameters,omitempty"` // JSON Schema object
}

// ToolResult is the client's answer to one pending tool call.
type ToolResult struct {
	ToolCallID string `json:"toolCallId" msgpack:"toolCallId"`
	Text       string `json:"text" msgpack:"text"`
	IsError    bool   `json:"isError,omitempty" msgpack:"isError,omitempty"`
}

// MaxClientTools bounds the client tools of one message.
const MaxClientTools = 64

// MaxTextBytes is the longest inbound text accepted.
const MaxTextBytes = 1 << 20

// DecodeError is an inbound payload or event that could not be decoded or is
// invalid. Its message is safe to show the sender.
type DecodeError struct {
	Field  string // the offending field, when known
	Reason string
	Err    error
}

func (e *DecodeError) Error() string { return "invalid message: " + e.Detail() }

// Detail is what is wrong, without saying it is a message (a stored
// record's error says what it is itself).
func (e *DecodeError) Detail() string {
	if e.Field != "" {
		return e.Field + ": " + e.Reason
	}
	return e.Reason
}

func (e *DecodeError) Unwrap() error { return e.Err }

// ErrTooLarge is wrapped by the DecodeError of an oversized payload.
var ErrTooLarge = errors.New("payload too large")

// IsJSON reports whether a payload is JSON: by its content type when one is
// given, else by its first non-space byte.
func IsJSON(contentType string, data []byte) bool {
	ct := strings.ToLower(strings.TrimSpace(contentType))
	if ct != "" {
		return strings.Contains(ct, "json")
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	return len(trimmed) > 0 && trimmed[0] == '{'
}

// MaxUnknownBytes bounds the bytes an inbound message's unknown top-level
// fields may hold (their names and values, as sent).
const MaxUnknownBytes = 64 << 10

// DecodeInbound decodes and validates an inbound payload. maxBytes ≤ 0 means
// DefaultMaxPayload. Unknown top-level fields (a newer sender's) are
// ignored, in JSON and msgpack alike, up to MaxUnknownBytes; an unknown
// field inside a known one (runSettings.temperature) is refused, as a
// setting that does nothing would be. A typo such as "txt" still fails: the
// message is then empty, and the error names what was ignored.
func DecodeInbound(contentType string, data []byte, maxBytes int) (*Inbound, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxPayload
	}
	if len(data) > maxBytes {
		return nil, &DecodeError{Reason: fmt.Sprintf("payload is %d bytes, the limit is %d", len(data), maxBytes), Err: ErrTooLarge}
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, &DecodeError{Reason: "empty payload"}
	}
	var (
		in      Inbound
		ignored []string // unknown top-level fields
	)
	if IsJSON(contentType, data) {
		err := decodeInboundJSON(data, &in)
		if isUnknownField(err) {
			var derr error
			if data, ignored, derr = dropUnknownJSON(data); derr != nil {
				return nil, derr
			}
			in = Inbound{}
			err = decodeInboundJSON(data, &in)
		}
		if err != nil {
			return nil, err
		}
	} else {
		err := unmarshalMsgpack(data, &in, true, MaxInboundValues)
		if isUnknownField(err) {
			var derr error
			if data, ignored, derr = dropUnknownMsgpack(data); derr != nil {
				return nil, derr
			}
			in = Inbound{}
			err = unmarshalMsgpack(data, &in, true, MaxInboundValues)
		}
		if err != nil {
			return nil, &DecodeError{Reason: "malformed msgpack: " + err.Error(), Err: err}
		}
	}
	if err := in.Validate(); err != nil {
		var de *DecodeError
		if len(ignored) > 0 && errors.As(err, &de) {
			de.Reason += fmt.Sprintf(" (ignored unknown fields: %s)", clip(strings.Join(ignored, ", ")))
		}
		return nil, err
	}
	return &in, nil
}

// decodeInboundJSON decodes one JSON object into in, refusing unknown fields.
func decodeInboundJSON(data []byte, in *Inbound) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(in); err != nil {
		return &DecodeError{Reason: "malformed JSON: " + jsonReason(err), Err: err}
	}
	if dec.More() {
		return &DecodeError{Reason: "malformed JSON: trailing data after the object"}
	}
	return nil
}

// isUnknownField reports whether err is a strict decoder's refusal of a
// field name (encoding/json's and msgpack's say so only in their text).
func isUnknownField(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "json: unknown field ") || strings.Contains(err.Error(), "msgpack: unknown field "))
}

// inboundFields are the names of Inbound's fields on the wire (the same in
// JSON and msgpack).
var inboundFields = func() []string {
	t := reflect.TypeFor[Inbound]()
	out := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}()

// knownField reports whether key names a field of Inbound: exactly for
// msgpack, ignoring case for JSON (as encoding/json matches names).
func knownField(key string, fold bool) bool {
	for _, f := range inboundFields {
		if key == f || fold && strings.EqualFold(key, f) {
			return true
		}
	}
	return false
}

// unknownTooLarge refuses unknown fields over MaxUnknownBytes.
func unknownTooLarge(n int) error {
	return &DecodeError{Reason: fmt.Sprintf("unknown fields hold %d bytes, the limit is %d", n, MaxUnknownBytes), Err: ErrTooLarge}
}

// dropUnknownJSON returns the JSON object data without its unknown
// top-level fields, and their names.
func dropUnknownJSON(data []byte) ([]byte, []string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, nil, &DecodeError{Reason: "malformed JSON: " + jsonReason(err), Err: err}
	}
	ignored, err := dropUnknown(obj, true)
	if err != nil {
		return nil, nil, err
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, nil, &DecodeError{Reason: "malformed JSON: " + err.Error(), Err: err}
	}
	return out, ignored, nil
}

// dropUnknownMsgpack returns the msgpack map data without its unknown
// top-level fields, and their names. data has passed checkMsgpack.
func dropUnknownMsgpack(data []byte) ([]byte, []string, error) {
	var obj map[string]msgpack.RawMessage
	if err := unmarshalMsgpack(data, &obj, false, MaxInboundValues); err != nil {
		return nil, nil, &DecodeError{Reason: "malformed msgpack: " + err.Error(), Err: err}
	}
	ignored, err := dropUnknown(obj, false)
	if err != nil {
		return nil, nil, err
	}
	out, err := msgpack.Marshal(obj)
	if err != nil {
		return nil, nil, &DecodeError{Reason: "malformed msgpack: " + err.Error(), Err: err}
	}
	return out, ignored, nil
}

// dropUnknown deletes obj's unknown top-level fields (knownField, in
// JSON's or msgpack's names) and returns their names, sorted, or an error
// when together they pass MaxUnknownBytes.
func dropUnknown[V ~[]byte](obj map[string]V, asJSON bool) ([]string, error) {
	var (
		ignored []string
		size    int
	)
	for k, v := range obj {
		if !knownField(k, asJSON) {
			size += len(k) + len(v)
			ignored = append(ignored, k)
			delete(obj, k)
		}
	}
	if size > MaxUnknownBytes {
		return nil, unknownTooLarge(size)
	}
	slices.Sort(ignored)
	return ignored, nil
}

func jsonReason(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v (at byte %d)", se, se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %q must be %s, not %s", te.Field, te.Type, te.Value)
	}
	return err.Error()
}

// Validate checks an inbound message's fields.
func (in *Inbound) Validate() error {
	switch {
	case in.V < 0 || in.V > Version:
		return &DecodeError{Field: "v", Reason: fmt.Sprintf("unsupported schema version %d (this worker reads up to %d)", in.V, Version)}
	case in.Session != "" && ValidateKey(in.Session) != nil:
		return &DecodeError{Field: "session", Reason: ValidateKey(in.Session).Error()}
	case in.IsSettings() && (in.Text != "" || len(in.Images) > 0 || len(in.Tools) > 0 || len(in.ToolResults) > 0 || in.Mode != "" || in.runFields()):
		return &DecodeError{Field: settingsField(in), Reason: "a settings message carries nothing else (no text, images, tools, mode, model, thinking or auth profile)"}
	case in.Heartbeat && (in.Stop || in.IsSettings()):
		return &DecodeError{Field: "heartbeat", Reason: "a heartbeat is a prompt, not a stop command or settings"}
	case in.Stop && (in.IsSettings() || in.Text != "" || len(in.Images) > 0 || len(in.Tools) > 0 || len(in.ToolResults) > 0 || in.Mode != "" || in.runFields()):
		return &DecodeError{Field: "stop", Reason: "a stop command carries nothing else (no text, images, tools, mode, model or settings)"}
	case !in.Stop && !in.IsSettings() && !in.Heartbeat && strings.TrimSpace(in.Text) == "" && len(in.Images) == 0 && len(in.ToolResults) == 0:
		return &DecodeError{Field: "text", Reason: "empty: a message needs text, an image or tool results"}
	case len(in.Text) > MaxTextBytes:
		return &DecodeError{Field: "text", Reason: fmt.Sprintf("%d bytes, the limit is %d", len(in.Text), MaxTextBytes), Err: ErrTooLarge}
	case !utf8.ValidString(in.Text):
		return &DecodeError{Field: "text", Reason: "not valid UTF-8"}
	case len(in.ID) > 128:
		return &DecodeError{Field: "id", Reason: "longer than 128 bytes"}
	case in.Mode != "" && !validMode(in.Mode):
		return &DecodeError{Field: "mode", Reason: fmt.Sprintf("unknown queue mode %q (followup, collect, steer, steer-backlog, interrupt, enqueue, reject, rollback)", clip(in.Mode))}
	}
	if err := validateRunChoices("", in.Model, in.Thinking, in.AuthProfile); err != nil {
		return err
	}
	if in.Parent != nil || in.Subagent != nil {
		switch {
		case in.Stop || in.IsSettings() || in.Heartbeat || (in.Parent != nil && in.Subagent != nil):
			return &DecodeError{Field: "parent", Reason: "a spawn or a completion is a prompt, and not both"}
		case in.Parent != nil:
			if err := in.Parent.Validate(); err != nil {
				return err
			}
		default:
			if err := in.Subagent.Validate(); err != nil {
				return err
			}
		}
	}
	if in.IsSettings() {
		if in.QueueSettings != nil {
			if err := in.QueueSettings.Validate(); err != nil {
				return err
			}
		}
		if in.RunSettings != nil {
			return in.RunSettings.Validate()
		}
		return nil
	}
	if err := validateTools(in); err != nil {
		return err
	}
	for i, img := range in.Images {
		field := fmt.Sprintf("images[%d]", i)
		if !strings.HasPrefix(img.MimeType, "image/") {
			return &DecodeError{Field: field + ".mimeType", Reason: fmt.Sprintf("%q is not an image type", clip(img.MimeType))}
		}
		if _, err := base64.StdEncoding.DecodeString(img.Data); err != nil || img.Data == "" {
			return &DecodeError{Field: field + ".data", Reason: "not valid base64"}
		}
	}
	return nil
}

// IsSettings reports whether in is a settings message: it changes the
// session's stored queue or run settings instead of running a turn.
func (in *Inbound) IsSettings() bool { return in.QueueSettings != nil || in.RunSettings != nil }

// runFields reports whether in names a turn's own run settings.
func (in *Inbound) runFields() bool {
	return in.Model != "" || in.Thinking != "" || in.AuthProfile != ""
}

func settingsField(in *Inbound) string {
	if in.QueueSettings != nil {
		return "queueSettings"
	}
	return "runSettings"
}

var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func validateTools(in *Inbound) error {
	if len(in.Tools) > MaxClientTools {
		return &DecodeError{Field: "tools", Reason: fmt.Sprintf("%d tools, the limit is %d", len(in.Tools), MaxClientTools)}
	}
	seen := make(map[string]bool, len(in.Tools))
	for i, t := range in.Tools {
		field := fmt.Sprintf("tools[%d].name", i)
		if !toolNameRE.MatchString(t.Name) {
			return &DecodeError{Field: field, Reason: fmt.Sprintf("%q is not a tool name (1-64 of A-Z a-z 0-9 _ -)", clip(t.Name))}
		}
		if seen[t.Name] {
			return &DecodeError{Field: field, Reason: fmt.Sprintf("duplicate tool %q", t.Name)}
		}
		seen[t.Name] = true
	}
	if len(in.ToolResults) > 256 {
		return &DecodeError{Field: "toolResults", Reason: fmt.Sprintf("%d results, the limit is 256", len(in.ToolResults))}
	}
	for i, r := range in.ToolResults {
		switch {
		case r.ToolCallID == "" || len(r.ToolCallID) > 128:
			return &DecodeError{Field: fmt.Sprintf("toolResults[%d].toolCallId", i), Reason: "must be 1-128 bytes"}
		case !utf8.ValidString(r.Text):
			return &DecodeError{Field: fmt.Sprintf("toolResults[%d].text", i), Reason: "not valid UTF-8"}
		case len(r.Text) > MaxTextBytes:
			return &DecodeError{Field: fmt.Sprintf("toolResults[%d].text", i), Reason: fmt.Sprintf("%d bytes, the limit is %d", len(r.Text), MaxTextBytes), Err: ErrTooLarge}
		}
	}
	return nil
}

// validMode accepts exactly the names and aliases the lane owner acts on.
func validMode(s string) bool {
	_, ok := modeName(s)
	return ok
}

// EncodeInbound encodes in as msgpack, or JSON when asJSON is set, and
// returns the content type to send with it.
func EncodeInbound(in *Inbound, asJSON bool) ([]byte, string, error) {
	if in.V == 0 {
		in.V = Version
	}
	if asJSON {
		b, err := json.Marshal(in)
		return b, ContentJSON, err
	}
	b, err := AppendInbound(make([]byte, 0, 64+len(in.Text)+len(in.ID)+len(in.Session)), in)
	return b, ContentMsgpack, err
}
