package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
)

func startMember(t *testing.T, cfg Config) (*Member, error) {
	t.Helper()
	cfg.Scripted, cfg.Logger = true, testLog(t)
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	m, err := Start(t.Context(), cfg)
	if err == nil {
		t.Cleanup(m.close)
	}
	return m, err
}

// runMember starts a member with its embedded server, runs it until the
// test ends, and returns it, a client on its connection and a context of
// a minute for the test's calls.
func runMember(t *testing.T, cfg Config) (*Member, *lanefleet.Client, context.Context) {
	t.Helper()
	m, err := startMember(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return runStarted(t, m)
}

// runStartedClient returns a client on a member's connection and a
// context of a minute, for a member the test runs itself.
func runStartedClient(t *testing.T, m *Member) (*Member, *lanefleet.Client, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	c, err := lanefleet.New(m.Conn)
	if err != nil {
		t.Fatal(err)
	}
	return m, c, ctx
}

// runStarted runs a started member as runMember does.
func runStarted(t *testing.T, m *Member) (*Member, *lanefleet.Client, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	c, err := lanefleet.New(m.Conn)
	if err != nil {
		t.Fatal(err)
	}
	return m, c, ctx
}

// TestDataDirLocked: a second worker on a data directory in use fails at
// start naming the holder (pid, worker id, address to join); once the
// first has stopped, the directory is free again.
func TestDataDirLocked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, err := startMember(t, Config{DataDir: dir, WorkerID: "first"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = startMember(t, Config{DataDir: dir, WorkerID: "second"})
	t.Log(err)
	for _, want := range []string{"in use by pid " + fmt.Sprint(os.Getpid()), "worker first", "--nats-url " + a.Server.ClientURL(), "--data-dir"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("second worker: %v; want it to say %q", err, want)
		}
	}
	a.close()
	b, err := startMember(t, Config{DataDir: dir, WorkerID: "second"})
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	if b.Server.ClientURL() == "" {
		t.Fatal("no server")
	}
}

// TestBusyListen: a --listen address in use fails at once saying so, and
// leaves the data directory unlocked.
func TestBusyListen(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	_, err = startMember(t, Config{DataDir: dir, Listen: l.Addr().String()})
	t.Log(err)
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "another worker or NATS server listens there") {
		t.Fatalf("busy port: %v", err)
	}
	if _, err := startMember(t, Config{DataDir: dir}); err != nil {
		t.Fatalf("the failed start kept the data directory locked: %v", err)
	}
}

// TestUnwritableDataDir: a data directory that cannot be written fails
// at once saying so (it waited 15 s for "not ready").
func TestUnwritableDataDir(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := startMember(t, Config{DataDir: filepath.Join(file, "data")})
	t.Log(err)
	if !errors.Is(err, syscall.ENOTDIR) || !strings.Contains(err.Error(), "--data-dir") || !strings.Contains(err.Error(), "not writable") {
		t.Fatalf("data dir under a file: %v", err)
	}
}

// TestSilentMisconfigurations: flags that can only be mistakes fail at
// start saying which (they were accepted, and the worker ran without what
// they named).
func TestSilentMisconfigurations(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "SKILL.md")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"missing skills dir", Config{SkillsDir: filepath.Join(t.TempDir(), "nosuch")}, "--skills-dir"},
		{"skills dir a file", Config{SkillsDir: file}, "not a directory"},
		{"unknown fallback", Config{Fallbacks: []string{"nosuch/model"}}, "fallback model"},
		{"unknown default model", Config{DefaultModel: "nosuch/model"}, "default model"},
		// A default model that resolves but cannot run: the worker logged
		// ready while every turn failed.
		{"unknown scripted default model", Config{DefaultModel: "scripted/nosuch", Env: noEnv}, `default model: "scripted/nosuch": no such scripted model`},
		{"default model without a key", Config{DefaultModel: "anthropic/claude-sonnet-4-6", Env: noEnv},
			`default model: "anthropic/claude-sonnet-4-6": no API key for provider "anthropic" (set ANTHROPIC_API_KEY or ANTHROPIC_OAUTH_TOKEN, or add an auth profile for anthropic to --auth-profiles)`},
		{"fallback without a key", Config{DefaultModel: "scripted/echo", Fallbacks: []string{"openai/gpt-5-mini"}, Env: noEnv},
			`fallback model: "openai/gpt-5-mini": no API key for provider "openai"`},
		{"missing auth profiles", Config{AuthProfiles: filepath.Join(t.TempDir(), "auth-profiles.json")}, "does not exist"},
		{"monitor of a joined server", Config{NATSURL: "nats://127.0.0.1:1", NATSMonitor: "127.0.0.1:0"}, "--nats-monitor"},
		{"open monitor", Config{NATSMonitor: "0.0.0.0:0"}, "no authentication"},
		{"web allow without web fetch", Config{WebAllow: []string{"10.0.0.0/8"}}, "without WebFetch (--web-fetch)"},
		{"bad web allow", Config{WebFetch: true, WebAllow: []string{"10.0.0.0/33"}}, "--web-allow"},
		{"brave without a key", Config{WebSearch: "brave", Env: noEnv}, "needs a Brave Search API key: set BRAVE_API_KEY"},
		{"searxng without a URL", Config{WebSearch: "searxng"}, "searxng needs the instance's URL"},
		{"unknown search provider", Config{WebSearch: "google"}, `provider "google"`},
		{"search URL without a provider", Config{WebSearchURL: "http://127.0.0.1:8888"}, "--web-search"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.cfg.DataDir = t.TempDir()
			_, err := startMember(t, c.cfg)
			t.Log(err)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v; want an error about %s", err, c.want)
			}
		})
	}
}

// noEnv is an environment without a variable.
func noEnv(string) string { return "" }

// TestNATSMonitor: --nats-monitor serves the embedded server's monitoring
// endpoints.
func TestNATSMonitor(t *testing.T) {
	t.Parallel()
	m, err := startMember(t, Config{DataDir: t.TempDir(), NATSMonitor: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := m.NATSMonitorAddr()
	if addr == "" {
		t.Fatal("no monitoring address")
	}
	resp, err := http.Get("http://" + addr + "/jsz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"streams"`) {
		t.Fatalf("/jsz: %d %s", resp.StatusCode, body)
	}
}
