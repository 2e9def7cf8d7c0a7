package mcpbridge_test

import (
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/internal/mcptest"
	"github.com/lanefleet/lanefleet/mcpbridge"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/tools"
)

// TestServerEverything: the MCP project's reference server, from the npm
// registry, over stdio: its tools are listed and called with text, image
// and structured results, and its long-running operation's progress comes
// as partial results. A missing install (no npm, no node, no registry)
// fails the test.
func TestServerEverything(t *testing.T) {
	t.Parallel()
	entry, err := mcptest.Everything()
	if err != nil {
		t.Fatalf("the reference server is not installed: %v", err)
	}
	b := setup(t)
	b.bridge(t, mcpbridge.Server{Name: "ev", Transport: mcpbridge.TransportStdio, Command: "node", Args: []string{entry, "stdio"}})
	nc := b.caller(t)

	res := call(t, tool(t, nc, "ev__echo"), tools.Call{ID: "c1", Args: map[string]any{"message": "hi"}})
	if text(res) != "Echo: hi" {
		t.Errorf("echo = %q", text(res))
	}
	res = call(t, tool(t, nc, "ev__get-tiny-image"), tools.Call{ID: "c2"})
	images := 0
	for _, bl := range res.Content {
		if bl.Type == message.BlockImage && bl.MimeType == "image/png" && bl.Data != "" {
			images++
		}
	}
	if images != 1 || !strings.Contains(text(res), "image") {
		t.Errorf("tiny image = %+v", res.Content)
	}
	res = call(t, tool(t, nc, "ev__get-structured-content"), tools.Call{ID: "c3", Args: map[string]any{"location": "Chicago"}})
	if res.Details["structuredContent"] == nil || !strings.Contains(text(res), "temperature") {
		t.Errorf("structured = %q, details %v", text(res), res.Details)
	}
	var progress []string
	res = call(t, tool(t, nc, "ev__trigger-long-running-operation"), tools.Call{ID: "c4", Args: map[string]any{"duration": 0.2, "steps": 2},
		Update: func(p tools.Result) { progress = append(progress, text(p)) }})
	if !strings.Contains(text(res), "Long running operation completed") {
		t.Errorf("long running = %q", text(res))
	}
	if len(progress) == 0 || !strings.HasPrefix(progress[0], "progress 1/2") {
		t.Errorf("partial results = %q, want progress 1/2 first", progress)
	}
}
