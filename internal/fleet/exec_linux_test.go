package fleet

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lanefleet/lanefleet/runner"
	"github.com/lanefleet/lanefleet/sandbox"
	"github.com/lanefleet/lanefleet/tools"
)

// skipNoConfinement skips a test of exec where the platform cannot confine
// it.
func skipNoConfinement(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, sandbox.ErrUnavailable) {
		t.Skip(err)
	}
}

// device is the filesystem p (or, until it exists, its parent) is on.
func device(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	err := syscall.Stat(p, &st)
	if errors.Is(err, os.ErrNotExist) {
		return device(t, filepath.Dir(p))
	}
	if err != nil {
		t.Fatal(err)
	}
	return st.Dev
}

// TestExecWorkspaceOffTheStore: with exec, the default workspace root
// (<data-dir>/workspaces) is not on the JetStream store's filesystem, or
// the worker does not start: its commands could fill that filesystem and
// stop the store.
func TestExecWorkspaceOffTheStore(t *testing.T) {
	// Not parallel: its forks would hold other tests' data directory
	// locks while they close and reopen them (TestDataDirLocked).
	dir := t.TempDir()
	m, err := startMember(t, Config{DataDir: dir, Exec: true})
	skipNoConfinement(t, err)
	if err != nil {
		if !strings.Contains(err.Error(), "JetStream store's filesystem") {
			t.Fatal(err)
		}
		t.Logf("refused: %v", err)
		return
	}
	if ws, store := device(t, filepath.Join(dir, "workspaces")), device(t, filepath.Join(dir, "jetstream")); ws == store {
		t.Fatalf("the workspaces share the store's filesystem (device %d)", ws)
	}
	m.close()
	if ws, store := device(t, filepath.Join(dir, "workspaces")), device(t, filepath.Join(dir, "jetstream")); ws != store {
		t.Fatal("still mounted after the member closed")
	}
}

// TestExecWorkspaceDiskFull: a command writing beyond WorkspaceMaxBytes
// fails with ENOSPC in its own filesystem; the image on the store's
// filesystem takes no more than the bound.
func TestExecWorkspaceDiskFull(t *testing.T) {
	// Not parallel: its forks would hold other tests' data directory
	// locks while they close and reopen them (TestDataDirLocked).
	dir := t.TempDir()
	store := filepath.Join(dir, "jetstream")
	if err := os.Mkdir(store, 0o750); err != nil {
		t.Fatal(err)
	}
	ts, err := newToolSource(t.Context(), Config{DataDir: dir, Exec: true, WorkspaceMaxBytes: 16 << 20, Logger: testLog(t), Env: os.Getenv}, nil, store)
	skipNoConfinement(t, err)
	if errors.Is(err, sandbox.ErrDiskUnavailable) || (err != nil && strings.Contains(err.Error(), "cannot be bounded")) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer ts.disk.Close()
	set, err := ts.Tools(t.Context(), runner.Input{SessionKey: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	exec, ok := set.Lookup("exec")
	if !ok {
		t.Fatal("no exec tool")
	}
	res, err := exec.Call(t.Context(), tools.Call{Name: "exec", Args: map[string]any{"command": "head -c 32M /dev/zero > big"}})
	if err != nil {
		t.Fatal(err)
	}
	if text := res.Content[0].Text; !res.IsError || !strings.Contains(text, "No space left on device") {
		t.Fatalf("%v: %q", res.IsError, text)
	}
	var img syscall.Stat_t
	if err := syscall.Stat(ts.disk.Image, &img); err != nil || img.Blocks*512 > 16<<20 {
		t.Fatalf("the image takes %d bytes of the store's filesystem: %v", img.Blocks*512, err)
	}
}

// TestExecWorkspaceUnbounded: a workspace root that cannot be bounded
// (here it holds files already, so no filesystem is mounted over them) is
// refused on the store's filesystem unless the operator turns the bound
// off, and only warned about elsewhere.
func TestExecWorkspaceUnbounded(t *testing.T) {
	// Not parallel: its forks would hold other tests' data directory
	// locks while they close and reopen them (TestDataDirLocked).
	// A data directory whose workspaces hold a session's files. (Each
	// start gets its own: a data directory's lock is held until every
	// process forked meanwhile has exec'd.)
	dataDir := func() string {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "workspaces", "bob"), 0o750); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	_, err := startMember(t, Config{DataDir: dataDir(), Exec: true})
	skipNoConfinement(t, err)
	if err == nil || !strings.Contains(err.Error(), "on the JetStream store's filesystem") || !strings.Contains(err.Error(), "--workspace-max-bytes -1") {
		t.Fatalf("unbounded on the store's filesystem: %v", err)
	}
	if _, err := startMember(t, Config{DataDir: dataDir(), Exec: true, WorkspaceMaxBytes: -1}); err != nil {
		t.Fatalf("turned off: %v", err)
	}
	// Elsewhere: a warning.
	shm, err := os.MkdirTemp("/dev/shm", "lanefleet-ws-")
	if err != nil {
		t.Skip("no /dev/shm")
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	if err := os.Mkdir(filepath.Join(shm, "bob"), 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := startMember(t, Config{DataDir: t.TempDir(), WorkspaceRoot: shm, Exec: true}); err != nil {
		t.Fatalf("another filesystem: %v", err)
	}
}
