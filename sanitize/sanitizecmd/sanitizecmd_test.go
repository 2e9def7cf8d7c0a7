package sanitizecmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func run(t *testing.T, stdin string, o Options) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Run(t.Context(), o, strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), err
}

func checkJSON(t *testing.T, got, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

const history = `[{"role":"user","content":"do it"},
 {"role":"assistant","content":[{"type":"toolCall","id":"call_1","name":"exec","arguments":{"command":"ls"}},{"type":"toolCall","id":"call_2","name":"rm","arguments":{}}],"stopReason":"toolUse"},
 {"role":"user","content":"hello?"},
 {"role":"user","content":"anyone?"}]`

func TestRunFinalAnthropic(t *testing.T) {
	t.Parallel()
	out, _, err := run(t, history, Options{Provider: "anthropic", API: "anthropic-messages", Model: "claude-opus-4-6", AllowedTools: []string{"exec"}, Now: 5})
	if err != nil {
		t.Fatal(err)
	}
	checkJSON(t, out, `[{"role":"user","content":"do it"},
		{"role":"assistant","content":[{"type":"toolCall","id":"call1","name":"exec","arguments":{"command":"ls"}}],"stopReason":"toolUse"},
		{"role":"toolResult","toolCallId":"call1","toolName":"exec","content":[{"type":"text","text":"[openclaw] missing tool result in session history; inserted synthetic error result for transcript repair."}],"isError":true,"timestamp":5},
		{"role":"user","content":[{"type":"text","text":"hello?"},{"type":"text","text":"anyone?"}]}]`)
}

func TestRunSanitizedStageAndLimit(t *testing.T) {
	t.Parallel()
	out, _, err := run(t, history, Options{Provider: "openai", API: "openai-responses", Model: "gpt-5.2", Stage: "sanitized", Now: 5})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []any
	json.Unmarshal([]byte(out), &msgs)
	if len(msgs) != 6 {
		t.Errorf("sanitized has %d messages: %s", len(msgs), out)
	}
	out, _, err = run(t, history, Options{Provider: "openai", API: "openai-responses", Model: "gpt-5.2", HistoryLimit: 1, Now: 5})
	if err != nil {
		t.Fatal(err)
	}
	checkJSON(t, out, `[{"role":"user","content":"anyone?"}]`)
}

func TestRunSessionFile(t *testing.T) {
	t.Parallel()
	in := strings.Join([]string{
		`{"type":"session","version":3,"id":"s","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/"}`,
		`{"type":"message","id":"a","parentId":null,"timestamp":"2025-01-01T00:00:00.000Z","message":{"role":"assistant","content":[{"type":"text","text":"welcome"}],"stopReason":"stop"}}`,
		`garbage`,
		`{"type":"custom","id":"b","parentId":"a","timestamp":"2025-01-01T00:00:00.000Z","customType":"google-turn-ordering-bootstrap","data":{"timestamp":1}}`,
		`{"type":"message","id":"c","parentId":"b","timestamp":"2025-01-01T00:00:00.000Z","message":{"role":"user","content":"hi"}}`,
	}, "\n")
	out, stderr, err := run(t, in, Options{Provider: "google", API: "google-generative-ai", Model: "gemini-2.5-pro", Now: 7})
	if err != nil {
		t.Fatal(err)
	}
	checkJSON(t, out, `[{"role":"user","content":"(session bootstrap)","timestamp":7},{"role":"assistant","content":[{"type":"text","text":"welcome"}],"stopReason":"stop"},{"role":"user","content":"hi"}]`)
	if !strings.Contains(stderr, "line 3") {
		t.Errorf("no warning about the bad line: %q", stderr)
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	base := Options{Provider: "anthropic", API: "anthropic-messages", Model: "m"}
	with := func(f func(*Options)) Options { o := base; f(&o); return o }
	tests := []struct {
		name  string
		stdin string
		o     Options
		usage bool
		text  string
	}{
		{"missing flags", "[]", Options{Provider: "x"}, true, "are required"},
		{"bad stage", "[]", with(func(o *Options) { o.Stage = "raw" }), true, "--stage"},
		{"negative limit", "[]", with(func(o *Options) { o.HistoryLimit = -1 }), true, "--history-limit"},
		{"empty input", "  \n", base, false, "empty input"},
		{"not json", "hello", base, false, `starts with 'h'`},
		{"bad array", "[1,", base, false, "not a JSON array"},
		{"bad message", `[{"role":"user","content":5}]`, base, false, "message 0"},
		{"no role", `[{"content":"x"}]`, base, false, "no role"},
		{"bad session", `{"type":"message"}`, base, false, "invalid session header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := run(t, tt.stdin, tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.text) || errors.Is(err, ErrUsage) != tt.usage {
				t.Errorf("err = %v, want usage=%v containing %q", err, tt.usage, tt.text)
			}
		})
	}
}
