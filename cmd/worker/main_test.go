package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lanefleet/lanefleet/redact"
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
	for _, args := range [][]string{{"--sync", "sometimes"}, {"--log-format", "xml"}, {"--no-such-flag"},
		{"--max-inbound-bytes", "lots"}, {"--max-lanes-bytes", "-2"}, {"--exec-approval", "maybe"}, {"--session-tools", "all"}, {"--processes-per-session", "-1"},
		{"--hooks-tool-failure", "maybe"}, {"--http-model-alias", "fast"}, {"permissions", "--role", "hook-server", "--user", "h"},
		{"permissions", "--role", "operator", "--user", "u"},
		{"permissions", "--role", "sender", "--user", "u"},
		{"permissions", "--role", "worker"},
		{"permissions", "--role", "worker", "--user", "u", "--format", "yaml"},
		{"mcp-bridge"}, {"mcp-bridge", "--config", "/nonexistent/mcp.json"}, {"--mcp", "/nonexistent/mcp.json"}} {
		var out, errb bytes.Buffer
		if err := run(args, strings.NewReader(""), &out, &errb); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// TestPermissionsSubcommand: worker permissions prints the configuration
// of the user it is asked for.
func TestPermissionsSubcommand(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	err := run([]string{"permissions", "--role", "sender", "--user", "alice", "--session", "alice", "--session", "a.b", "--format", "users"},
		strings.NewReader(""), &out, &errb)
	if err != nil {
		t.Fatalf("%v: %s", err, errb.String())
	}
	for _, want := range []string{`user: "alice"`, "password: $LANEFLEET_PASSWORD_ALICE", `"agent.in.alice"`, `"agent.in.=YS5i"`, `"_INBOX_alice.>"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %s:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "authorization") {
		t.Errorf("--format users printed a whole block:\n%s", out.String())
	}
}

// TestParseSize: sizes are numbers with binary suffixes, as nats-server
// reads them.
func TestParseSize(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"-1", -1, true}, {"1024", 1024, true}, {"16K", 16 << 10, true}, {"512M", 512 << 20, true},
		{"1G", 1 << 30, true}, {"1GiB", 1 << 30, true}, {"2gb", 2 << 30, true}, {"1T", 1 << 40, true},
		{"", 0, false}, {"G", 0, false}, {"-2", 0, false}, {"1.5G", 0, false}, {"10X", 0, false}, {"9999999999T", 0, false},
	} {
		got, err := parseSize(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseSize(%q) = %d, %v", c.in, got, err)
		}
	}
}

// TestServerConfigCombinations: flags that contradict a server
// configuration file are refused before anything starts, saying why.
func TestServerConfigCombinations(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--server-config", "nats.conf", "--sync", "always"}, "sync_interval"},
		{[]string{"--server-config", "nats.conf", "--nats-url", "nats://127.0.0.1:4222"}, "NATS_URL"},
	} {
		var out, errb bytes.Buffer
		err := run(c.args, strings.NewReader(""), &out, &errb)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error about %s", c.args, err, c.want)
		}
	}
}

// TestConventionalCLI: help and version exit 0 and start nothing (a
// worker would block here, on a data dir of the current directory); a
// wrong command line is a usage error (exit 2); subcommand help lists only
// that command's flags.
func TestConventionalCLI(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args     []string
		code     int
		out, not string
	}{
		{[]string{"--version"}, 0, "lanefleet ", ""},
		{[]string{"version"}, 0, "lanefleet ", ""},
		{[]string{"version", "--json"}, 0, `"revision":`, ""},
		{[]string{"-h"}, 0, "--metrics", ""},
		{[]string{"--help"}, 0, "--nats-monitor", ""},
		{[]string{"permissions", "-h"}, 0, "--role", "--data-dir"},
		{[]string{"version", "-h"}, 0, "--json", "--model"},
		{[]string{"sanitize", "-h"}, 0, "--provider string", "  -provider"},
		{[]string{"nosuch"}, 2, "", ""},
		{[]string{"--no-such-flag"}, 2, "", ""},
		{[]string{"--sync", "sometimes"}, 2, "", ""},
		{[]string{"version", "extra"}, 2, "", ""},
		{[]string{"sanitize", "--provider", "anthropic"}, 2, "", ""},
		{[]string{"sanitize", "--provider", "a", "--api", "b", "--model", "c", "--nope"}, 2, "", ""},
		{[]string{"sanitize", "--provider", "a", "--api", "b", "--model", "c", "extra"}, 2, "", ""},
		{[]string{"permissions", "--role", "operator", "--user", "u"}, 2, "", ""},
	} {
		var out, errb bytes.Buffer
		err := run(c.args, strings.NewReader(""), &out, &errb)
		if got := exitCode(err); got != c.code {
			t.Errorf("%v: exit %d (%v), want %d", c.args, got, err, c.code)
		}
		if c.out != "" && !strings.Contains(out.String(), c.out) {
			t.Errorf("%v: stdout lacks %q:\n%s", c.args, c.out, out.String())
		}
		if c.not != "" && strings.Contains(out.String(), c.not) {
			t.Errorf("%v: stdout lists %q, a flag the command ignores", c.args, c.not)
		}
	}
}

// TestHelpPrintsNoSecret: the password, key and URL flags take their
// environment defaults after parsing, so help never shows them.
func TestHelpPrintsNoSecret(t *testing.T) {
	t.Setenv("NATS_PASSWORD", "hunter2-the-nats-password")
	t.Setenv("OPENAI_COMPATIBLE_API_KEY", "sk-local-server-key-123")
	// A URL carries its user's password.
	t.Setenv("NATS_URL", "nats://worker:url-borne-password-42@127.0.0.1:4222")
	t.Setenv("OPENAI_COMPATIBLE_BASE_URL", "http://me:base-url-password-7@127.0.0.1:8080")
	var out, errb bytes.Buffer
	if err := run([]string{"-h"}, strings.NewReader(""), &out, &errb); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"hunter2-the-nats-password", "sk-local-server-key-123", "url-borne-password-42", "base-url-password-7"} {
		if strings.Contains(out.String()+errb.String(), secret) {
			t.Errorf("help shows %s", secret)
		}
	}
}

// TestLogTimestampsHaveMilliseconds: log lines carry the millisecond, in
// JSON and on the console (the console showed .000 on every line).
func TestLogTimestampsHaveMilliseconds(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "console"} {
		var b bytes.Buffer
		log, err := newLogger(&b, format, "info")
		if err != nil {
			t.Fatal(err)
		}
		// Lines 3 ms apart on the bubble's clock, which starts on a whole
		// second: the first line shows .000, the next ones must not.
		synctest.Test(t, func(*testing.T) {
			for range 3 {
				log.Info().Msg("tick")
				time.Sleep(3 * time.Millisecond)
			}
		})
		if !regexp.MustCompile(`:\d\d\.\d\d\d`).MatchString(b.String()) {
			t.Fatalf("%s: no milliseconds:\n%s", format, b.String())
		}
		if !regexp.MustCompile(`:\d\d\.(\d\d[1-9]|\d[1-9]\d|[1-9]\d\d)`).MatchString(b.String()) {
			t.Errorf("%s: every line at .000:\n%s", format, b.String())
		}
	}
}

// runEnv runs the worker command line with the environment env.
func runEnv(args []string, env map[string]string, stdout, stderr *bytes.Buffer) error {
	red := redact.New()
	return runWith(red, args, strings.NewReader(""), stdout, red.Writer(stderr), func(k string) string { return env[k] })
}

// TestRefusedAtStart: values no worker could mean stop it before it starts,
// with exit 2 and a reason naming the flag, its value and what is allowed.
// They were silently replaced (--concurrency -3 ran 1,024 lanes), failed
// later with a raw NATS error (--ack-wait -5s), or were overridden
// (--data-dir and --listen under an exported NATS_URL joined that server,
// or died with "no servers available"). Every case joins a URL where
// nothing listens, so a worker that is not refused fails otherwise.
func TestRefusedAtStart(t *testing.T) {
	t.Parallel()
	join := []string{"--nats-url", "nats://127.0.0.1:1", "--scripted"}
	for _, c := range []struct {
		args []string
		env  map[string]string
		want []string
	}{
		{[]string{"--ack-wait", "-5s"}, nil, []string{"--ack-wait -5s: want a positive duration"}},
		{[]string{"--timeout", "-1s"}, nil, []string{"--timeout -1s: want a positive duration"}},
		{[]string{"--lease-ttl", "0s"}, nil, []string{"--lease-ttl 0s: want a positive duration"}},
		{[]string{"--concurrency", "-3"}, nil, []string{"--concurrency -3: want a positive count"}},
		{[]string{"--replicas", "0"}, nil, []string{"--replicas 0: want 1 to 5"}},
		{[]string{"--linger", "0s", "--max-payload", "0"}, nil, []string{"--linger 0s: want a positive duration, or -1ms for none", "--max-payload 0"}},
		{[]string{"--hooks-timeout", "5m"}, nil, []string{"--hooks-timeout 5m0s: want a positive duration of at most 1m0s"}},
		{[]string{"--log-level", "loud"}, nil, []string{`--log-level "loud": want debug, info, warn or error`}},
		{[]string{"--log-level", "3"}, nil, []string{`--log-level "3"`}},
	} {
		var out, errb bytes.Buffer
		err := runEnv(append(slices.Clone(join), c.args...), c.env, &out, &errb)
		if exitCode(err) != exitUsage {
			t.Errorf("%v: exit %d (%v), want %d", c.args, exitCode(err), err, exitUsage)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v; want it to say %q", c.args, err, w)
			}
		}
	}
}

// TestEmbeddedFlagsWithNATSURL: a worker given the embedded server's flags
// while NATS_URL is set (a shell set up for the publisher exports it) is
// refused with a reason naming both and the way out; it joined that URL,
// or died with "no servers available", whatever its flags said.
func TestEmbeddedFlagsWithNATSURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		env  map[string]string
		want []string
	}{
		{[]string{"--scripted", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0"}, map[string]string{"NATS_URL": "nats://127.0.0.1:1"},
			[]string{"--data-dir, --listen configure the embedded server", "NATS_URL (set in the environment)", "env -u NATS_URL", "or drop --data-dir, --listen to join"}},
		{[]string{"--scripted", "--nats-url", "nats://127.0.0.1:1", "--sync", "always"}, nil,
			[]string{"--sync configure the embedded server", "--nats-url joins another server", "drop --nats-url"}},
	} {
		var out, errb bytes.Buffer
		err := runEnv(c.args, c.env, &out, &errb)
		if exitCode(err) != exitUsage {
			t.Errorf("%v: exit %d (%v), want %d", c.args, exitCode(err), err, exitUsage)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v; want it to say %q", c.args, err, w)
			}
		}
		t.Log(err)
	}
}

// TestDataDirDefault: only the embedded server without a configuration
// file defaults to ./lanefleet-data; a worker joining another server keeps
// nothing in the directory it was started from.
func TestDataDirDefault(t *testing.T) {
	t.Parallel()
	cases := []struct{ given, url, conf, want string }{
		{"", "", "", "./lanefleet-data"},
		{"/srv/lf", "", "", "/srv/lf"},
		{"", "nats://127.0.0.1:4222", "", ""},
		{"", "", "nats.conf", ""},
		{"/srv/lf", "", "nats.conf", "/srv/lf"},
	}
	for _, c := range cases {
		if got := dataDir(c.given, c.url, c.conf); got != c.want {
			t.Errorf("dataDir(%q, %q, %q) = %q, want %q", c.given, c.url, c.conf, got, c.want)
		}
	}
}
