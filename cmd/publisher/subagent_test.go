package main

import (
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/schedule"
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

// TestListingsShowSubagentsAndSchedules: sessions and runs mark a
// session's pending sub-agents, its parent and its schedules, and runs
// the schedule that fired a run (in --json too, camelCase).
func TestListingsShowSubagentsAndSchedules(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	var sess strings.Builder
	rep := admin.SessionsReply{Total: 2, Sessions: []admin.Session{
		{Key: "acme:lead", Fingerprint: "fp1", LastActivity: now.UnixMilli(), LastRun: "4", Children: 2, Schedules: 1},
		{Key: "acme:lead:subagent:ab", Fingerprint: "fp2", LastActivity: now.UnixMilli(), LastRun: "5", Parent: "acme:lead"},
	}}
	if err := printSessions(rep, false, now, &sess); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"idle, 2 sub-agents pending, 1 schedule\n", "idle, sub-agent of acme:lead\n"} {
		if !strings.Contains(sess.String(), want) {
			t.Errorf("sessions: missing %q in:\n%s", want, sess.String())
		}
	}
	sched := schedulesOf([]*schedule.Schedule{{ID: "s1", Session: "acme:lead", LastSession: "acme:lead", LastRun: "7"},
		{ID: "s2", Session: "acme:lead"}})
	runs := []lanefleet.ActiveRun{{Session: "acme:lead", RunID: "7", Worker: "w1", StartedAt: now, Phase: "running", Children: 1},
		{Session: "acme:lead:subagent:ab", RunID: "8", Worker: "w1", StartedAt: now, Phase: "running", Parent: "acme:lead"}}
	var out strings.Builder
	if err := printRuns(runs, sched, false, now, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{", 1 sub-agent pending, 2 schedules, fired by schedule s1\n", "0s, sub-agent of acme:lead\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("runs: missing %q in:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := printRuns(runs, sched, true, now, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"children":1`, `"schedules":2`, `"firedBy":"s1"`, `"parent":"acme:lead"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("runs --json: missing %s in:\n%s", want, out.String())
		}
	}
}
