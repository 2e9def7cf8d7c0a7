package replytext

import (
	"encoding/json"
	"testing"
)

func TestToolErrors(t *testing.T) {
	t.Parallel()
	write := func(path string, failed bool) ToolEnd {
		return ToolEnd{Name: "write", Args: map[string]any{"path": path}, Failed: failed, Error: "content is required"}
	}
	read := func(failed bool) ToolEnd {
		return ToolEnd{Name: "read", Args: map[string]any{"path": "x"}, Failed: failed, Error: "ENOENT"}
	}
	tests := []struct {
		name string
		ends []ToolEnd
		want string // the tool of Last(), "" = nil
	}{
		{"nothing failed", []ToolEnd{read(false), write("a", false)}, ""},
		// A read-only failure is forgotten after any success...
		{"read then success", []ToolEnd{read(true), write("a", false)}, ""},
		// ...and reported while nothing succeeded after it.
		{"read last", []ToolEnd{write("a", false), read(true)}, "read"},
		// A write failure sticks through other successes...
		{"write then read", []ToolEnd{write("a", true), read(false)}, "write"},
		{"write then another write", []ToolEnd{write("a", true), write("b", false)}, "write"},
		// ...until the same action succeeds (paths compare trimmed,
		// lower-cased, under any of their spellings).
		{"write then same write", []ToolEnd{write("a", true), write("a", false)}, ""},
		{"same path, other spelling", []ToolEnd{write("Notes.md", true), {Name: "write", Args: map[string]any{"file_path": " notes.md "}}}, ""},
		// The newest failure replaces an older one.
		{"newer failure", []ToolEnd{write("a", true), read(true)}, "read"},
	}
	for _, tt := range tests {
		var te ToolErrors
		for _, e := range tt.ends {
			te.Record(e)
		}
		got := ""
		if l := te.Last(); l != nil {
			got = l.Name
			if l.Mutating != (l.Name == "write") {
				t.Errorf("%s: Mutating = %v for %s", tt.name, l.Mutating, l.Name)
			}
		}
		if got != tt.want {
			t.Errorf("%s: Last = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestActionFingerprint(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, tool, args, meta string
		want                   string
	}{
		{"read-only tool", "read", `{"path":"a"}`, "", ""},
		{"write", "write", `{"path":"  Dir/A.md ","content":"x"}`, "", "tool=write|path=dir/a.md"},
		{"exec without target uses meta", "exec", `{"command":"make"}`, "  Run   MAKE ", "tool=exec|meta=run make"},
		{"target beats meta", "edit", `{"path":"a"}`, "12 chars", "tool=edit|path=a"},
		{"action normalised", "cron", `{"action":" Add-Job  now","id":7}`, "", "tool=cron|action=add_job_now|id=7"},
		{"read-only action", "cron", `{"action":"list"}`, "", ""},
		{"cron without action", "cron", `{}`, "", "tool=cron"},
		{"process writes", "process", `{"action":"send-keys","id":true}`, "", "tool=process|action=send_keys|id=true"},
		{"process polls", "process", `{"action":"poll"}`, "", ""},
		{"message with content", "message", `{"content":"hi","to":"Bob"}`, "", "tool=message|to=bob"},
		{"message read", "message", `{"action":"read"}`, "", ""},
		{"session_status sets a model", "session_status", `{"model":"openai/gpt-5"}`, "", "tool=session_status|model=openai/gpt-5"},
		{"session_status reads", "session_status", `{"model":" "}`, "", ""},
		{"nodes list", "nodes", `{"action":"list"}`, "", ""},
		{"nodes other", "nodes", `{"action":"run"}`, "", "tool=nodes|action=run"},
		{"*_actions", "slack_actions", `{"action":"react","messageId":"M1"}`, "", "tool=slack_actions|action=react|messageid=m1"},
		{"send in the name", " Email_Send ", `{"to":"x@y"}`, "", "tool=email_send|to=x@y"},
		{"unknown tool", "weather", `{"city":"Lisbon"}`, "", ""},
		{"numbers as JavaScript spells them", "write", `{"path":"a","id":1.5e3}`, "", "tool=write|path=a|id=1500"},
	}
	for _, tt := range tests {
		var args map[string]any
		if err := json.Unmarshal([]byte(tt.args), &args); err != nil {
			t.Fatal(err)
		}
		if got := ActionFingerprint(tt.tool, args, tt.meta); got != tt.want {
			t.Errorf("%s: ActionFingerprint = %q, want %q", tt.name, got, tt.want)
		}
		if got := IsMutatingToolCall(tt.tool, args); got != (tt.want != "") {
			t.Errorf("%s: IsMutatingToolCall = %v", tt.name, got)
		}
	}
}
