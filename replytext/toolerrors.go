package replytext

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/lanefleet/lanefleet/ecmatext"
)

// ToolEnd is one finished tool execution, as the tool-error memory sees it.
type ToolEnd struct {
	// Name is the tool name; Args the call's decoded arguments.
	Name string
	Args map[string]any
	// Meta is the tool's short description of the call ("" = none).
	Meta string
	// Failed marks an error result; Error is its normalised text
	// (ToolErrorMessage).
	Failed bool
	Error  string
}

// ToolErrors remembers the last failing tool of an attempt, as BuildPayloads
// wants it (runtime spec §22): a failure of a read-only tool is forgotten
// after the next successful tool; a failure of a tool that changes state
// (IsMutatingToolCall) stays until that same action (ActionFingerprint)
// succeeds. The zero value is ready to use.
type ToolErrors struct {
	last *ToolError
	key  string
}

// Record notes the end of one tool execution.
func (t *ToolErrors) Record(end ToolEnd) {
	key := ActionFingerprint(end.Name, end.Args, end.Meta)
	if end.Failed {
		t.last = &ToolError{Name: end.Name, Meta: end.Meta, Error: end.Error, Mutating: key != ""}
		t.key = key
		return
	}
	if t.last != nil && (!t.last.Mutating || key == t.key) {
		t.last, t.key = nil, ""
	}
}

// Last returns the tool error to report, or nil.
func (t *ToolErrors) Last() *ToolError {
	if t.last == nil {
		return nil
	}
	c := *t.last
	return &c
}

// Tool names and actions that change state, as the reference's tool-mutation
// rules list them.
var (
	mutatingTools   = map[string]bool{"write": true, "edit": true, "apply_patch": true, "exec": true, "bash": true, "sessions_send": true}
	readOnlyActions = map[string]bool{"get": true, "list": true, "read": true, "status": true, "show": true, "fetch": true,
		"search": true, "query": true, "view": true, "poll": true, "log": true, "inspect": true, "check": true, "probe": true}
	processMutatingActions = map[string]bool{"write": true, "send_keys": true, "submit": true, "paste": true, "kill": true}
	messageMutatingActions = map[string]bool{"send": true, "reply": true, "thread_reply": true, "threadreply": true,
		"edit": true, "delete": true, "react": true, "pin": true, "unpin": true}
)

// IsMutatingToolCall reports whether a call changes state: write, edit,
// apply_patch, exec, bash and sessions_send always; process with a writing
// action; message with a sending action or a content/message argument;
// session_status when it sets a model; cron, gateway, canvas and *_actions
// tools unless the action is read-only (get, list, status, …); nodes unless
// it lists; and any tool named message_* or containing "send".
func IsMutatingToolCall(name string, args map[string]any) bool {
	n := strings.ToLower(strings.TrimSpace(name))
	action, hasAction := actionOf(args)
	isString := func(k string) bool { _, ok := args[k].(string); return ok }
	switch n {
	case "process":
		return hasAction && processMutatingActions[action]
	case "message":
		return (hasAction && messageMutatingActions[action]) || isString("content") || isString("message")
	case "session_status":
		m, _ := args["model"].(string)
		return strings.TrimSpace(m) != ""
	case "cron", "gateway", "canvas":
		return !hasAction || !readOnlyActions[action]
	case "nodes":
		return !hasAction || action != "list"
	}
	switch {
	case mutatingTools[n]:
		return true
	case strings.HasSuffix(n, "_actions"):
		return !hasAction || !readOnlyActions[action]
	}
	return strings.HasPrefix(n, "message_") || strings.Contains(n, "send")
}

// fingerprintFields are the arguments that name a call's target, each with
// the spellings models use for it.
var fingerprintFields = []struct {
	key     string
	aliases []string
}{
	{"path", []string{"path", "filePath", "file_path"}},
	{"oldpath", []string{"oldPath", "old_path"}},
	{"newpath", []string{"newPath", "new_path"}},
	{"to", []string{"to"}},
	{"target", []string{"target"}},
	{"messageid", []string{"messageId", "message_id"}},
	{"sessionkey", []string{"sessionKey", "session_key"}},
	{"jobid", []string{"jobId", "job_id"}},
	{"id", []string{"id"}},
	{"model", []string{"model"}},
}

// ActionFingerprint identifies the action of a call that changes state
// ("tool=write|path=notes.md"): the tool, its action argument and the
// arguments naming its target, lower-cased, else the normalised meta. It is
// "" for a call that changes nothing (see IsMutatingToolCall).
func ActionFingerprint(name string, args map[string]any, meta string) string {
	if !IsMutatingToolCall(name, args) {
		return ""
	}
	parts := []string{"tool=" + strings.ToLower(strings.TrimSpace(name))}
	if action, ok := actionOf(args); ok {
		parts = append(parts, "action="+action)
	}
	target := false
	for _, f := range fingerprintFields {
		for _, a := range f.aliases {
			if v, ok := fingerprintValue(args[a]); ok {
				parts = append(parts, f.key+"="+v)
				target = true
				break
			}
		}
	}
	// Meta often carries volatile details ("12 chars"): only a call
	// without a target argument is told apart by it.
	if m := strings.ToLower(strings.Join(strings.FieldsFunc(meta, ecmatext.IsSpace), " ")); m != "" && !target {
		parts = append(parts, "meta="+m)
	}
	return strings.Join(parts, "|")
}

// actionOf is a call's action argument, trimmed, lower-cased, with runs of
// spaces and dashes as "_".
func actionOf(args map[string]any) (string, bool) {
	s, ok := args["action"].(string)
	if !ok {
		return "", false
	}
	var b strings.Builder
	sep := false
	for _, r := range strings.ToLower(ecmatext.Trim(s)) {
		if r == '-' || ecmatext.IsSpace(r) {
			sep = true
			continue
		}
		if sep {
			b.WriteByte('_')
			sep = false
		}
		b.WriteRune(r)
	}
	if sep {
		b.WriteByte('_')
	}
	return b.String(), b.Len() > 0
}

// fingerprintValue spells a target argument for a fingerprint: a non-blank
// string trimmed and lower-cased, a number or a boolean as text.
func fingerprintValue(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		s := strings.ToLower(ecmatext.Trim(x))
		return s, s != ""
	case bool:
		return strconv.FormatBool(x), true
	case float64:
		b, err := json.Marshal(x) // ECMAScript's spelling of a double
		return strings.ToLower(string(b)), err == nil
	case json.Number:
		return strings.ToLower(x.String()), true
	case int:
		return strconv.Itoa(x), true
	case int64:
		return strconv.FormatInt(x, 10), true
	}
	return "", false
}
