package main

import (
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
)

// TestSettingsShowsSubagents: `publisher settings` shows a session's
// pending sub-agents, the part of its use they made, and, for a
// sub-agent, its parent and whether its completion went.
func TestSettingsShowsSubagents(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	st := &events.SessionState{Usage: &events.UsageMeta{Total: 90}, Turns: 2, ChildUsage: &events.UsageMeta{Total: 40, Cost: &events.CostMeta{Total: 0.5}},
		Parent:   &events.Parent{Session: "acme:lead", Run: "3", Delivered: true},
		Children: []events.Child{{Session: "acme:lead:subagent:1:subagent:ab", Run: "9", ParentRun: "4", Label: "scout"}}}
	if err := printSettings("acme:lead:subagent:1", lanefleet.SessionSettings{State: st}, false, &b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"children:  40 tokens of that are its sub-agents', cost $0.500000\n",
		"parent:    acme:lead run 3 (a sub-agent; its completion delivered)\n",
		"pending:   sub-agent \"scout\" acme:lead:subagent:1:subagent:ab run 9, spawned by run 4\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}
}
