package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/schedule"
)

// TestScheduleCommands: schedule add prints an id; an @every 1s schedule
// on a real fleet fires, its firings' turns run, and history shows them
// with their run ids; pause, resume, show, list and rm do what they say;
// bad timings are usage errors.
func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	_, url := runFleet(t)
	out, _, err := publisher(t, "schedule", "add", "--nats-url", url, "--session", "cronjob", "--every", "1s", "--overlap", "buffer-one", "check the inbox")
	if err != nil {
		t.Fatalf("schedule add: %q, %v", out, err)
	}
	id := strings.TrimSpace(out)
	if !schedule.ValidID(id) {
		t.Fatalf("schedule add printed %q", out)
	}
	var fired []schedule.Firing
	for deadline := time.Now().Add(time.Minute); len(fired) < 2; {
		if time.Now().After(deadline) {
			t.Fatalf("no two firings: %+v", fired)
		}
		out, _, err = publisher(t, "schedule", "history", "--nats-url", url, "--json", id)
		if err != nil {
			t.Fatal(err)
		}
		var h []schedule.Firing
		if err := json.Unmarshal([]byte(out), &h); err != nil {
			t.Fatalf("history --json: %q: %v", out, err)
		}
		fired = fired[:0]
		for _, f := range h {
			if f.Outcome == schedule.Fired {
				fired = append(fired, f)
			}
		}
		time.Sleep(100 * time.Millisecond) // polling a CLI: no event to wait on
	}
	out, _, err = publisher(t, "history", "--nats-url", url, "--session", "cronjob")
	if err != nil || !strings.Contains(out, "check the inbox") {
		t.Fatalf("the session's transcript: %q, %v", out, err)
	}
	out, _, err = publisher(t, "schedule", "history", "--nats-url", url, id)
	if err != nil || !strings.Contains(out, "fired    run "+fired[0].RunID+" of session cronjob") {
		t.Fatalf("schedule history: %q, %v", out, err)
	}
	if out, _, err = publisher(t, "schedule", "pause", "--nats-url", url, id); err != nil || !strings.Contains(out, id+": paused") {
		t.Fatalf("schedule pause: %q, %v", out, err)
	}
	if out, _, err = publisher(t, "schedule", "list", "--nats-url", url); err != nil || !strings.Contains(out, id+"  session cronjob  @every 1s  overlap buffer-one, catch-up one  paused") {
		t.Fatalf("schedule list: %q, %v", out, err)
	}
	if out, _, err = publisher(t, "schedule", "resume", "--nats-url", url, id); err != nil || !strings.Contains(out, id+": next ") {
		t.Fatalf("schedule resume: %q, %v", out, err)
	}
	if out, _, err = publisher(t, "schedule", "show", "--nats-url", url, id); err != nil || !strings.Contains(out, `message: "check the inbox"`) {
		t.Fatalf("schedule show: %q, %v", out, err)
	}
	if out, _, err = publisher(t, "schedule", "rm", "--nats-url", url, id); err != nil || !strings.Contains(out, id+": removed") {
		t.Fatalf("schedule rm: %q, %v", out, err)
	}
	if _, _, err = publisher(t, "schedule", "show", "--nats-url", url, id); err == nil || !strings.Contains(err.Error(), "no such schedule") {
		t.Fatalf("schedule show after rm: %v", err)
	}
	for _, args := range [][]string{
		{"schedule", "add", "--session", "s", "x"},                                      // no timing
		{"schedule", "add", "--session", "s", "--every", "1s", "--cron", "@daily", "x"}, // two
		{"schedule", "add", "--session", "s", "--cron", "61 * * * *", "x"},
		{"schedule", "add", "--session", "s", "--cron", "@daily", "--tz", "Mars/Base", "x"},
		{"schedule", "add", "--session", "s", "--every", "10ms", "x"},
		{"schedule", "add", "--session", "s", "--at", "tomorrow", "x"},
		{"schedule", "add", "--session", "s", "--at", "2001-01-01T00:00:00Z", "x"},
		{"schedule", "add", "--session", "s", "--every", "1m", "--overlap", "sometimes", "x"},
		{"schedule", "add", "--every", "1m", "x"},
		{"schedule", "pause"},
	} {
		if _, _, err := publisher(t, append(args, "--nats-url", url)...); exitCode(err) != 2 {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
