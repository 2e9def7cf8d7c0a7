package mcpbridge_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lanefleet/lanefleet/mcpbridge"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/tools"
)

// everythingVersion pins the MCP project's reference server,
// @modelcontextprotocol/server-everything, installed from the npm registry.
const everythingVersion = "2026.8.31"

var installOnce = sync.OnceValues(installEverything)

// installEverything installs the reference server with npm into the user's
// cache directory (LANEFLEET_NPM_CACHE overrides it), once: a later run
// finds it there. It returns the server's entry point.
func installEverything() (string, error) {
	dir := os.Getenv("LANEFLEET_NPM_CACHE")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(cache, "lanefleet", "npm")
	}
	pkg := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything")
	if b, err := os.ReadFile(filepath.Join(pkg, "package.json")); err == nil {
		var p struct{ Version string }
		if json.Unmarshal(b, &p) == nil && p.Version == everythingVersion {
			return filepath.Join(pkg, "dist", "index.js"), nil
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command("npm", "install", "--prefix", dir, "--no-audit", "--no-fund", "--no-save",
		"@modelcontextprotocol/server-everything@"+everythingVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &installError{err: err, out: string(out)}
	}
	return filepath.Join(pkg, "dist", "index.js"), nil
}

type installError struct {
	err error
	out string
}

func (e *installError) Error() string { return "npm install: " + e.err.Error() + "\n" + e.out }

// TestServerEverything: the MCP project's reference server, from the npm
// registry, over stdio: its tools are listed and called with text, image
// and structured results, and its long-running operation's progress comes
// as partial results. A missing install (no npm, no node, no registry)
// fails the test.
func TestServerEverything(t *testing.T) {
	t.Parallel()
	entry, err := installOnce()
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
