package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestConventionalCLI: help and version exit 0, a wrong command line exits
// 2, and a command's help lists its own flags, not another's.
func TestConventionalCLI(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args     []string
		code     int
		out, not string
	}{
		{[]string{"--version"}, 0, "lanefleet ", ""},
		{[]string{"version"}, 0, "lanefleet ", ""},
		{[]string{"-h"}, 0, "dlq", ""},
		{[]string{"send", "-h"}, 0, "--tool-result", "--debounce"},
		{[]string{"history", "-h"}, 0, "--session", "--no-follow"},
		{[]string{"dlq", "replay", "-h"}, 0, "--keep", "--tool-file"},
		{[]string{"auth", "status", "--help"}, 0, "--json", "--session"},
		{nil, 2, "", ""},
		{[]string{"shout"}, 2, "", ""},
		{[]string{"send", "--bogus", "x"}, 2, "", ""},
		{[]string{"send", "hi"}, 2, "", ""},
		{[]string{"history", "--session", "a", "extra"}, 2, "", ""},
		{[]string{"dlq", "show", "x"}, 2, "", ""},
		{[]string{"dlq", "purge"}, 2, "", ""},
		{[]string{"auth", "reset"}, 2, "", ""},
		{[]string{"send", "--nats-url", "nats://127.0.0.1:1", "--session", "a", "hi"}, 1, "", ""},
	} {
		var out, errb bytes.Buffer
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err := runIO(ctx, c.args, strings.NewReader(""), &out, &errb, func(string) string { return "" })
		cancel()
		if got := exitCode(err); got != c.code {
			t.Errorf("%v: exit %d (%v), want %d", c.args, got, err, c.code)
		}
		if c.out != "" && !strings.Contains(out.String(), c.out) {
			t.Errorf("%v: stdout lacks %q:\n%s", c.args, c.out, out.String())
		}
		if c.not != "" && strings.Contains(out.String(), c.not) {
			t.Errorf("%v: help lists %q, a flag the command ignores", c.args, c.not)
		}
	}
}

// TestSendReadsStdin: "send -" sends what stdin holds.
func TestSendReadsStdin(t *testing.T) {
	t.Parallel()
	url := startFleet(t)
	var out, errb bytes.Buffer
	err := runIO(t.Context(), []string{"send", "--nats-url", url, "--session", "stdin", "-"},
		strings.NewReader("from a pipe\nsecond line\n"), &out, &errb, func(string) string { return "" })
	if err != nil || out.String() != "echo: from a pipe\nsecond line\n" {
		t.Fatalf("send -: %q, %v (%s)", out.String(), err, errb.String())
	}
	// Over the bound: refused before anything is sent.
	err = runIO(t.Context(), []string{"send", "--nats-url", url, "--session", "stdin", "-"},
		strings.NewReader(strings.Repeat("x", 1<<20+1)), &out, &errb, func(string) string { return "" })
	if exitCode(err) != 2 || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("oversized stdin: %v", err)
	}
}

// TestOpsCommands: against a real fleet, the operators' commands list the
// sessions, a session's backlog, the dead letters (a raw publish to a
// subject that cannot be a lane is one), show and purge them, and the auth
// profiles.
func TestOpsCommands(t *testing.T) {
	t.Parallel()
	url := startFleet(t)
	if _, _, err := publisher(t, "send", "--nats-url", url, "--session", "ops one", "hello"); err != nil {
		t.Fatal(err)
	}
	out, _, err := publisher(t, "sessions", "--nats-url", url)
	if err != nil || !strings.Contains(out, `"ops one"`) {
		t.Fatalf("sessions: %q, %v", out, err)
	}
	out, _, err = publisher(t, "backlog", "--nats-url", url, "--session", "ops one")
	if err != nil || !strings.Contains(out, "0 waiting") {
		t.Fatalf("backlog: %q, %v", out, err)
	}

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish("agent.in.a.b", []byte(`{"text":"lost?"}`)); err != nil {
		t.Fatal(err)
	}
	var listed string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		if listed, _, err = publisher(t, "dlq", "list", "--nats-url", url); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(listed, "bad-lane") {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling the worker's dispatch, not timing it
	}
	if !strings.Contains(listed, "bad-lane") || !strings.Contains(listed, "agent.in.a.b") {
		t.Fatalf("dlq list: %q", listed)
	}
	seq := strings.Fields(listed)[0]
	out, _, err = publisher(t, "dlq", "show", "--nats-url", url, seq)
	if err != nil || !strings.Contains(out, `{"text":"lost?"}`) {
		t.Fatalf("dlq show: %q, %v", out, err)
	}
	out, _, err = publisher(t, "dlq", "replay", "--nats-url", url, seq)
	if err != nil || !strings.Contains(out, "skipped "+seq) {
		t.Fatalf("dlq replay of a subject that is no lane: %q, %v", out, err)
	}
	out, _, err = publisher(t, "dlq", "purge", "--nats-url", url, "--reason", "bad-lane")
	if err != nil || !strings.Contains(out, "purged 1 ") {
		t.Fatalf("dlq purge: %q, %v", out, err)
	}
	if _, _, err = publisher(t, "dlq", "show", "--nats-url", url, seq); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("dlq show after purge: %v", err)
	}
	out, _, err = publisher(t, "auth", "status", "--nats-url", url)
	if err != nil || !strings.Contains(out, "no auth profiles") {
		t.Fatalf("auth status: %q, %v", out, err)
	}
	if _, _, err = publisher(t, "auth", "reset", "--nats-url", url, "nosuch:default"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("auth reset of an unknown profile: %v", err)
	}
}

// TestOpsNeedAdmin: a sender's credentials may ask for its own backlog but
// not the fleet-wide operations, and is told which role they take.
func TestOpsNeedAdmin(t *testing.T) {
	t.Parallel()
	url := startUsersServer(t, "alice")
	startWorkerOn(t, strings.Replace(url, "nats://", "nats://worker:w@", 1))
	env := map[string]string{"NATS_URL": url, "NATS_USER": "alice", "NATS_PASSWORD": "alice", "NATS_INBOX_PREFIX": "_INBOX_alice"}
	if out, _, err := publisherEnv(t, env, "backlog", "--session", "alice"); err != nil || !strings.Contains(out, "waiting") {
		t.Fatalf("own backlog: %q, %v", out, err)
	}
	for _, args := range [][]string{{"sessions"}, {"dlq", "list"}, {"auth", "status"}} {
		if _, _, err := publisherEnv(t, env, args...); err == nil || !strings.Contains(err.Error(), "admin role") {
			t.Errorf("%v as a sender: %v", args, err)
		}
	}
}

// TestDeadReasonTypo: a dead-letter reason that is none of the fleet's is
// a wrong command line, before any network (a misspelt --reason matched
// nothing: "no dead letters", and a purge purged nothing).
func TestDeadReasonTypo(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"dlq", "list", "--reason", "posion"}, {"dlq", "purge", "--reason", "bad_lane"}, {"dlq", "replay", "--reason", "Poison"}} {
		_, _, err := publisher(t, append(args, "--nats-url", "nats://127.0.0.1:1")...)
		if exitCode(err) != exitUsage || err == nil || !strings.Contains(err.Error(), "is not a dead-letter reason (poison, invalid, bad-lane)") {
			t.Errorf("%v: exit %d, %v", args, exitCode(err), err)
		}
	}
}
