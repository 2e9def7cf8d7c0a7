package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
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

// TestStaleHoldersMarked: a worker that died leaves its run in the
// registry (for the registry's hour) and its lease until it lapses: runs
// and sessions mark such a run lapsed instead of running, and backlog
// says the lane's last lease lapsed instead of "lane idle".
func TestStaleHoldersMarked(t *testing.T) {
	t.Parallel()
	m, url := runFleet(t)
	ctx := t.Context()
	const session = "ghost"
	tok, err := events.KeyToken(session)
	if err != nil {
		t.Fatal(err)
	}
	// What a worker that died mid-run leaves: its registry entry, and a
	// lease nobody renews (a short one here), which lapses.
	if _, err := m.Runs.Register(ctx, tok, kvstore.RunInfo{Session: session, RunID: "41", Worker: "w-dead", Attempt: 1, StartedAt: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	short, err := kvstore.Open(ctx, m.JS, kvstore.Config{LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := m.JS.KeyValue(ctx, kvstore.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	watch, err := bucket.Watch(ctx, tok+".lease", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	if _, err := short.Acquire(ctx, tok, kvstore.LeaseInfo{Worker: "w-dead", Acquired: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	for lapsed := false; !lapsed; {
		select {
		case e := <-watch.Updates():
			lapsed = e != nil && e.Operation() != jetstream.KeyValuePut
		case <-ctx.Done():
			t.Fatal("the lease never lapsed")
		}
	}

	out, _, err := publisher(t, "runs", "--nats-url", url)
	if err != nil || !strings.Contains(out, "run 41       lapsed       worker w-dead attempt 1") ||
		!strings.Contains(out, "the worker holds the lane no more (its lease lapsed); the run starts again when a worker takes the lane") {
		t.Errorf("runs: %q, %v", out, err)
	}
	out, _, err = publisher(t, "runs", "--nats-url", url, "--json")
	if err != nil || !strings.Contains(out, `"holding":"lapsed"`) {
		t.Errorf("runs --json: %q, %v", out, err)
	}
	out, _, err = publisher(t, "sessions", "--nats-url", url)
	if err != nil || !strings.Contains(out, "run 41 on w-dead, lapsed: that worker holds the lane no more") {
		t.Errorf("sessions: %q, %v", out, err)
	}
	out, _, err = publisher(t, "backlog", "--nats-url", url, "--session", session)
	if err != nil || !strings.Contains(out, "; no worker holds the lane: the lease of its last worker lapsed ") {
		t.Errorf("backlog: %q, %v", out, err)
	}
}

// TestHolderTexts: how runs, sessions and backlog word a holder that
// stopped answering (its lease not renewed for a while, lapsing soon), one
// whose lease lapsed, and one that is well.
func TestHolderTexts(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	err := printRuns([]lanefleet.ActiveRun{
		{Session: "a", RunID: "1", Worker: "w1", Attempt: 1, StartedAt: now.Add(-time.Minute), Phase: "running", Holding: "live"},
		{Session: "b", RunID: "2", Worker: "w2", Attempt: 1, StartedAt: now.Add(-time.Minute), Phase: "running", Holding: "unresponsive",
			LeaseRenewed: now.Add(-17 * time.Second), LeaseExpires: now.Add(13 * time.Second)},
		{Session: "c", RunID: "3", Worker: "w3", Attempt: 2, StartedAt: now.Add(-time.Minute), Phase: "running", Holding: "lapsed"},
	}, runSchedules{}, false, now, &out)
	want := "a                        run 1        running      worker w1 attempt 1, 1m0s\n" +
		"b                        run 2        unresponsive worker w2 attempt 1, 1m0s: the worker stopped answering (lease not renewed for 17s); another worker takes the run over within 13s\n" +
		"c                        run 3        lapsed       worker w3 attempt 2, 1m0s: the worker holds the lane no more (its lease lapsed); the run starts again when a worker takes the lane\n"
	if err != nil || out.String() != want {
		t.Errorf("runs:\n%s\nwant\n%s", out.String(), want)
	}
	held := sessionsvc.BacklogReply{Holder: "w2", HeldSince: now.Add(-time.Minute).UnixMilli()}
	for _, c := range []struct {
		lease *sessionsvc.Lease
		want  string
	}{
		{&sessionsvc.Lease{Worker: "w2", RenewedAgoMs: 3000, LapsesInMs: 27000}, "; lane held by w2 for 1m0s"},
		{&sessionsvc.Lease{Worker: "w2", RenewedAgoMs: 17000, LapsesInMs: 13000, Unresponsive: true},
			"; lane held by w2 for 1m0s, but it stopped answering: its lease was not renewed for 17s and lapses within 13s, then another worker takes the lane"},
	} {
		held.Lease = c.lease
		if got := holderText(held, now); got != c.want {
			t.Errorf("backlog: %q, want %q", got, c.want)
		}
	}
	var sess bytes.Buffer
	if err := printSessions(admin.SessionsReply{Total: 1, Sessions: []admin.Session{{Key: "b", Fingerprint: "fp", LastActivity: now.UnixMilli(), LastRun: "2",
		Running: "2", Worker: "w2", Holding: "unresponsive", LapsesInMs: 13000}}}, false, now, &sess); err != nil ||
		!strings.Contains(sess.String(), "run 2 on w2, unresponsive: its lease lapses within 13s, then another worker takes the run over") {
		t.Errorf("sessions: %q, %v", sess.String(), err)
	}
}
