// Package mcptest installs the MCP project's reference server,
// @modelcontextprotocol/server-everything, from the npm registry for the
// tests that run it: the bridge's own and the fleet's process tests.
package mcptest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// EverythingVersion pins the reference server.
const EverythingVersion = "2026.8.31"

var installOnce = sync.OnceValues(installEverything)

// Everything installs the reference server with npm into the user's cache
// directory (LANEFLEET_NPM_CACHE overrides it), once per process: a later
// run finds it there. It returns the server's entry point, to run with
// node (`node <entry> stdio`). A missing npm, node or registry is an
// error: tests that need the server fail on it, never skip.
func Everything() (string, error) { return installOnce() }

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
		if json.Unmarshal(b, &p) == nil && p.Version == EverythingVersion {
			return filepath.Join(pkg, "dist", "index.js"), nil
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command("npm", "install", "--prefix", dir, "--no-audit", "--no-fund", "--no-save",
		"@modelcontextprotocol/server-everything@"+EverythingVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &installError{err: err, out: string(out)}
	}
	return filepath.Join(pkg, "dist", "index.js"), nil
}

// installError is a failed npm install with npm's output.
type installError struct {
	err error
	out string
}

func (e *installError) Error() string { return "npm install: " + e.err.Error() + "\n" + e.out }

// Unwrap returns the command's error.
func (e *installError) Unwrap() error { return e.err }
