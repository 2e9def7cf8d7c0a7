package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/lanefleet/lanefleet/gateway/mcpserver"
)

// mcpProcess runs `publisher mcp` with args as its own process (this test
// binary, see TestMain) and connects the official SDK's client to it over
// stdio.
func mcpProcess(t *testing.T, args ...string) (*mcp.ClientSession, *exec.Cmd, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	cmd := exec.Command(os.Args[0], append([]string{"mcp"}, args...)...)
	cmd.Env = []string{"LANEFLEET_TEST_PUBLISHER_MAIN=1"}
	cmd.Stderr = os.Stderr
	cl := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := cl.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, cmd, ctx
}

// callTool calls tool and returns its text, whether it is a tool error,
// and its structured content decoded into out (when not nil).
func callTool(t *testing.T, ctx context.Context, cs *mcp.ClientSession, tool string, args map[string]any, out any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var sb strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			sb.WriteString(tc.Text)
		}
	}
	if out != nil && !res.IsError {
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatal(err)
		}
	}
	return sb.String(), res.IsError
}

// TestMCPStdio: `publisher mcp` serves the fleet's tools over stdio with
// the publisher's NATS flags, and its NATS user is its scope: a sender
// sends to and reads its own session, and the fleet's permissions refuse
// another session and the listing (the admin role's), which the tools
// say.
func TestMCPStdio(t *testing.T) {
	t.Parallel()
	url := startUsersServer(t, "alice")
	startWorkerOn(t, strings.Replace(url, "nats://", "nats://worker:w@", 1))
	cs, _, ctx := mcpProcess(t, "--nats-url", url, "--user", "alice", "--password", "alice")

	var res mcpserver.RunResult
	if text, isErr := callTool(t, ctx, cs, mcpserver.ToolSend, map[string]any{"session": "alice", "text": "over stdio"}, &res); isErr ||
		text != "echo: over stdio" || res.Status != mcpserver.StatusDone {
		t.Fatalf("send_message: %q %+v", text, res)
	}
	var page mcpserver.HistoryPage
	if _, isErr := callTool(t, ctx, cs, mcpserver.ToolHistory, map[string]any{"session": "alice"}, &page); isErr ||
		page.Total != 2 || page.Messages[1].Text != "echo: over stdio" {
		t.Fatalf("read_history: %+v", page)
	}
	if text, isErr := callTool(t, ctx, cs, mcpserver.ToolSend, map[string]any{"session": "bob", "text": "not yours"}, nil); !isErr ||
		!strings.Contains(text, "NATS user may not do this") {
		t.Fatalf("send_message to another user's session: %q (error %v)", text, isErr)
	}
	if text, isErr := callTool(t, ctx, cs, mcpserver.ToolSessions, nil, nil); !isErr || !strings.Contains(text, "admin role") {
		t.Fatalf("list_sessions as a sender: %q (error %v)", text, isErr)
	}
}

// TestMCPStdioLists: on a fleet without NATS users, list_sessions lists
// the fleet's sessions; the server exits 0 when its client closes stdin.
func TestMCPStdioLists(t *testing.T) {
	t.Parallel()
	url := startFleet(t)
	cs, cmd, ctx := mcpProcess(t, "--nats-url", url)
	if _, isErr := callTool(t, ctx, cs, mcpserver.ToolSend, map[string]any{"session": "agent:main:dm:1", "text": "hi"}, nil); isErr {
		t.Fatal("send_message failed")
	}
	var page mcpserver.SessionsPage
	if text, isErr := callTool(t, ctx, cs, mcpserver.ToolSessions, nil, &page); isErr || len(page.Sessions) != 1 || page.Sessions[0].Key != "agent:main:dm:1" {
		t.Fatalf("list_sessions: %q %+v", text, page)
	}
	if err := cs.Close(); err != nil || cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 0 {
		t.Fatalf("the server after its client closed stdin: %v, %v", err, cmd.ProcessState)
	}
}
