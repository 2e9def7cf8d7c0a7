package fleet

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
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
