package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentsCommands: agents put (flags and JSON), list, show, files put,
// ls, get and rm, and rm, against a real fleet; a session of the agent
// runs, and once the agent is removed its next message ends with the
// invalid_input error naming it; definitions that break a rule are usage
// errors.
func TestAgentsCommands(t *testing.T) {
	t.Parallel()
	_, url := runFleet(t)
	dir := t.TempDir()
	prompt := filepath.Join(dir, "prompt.txt")
	must(t, os.WriteFile(prompt, []byte("You are Ops."), 0o600))
	out, _, err := publisher(t, "agents", "put", "--nats-url", url, "--id", "ops", "--name", "Ops", "--system-prompt-file", prompt,
		"--model", "scripted/echo", "--tool-profile", "coding", "--tool-deny", "exec", "--no-chat-commands")
	if err != nil || !strings.Contains(out, "agent ops stored (revision ") {
		t.Fatalf("agents put: %q, %v", out, err)
	}
	def := filepath.Join(dir, "sales.json")
	must(t, os.WriteFile(def, []byte(`{"id":"sales","name":"Sales","thinking":"low","skills":[]}`), 0o600))
	if out, _, err = publisher(t, "agents", "put", "--nats-url", url, "--file", def); err != nil {
		t.Fatalf("agents put --file: %q, %v", out, err)
	}
	out, _, err = publisher(t, "agents", "list", "--nats-url", url)
	if err != nil || out != "ops\tOps\tscripted/echo\nsales\tSales\t-\n" {
		t.Fatalf("agents list: %q, %v", out, err)
	}
	out, _, err = publisher(t, "agents", "show", "--nats-url", url, "ops")
	if err != nil || !strings.Contains(out, `"systemPrompt": "You are Ops."`) || !strings.Contains(out, `"profile": "coding"`) ||
		!strings.Contains(out, `"chatCommands": false`) {
		t.Fatalf("agents show: %q, %v", out, err)
	}
	agentsMd := filepath.Join(dir, "AGENTS.md")
	must(t, os.WriteFile(agentsMd, []byte("Be brief."), 0o600))
	if out, _, err = publisher(t, "agents", "files", "put", "--nats-url", url, "ops", "AGENTS.md", agentsMd); err != nil || !strings.Contains(out, "ops/AGENTS.md stored (9 bytes, SHA-256=") {
		t.Fatalf("agents files put: %q, %v", out, err)
	}
	if out, _, err = publisher(t, "agents", "files", "ls", "--nats-url", url, "ops"); err != nil || !strings.HasPrefix(out, "AGENTS.md\t9\tSHA-256=") {
		t.Fatalf("agents files ls: %q, %v", out, err)
	}
	if out, _, err = publisher(t, "agents", "files", "get", "--nats-url", url, "ops", "AGENTS.md"); err != nil || out != "Be brief." {
		t.Fatalf("agents files get: %q, %v", out, err)
	}
	// A session of the agent runs (its commands are off: /status goes to
	// the model).
	if out, _, err = publisher(t, "send", "--nats-url", url, "--session", "agent:ops:1", "/status"); err != nil || !strings.Contains(out, "echo: /status") {
		t.Fatalf("send as ops: %q, %v", out, err)
	}
	if out, _, err = publisher(t, "agents", "files", "rm", "--nats-url", url, "ops", "AGENTS.md"); err != nil {
		t.Fatalf("agents files rm: %q, %v", out, err)
	}
	if out, _, err = publisher(t, "agents", "rm", "--nats-url", url, "ops"); err != nil || out != "agent ops removed\n" {
		t.Fatalf("agents rm: %q, %v", out, err)
	}
	_, errOut, err := publisher(t, "send", "--nats-url", url, "--session", "agent:ops:1", "hello")
	if err == nil || !strings.Contains(err.Error()+errOut, `agent "ops" is not defined on this fleet`) {
		t.Fatalf("send to a removed agent: %v; stderr %q", err, errOut)
	}
	if _, _, err := publisher(t, "agents", "show", "--nats-url", url, "ops"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("agents show of a removed agent: %v", err)
	}
	for _, args := range [][]string{
		{"agents", "put", "--id", "Ops"},
		{"agents", "put", "--id", "ops", "--model", "echo"},
		{"agents", "put", "--id", "ops", "--tool-profile", "all"},
		{"agents", "put", "--file", def, "--id", "x"},
		{"agents", "files", "put", "ops", "../x", agentsMd},
		{"agents", "show"},
	} {
		if _, _, err := publisher(t, append(args, "--nats-url", url)...); exitCode(err) != 2 {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
