package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestSanitizeSubcommand(t *testing.T) {
	t.Parallel()
	in := `[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"toolCall","id":"call_1|fc_2","name":"read","arguments":{}}],"stopReason":"toolUse"}]`
	var out, errb bytes.Buffer
	err := run([]string{"sanitize", "--provider", "anthropic", "--api", "anthropic-messages", "--model", "claude-sonnet-4-6"}, strings.NewReader(in), &out, &errb)
	if err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	var msgs []map[string]any
	if err := json.Unmarshal(out.Bytes(), &msgs); err != nil {
		t.Fatal(err)
	}
	// The orphaned call gets a synthetic result; its id is made safe for Anthropic.
	if len(msgs) != 3 || msgs[2]["role"] != "toolResult" || strings.Contains(msgs[2]["toolCallId"].(string), "|") {
		t.Fatalf("sanitized = %s", out.String())
	}
}

func TestBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--sync", "sometimes"}, {"--log-format", "xml"}, {"--no-such-flag"}} {
		var out, errb bytes.Buffer
		if err := run(args, strings.NewReader(""), &out, &errb); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
