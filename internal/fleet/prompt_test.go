package fleet

import (
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/lanefleet/lanefleet/runner"
)

// TestSystemPromptShared: runs whose system prompt is the same text hold
// one string between them while their models answer, not a copy each
// (docs/scaling.md, "What a turn in flight holds"); a different prompt is
// its own.
func TestSystemPromptShared(t *testing.T) {
	t.Parallel()
	ts, err := newToolSource(t.Context(), Config{NoBuiltinTools: true, SystemPrompt: "You are the fleet's test agent.", Logger: testLog(t), Env: os.Getenv}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)
	ts.now = func() time.Time { return now }
	prompt := func(session string) string {
		return ts.SystemPrompt(t.Context(), runner.Input{SessionKey: "agent:main:" + session, SessionID: session}, nil, nil)
	}
	a, b := prompt("one"), prompt("two")
	if a != b || !strings.Contains(a, "You are the fleet's test agent.") {
		t.Fatalf("two sessions' prompts differ or lack the base prompt:\n%s\n---\n%s", a, b)
	}
	if unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatal("two runs with the same system prompt each hold a copy of it")
	}
	now = now.Add(time.Minute) // the prompt gives the time to the minute
	if c := prompt("three"); c == a || unsafe.StringData(c) == unsafe.StringData(a) {
		t.Fatal("a prompt a minute later is the earlier one")
	}
}
