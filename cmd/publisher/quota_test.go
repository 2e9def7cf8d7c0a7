package main

import (
	"strings"
	"testing"
)

// TestQuotaCommands: quota set and show against a real fleet; a turn of a
// tenant with a quota runs (and holds nothing once it ended).
func TestQuotaCommands(t *testing.T) {
	t.Parallel()
	_, url := runFleet(t)
	out, _, err := publisher(t, "quota", "set", "--nats-url", url, "--tenant", "acme", "--turns", "1", "--who", "alice")
	if err != nil || !strings.Contains(out, "tenant acme: 1 turns at once (was no quota)") {
		t.Fatalf("quota set: %q, %v", out, err)
	}
	if out, _, err := publisher(t, "send", "--nats-url", url, "--session", "acme:1", "hello"); err != nil || !strings.Contains(out, "echo: hello") {
		t.Fatalf("send under a quota: %q, %v", out, err)
	}
	out, _, err = publisher(t, "quota", "show", "--nats-url", url, "--tenant", "acme")
	if err != nil || !strings.Contains(out, "tenant acme: 1 turns at once, 0 running") {
		t.Fatalf("quota show: %q, %v", out, err)
	}
	out, _, err = publisher(t, "quota", "show", "--nats-url", url, "--tenant", "globex")
	if err != nil || !strings.Contains(out, "tenant globex has no quota") {
		t.Fatalf("quota show: %q, %v", out, err)
	}
	for _, args := range [][]string{
		{"quota", "set", "--tenant", "ac me", "--turns", "1"},
		{"quota", "set", "--tenant", "acme", "--turns", "-1"},
		{"quota", "show"},
	} {
		if _, _, err := publisher(t, append(args, "--nats-url", url)...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
