package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/internal/mcptest"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// everythingConfig writes an MCP config with the reference server (from
// npm: a missing install fails the test) as the stdio server "ev".
func everythingConfig(t *testing.T) string {
	t.Helper()
	entry, err := mcptest.Everything()
	if err != nil {
		t.Fatalf("the reference MCP server is not installed: %v", err)
	}
	cfg, err := json.Marshal(map[string]any{"mcpServers": map[string]any{"ev": map[string]any{"command": "node", "args": []string{entry, "stdio"}}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitLog waits until a process's output holds want, or fails when the
// process exits first (exited, when not nil, is closed then).
func waitLog(t *testing.T, logs *syncBuffer, exited <-chan struct{}, want string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for !strings.Contains(logs.String(), want) {
		select {
		case <-exited:
			t.Fatalf("the process exited before it logged %q", want)
		case <-deadline:
			t.Fatalf("no %q in the output within a minute", want)
		case <-time.After(20 * time.Millisecond): // a log has no event to wait on
		}
	}
}

// TestWorkerMCP: a worker process started with --mcp runs the bridge in
// process with the reference MCP server over stdio; a turn whose model
// calls the server's echo tool gets the server's answer as the tool
// result, in the transcript.
func TestWorkerMCP(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	cfg := everythingConfig(t)
	srv := natstest.Start(t)
	_, logs := startPlainProcess(t, srv.URL, nil, "--scripted", "--no-builtin-tools", "--mcp", cfg, "--remote-tools", "ev__*")
	// The worker refreshes its tools once the bridge serves them.
	waitLog(t, logs, nil, "remote tools: refreshed after the MCP bridge served tools")

	c, err := lanefleet.New(natstest.Connect(t, srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // detects a hang only
	defer cancel()
	script := `#script {"replies":[{"toolCalls":[{"id":"m1","name":"ev__echo","arguments":{"message":"hi from the fleet"}}]},{"text":"done"}]}`
	res, err := waitResult(t, ctx, c, "mcp", script, lanefleet.WithModel("scripted/script"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Payloads) == 0 || res.Payloads[0].Text != "done" {
		t.Fatalf("result %+v", res)
	}
	hist, err := c.History(ctx, "mcp")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range hist {
		if e.Message != nil && e.Message.Role == message.RoleToolResult {
			got = append(got, fmt.Sprintf("%s: %s (error %v)", e.Message.ToolName, e.Message.Content.Text(), e.Message.IsError))
		}
	}
	if want := "ev__echo: Echo: hi from the fleet (error false)"; len(got) != 1 || got[0] != want {
		t.Fatalf("tool results in the transcript = %q, want [%q]", got, want)
	}
}

// bridgeProcess runs `worker mcp-bridge --config cfg` on url in a process
// group of its own (the cleanup kills the group: its stdio servers too).
func bridgeProcess(t *testing.T, url, cfg string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(workerBinary(t), "mcp-bridge", "--config", cfg, "--nats-url", url, "--log-format", "json", "--log-level", "info"),
		logs: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
		if t.Failed() {
			t.Logf("bridge output:\n%s", p.logs.String())
		}
	})
	return p
}

// TestMCPBridgeKilled: two bridge processes serve the reference server.
// The one running a long call is killed with SIGKILL: the caller, whose
// call timeout is ten minutes, fails the call once its heartbeats stop,
// saying it may have taken effect in part and naming its idempotency key;
// calls after it go to the other bridge. Before heartbeats the call
// waited for its timeout.
func TestMCPBridgeKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	cfg := everythingConfig(t)
	srv := natstest.Start(t)
	caller := natstest.Connect(t, srv.URL)
	dc := remote.DiscoverConfig{Window: 100 * time.Millisecond, Allow: []string{"ev__*"}, CallTimeout: 10 * time.Minute, Heartbeat: 500 * time.Millisecond}
	lookup := func(name string) tools.Tool {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			list, err := remote.Discover(t.Context(), caller, dc)
			if err != nil {
				t.Fatal(err)
			}
			if tl, ok := list.Lookup(name); ok {
				return tl
			}
			if time.Now().After(deadline) {
				t.Fatalf("tool %s not discovered within a minute", name)
			}
		}
	}

	// The first bridge alone: the long call runs there.
	first := bridgeProcess(t, srv.URL, cfg)
	long := lookup("ev__trigger-long-running-operation")
	errc := make(chan error, 1)
	go func() {
		// One step: no progress comes before the end, so only the
		// heartbeats say the bridge is alive.
		_, err := long.Call(t.Context(), tools.Call{ID: "c1", Key: "run-1:c1", Args: map[string]any{"duration": 600, "steps": 1}})
		errc <- err
	}()
	waitInFlight(t, caller, "ev__trigger-long-running-operation", errc)
	second := bridgeProcess(t, srv.URL, cfg)
	waitLog(t, second.logs, second.exited, "mcp bridge: serving tools")

	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		var e *remote.Error
		if !errors.As(err, &e) || !errors.Is(err, remote.ErrLost) {
			t.Fatalf("the long call's error = %v, want ErrLost", err)
		}
		if want := "tool ev__trigger-long-running-operation's server stopped answering (no heartbeat for 1.5s); the call may have taken effect in part (idempotency key run-1:c1)"; e.Message != want {
			t.Errorf("error = %q\nwant %q", e.Message, want)
		}
	case <-time.After(time.Minute):
		t.Fatal("the long call still waits a minute after its bridge was killed")
	}

	// Later calls go to the bridge left.
	echo := lookup("ev__echo")
	for i := range 5 {
		res, err := echo.Call(t.Context(), tools.Call{ID: fmt.Sprintf("e%d", i), Args: map[string]any{"message": "still here"}})
		if err != nil || res.IsError || res.Content[0].Text != "Echo: still here" {
			t.Fatalf("call %d after the kill = %+v, %v", i, res, err)
		}
	}
	select {
	case <-second.exited:
		t.Fatalf("the second bridge exited: %v", second.err)
	default:
	}
}

// waitInFlight waits until the tool servers' stats show a call of tool in
// flight; errc failing first fails the test.
func waitInFlight(t *testing.T, nc *nats.Conn, tool string, errc <-chan error) {
	t.Helper()
	subject, err := micro.ControlSubject(micro.StatsVerb, remote.ServiceNameDefault, "")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(time.Minute)
	for {
		if rep, err := nc.Request(subject, nil, 10*time.Second); err == nil {
			var stats micro.Stats
			if json.Unmarshal(rep.Data, &stats) == nil {
				for _, ep := range stats.Endpoints {
					var data remote.ToolStats
					if ep.Name == tool && json.Unmarshal(ep.Data, &data) == nil && data.InFlight > 0 {
						return
					}
				}
			}
		}
		select {
		case err := <-errc:
			t.Fatalf("the call ended before it was seen running: %v", err)
		case <-deadline:
			t.Fatalf("no call of %s in flight within a minute", tool)
		case <-time.After(20 * time.Millisecond): // stats have no event to wait on
		}
	}
}
