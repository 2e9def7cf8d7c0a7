package main

import (
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
)

// TestBudgetCommands: budget set, show and reset against a real fleet; a
// call the budget has no room for ends send with the budget_reached error
// naming the budget and how to resume, and show says the budget is paused
// until it is raised.
func TestBudgetCommands(t *testing.T) {
	t.Parallel()
	m, url := runFleet(t)
	// scripted/echo asks up to 32,000 output tokens a call: a budget of
	// 1,000 tokens has no room for one.
	out, _, err := publisher(t, "budget", "set", "--nats-url", url, "--tenant", "acme", "--tokens", "1000", "--window", "day", "--soft", "80", "--who", "alice")
	if err != nil || !strings.Contains(out, "tenant acme: was no limit, now 1000 tokens a day") {
		t.Fatalf("budget set: %q, %v", out, err)
	}
	for deadline := time.Now().Add(time.Minute); !m.Budgeted(lanefleet.TenantBudget("acme")); {
		if time.Now().After(deadline) {
			t.Fatal("the worker never saw the budget")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, errOut, err := publisher(t, "send", "--nats-url", url, "--session", "acme:1", "hello")
	if err == nil || !strings.Contains(err.Error()+errOut, "budget_reached") ||
		!strings.Contains(err.Error()+errOut, "Budget reached: the tenant acme budget (1000 tokens a day) has no room for this model call") ||
		!strings.Contains(err.Error()+errOut, "publisher budget set|reset --tenant acme") {
		t.Fatalf("send past the budget: %v; stderr %q", err, errOut)
	}
	t.Logf("send: %v; stderr %q", err, errOut)
	out, _, err = publisher(t, "budget", "show", "--nats-url", url, "--tenant", "acme")
	if err != nil || !strings.Contains(out, "1000 tokens a day, soft limit 80%") || !strings.Contains(out, "PAUSED") {
		t.Fatalf("budget show: %q, %v", out, err)
	}
	out, _, err = publisher(t, "budget", "set", "--nats-url", url, "--tenant", "acme", "--tokens", "100000")
	if err != nil || strings.Contains(out, "PAUSED") {
		t.Fatalf("budget raise: %q, %v", out, err)
	}
	out, _, err = publisher(t, "budget", "reset", "--nats-url", url, "--session", "acme:1")
	if err != nil || !strings.Contains(out, `session "acme:1": was no limit, now no limit`) {
		t.Fatalf("budget reset of a session without a budget: %q, %v", out, err)
	}
	out, _, err = publisher(t, "budget", "show", "--nats-url", url, "--session", "acme:1")
	if err != nil || !strings.Contains(out, "has no budget") {
		t.Fatalf("budget show: %q, %v", out, err)
	}
	for _, args := range [][]string{
		{"budget", "set", "--tenant", "acme", "--session", "x"},
		{"budget", "set", "--tenant", "ac me"},
		{"budget", "set", "--tenant", "acme", "--window", "week"},
		{"budget", "set", "--tenant", "acme", "--usd", "-1"},
		{"budget", "set", "--tenant", "acme", "--soft", "100"},
		{"budget", "show"},
	} {
		if _, _, err := publisher(t, append(args, "--nats-url", url)...); exitCode(err) != 2 {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// TestBudgetAgentAndProfile: budget set takes --agent and --auth-profile
// like --tenant, and budget list lists every kind of budget.
func TestBudgetAgentAndProfile(t *testing.T) {
	t.Parallel()
	_, url := runFleet(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--agent", "support", "--usd", "5", "--window", "month"}, "agent support: was no limit, now $5.0000 a month"},
		{[]string{"--auth-profile", "openai:work", "--tokens", "5000"}, `auth profile "openai:work": was no limit, now 5000 tokens in total`},
		{[]string{"--tenant", "acme", "--turns", "9"}, "tenant acme: was no limit, now 9 turns in total"},
	} {
		out, _, err := publisher(t, append([]string{"budget", "set", "--nats-url", url}, c.args...)...)
		if err != nil || !strings.Contains(out, c.want) {
			t.Fatalf("budget set %v: %q, %v; want %q", c.args, out, err, c.want)
		}
	}
	out, _, err := publisher(t, "budget", "show", "--nats-url", url, "--auth-profile", "openai:work")
	if err != nil || !strings.Contains(out, `auth profile "openai:work": 5000 tokens in total`) {
		t.Fatalf("budget show: %q, %v", out, err)
	}
	out, _, err = publisher(t, "budget", "list", "--nats-url", url)
	if err != nil {
		t.Fatal(err)
	}
	i, j, k := strings.Index(out, "tenant acme: 9 turns"), strings.Index(out, "agent support: $5.0000 a month"), strings.Index(out, `auth profile "openai:work"`)
	if i < 0 || j < i || k < j {
		t.Fatalf("budget list: %q; want the tenant's, the agent's and the profile's budget, in that order", out)
	}
	for _, args := range [][]string{
		{"budget", "set", "--agent", "support", "--auth-profile", "x"},
		{"budget", "set", "--agent", "Sup port"},
		{"budget", "show", "--auth-profile", "a b"},
	} {
		if _, _, err := publisher(t, append(args, "--nats-url", url)...); exitCode(err) != 2 {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
