package embedded

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStartBusyPort: a client port another process listens on fails at
// once with the listener's error, not with a readiness timeout.
func TestStartBusyPort(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = Start(Config{Name: "busy", Port: port, DataDir: t.TempDir(), SyncAlways: new(bool)})
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Fatalf("busy port: %v; want EADDRINUSE naming %s", err, l.Addr())
	}
}

// TestStartUnwritableStore: a JetStream store that cannot be created fails
// with the server's reason as soon as it gives up, not after 15 s of "not
// ready".
func TestStartUnwritableStore(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Start(Config{Name: "store", DataDir: filepath.Join(file, "jetstream"), SyncAlways: new(bool)})
	if err == nil || !strings.Contains(err.Error(), "JetStream") || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("store under a file: %v; want JetStream's reason", err)
	}
}

// TestLockStore: a store is locked once; the second attempt names the
// holder; Close frees it; the lock file sits beside the jetstream
// directory, never in it.
func TestLockStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	store := filepath.Join(dir, "jetstream")
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := Holder{PID: 4242, Host: "box", Worker: "w1", Listen: "127.0.0.1:4222", Since: since}
	l, err := LockStore(store, h)
	if err != nil {
		t.Fatal(err)
	}
	if l.Path() != filepath.Join(dir, LockFileName) {
		t.Errorf("lock file %s", l.Path())
	}
	_, err = LockStore(store, Holder{PID: 1})
	var le *LockedError
	if !errors.As(err, &le) || le.Holder != h {
		t.Fatalf("second lock: %v; want a LockedError naming %+v", err, h)
	}
	for _, want := range []string{dir, "pid 4242 on box", "worker w1", "listening on 127.0.0.1:4222", "2026-01-02T03:04:05Z"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	// A worker learns its id later: the file says the new holder.
	h.Worker = "w2"
	if err := l.SetHolder(h); err != nil {
		t.Fatal(err)
	}
	if _, err := LockStore(store, Holder{}); !errors.As(err, &le) || le.Holder.Worker != "w2" {
		t.Fatalf("after SetHolder: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := LockStore(store, Holder{PID: 7})
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	defer l2.Close()
	var got Holder
	b, _ := os.ReadFile(l2.Path())
	if err := json.Unmarshal(b, &got); err != nil || got.PID != 7 || got.Worker != "" {
		t.Fatalf("file holds %q (%v); want the new holder alone", b, err)
	}
}

// TestLockedHolderUnknown: a lock file whose holder has not written (or
// that holds something else) still refuses, saying the holder is unknown.
func TestLockedHolderUnknown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := LockStore(dir, Holder{PID: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := os.WriteFile(l.Path(), []byte(strings.Repeat("x", 2*maxHolderBytes)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = LockStore(dir, Holder{PID: 2})
	var le *LockedError
	if !errors.As(err, &le) || le.Holder != (Holder{}) || !strings.Contains(err.Error(), "another process") {
		t.Fatalf("%v", err)
	}
}

func TestLockPath(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ store, want string }{
		{"/data/jetstream", "/data/" + LockFileName},   // the worker's --data-dir layout
		{"/data/jetstream/", "/data/" + LockFileName},  // cleaned
		{"/srv/nats", "/srv/nats/" + LockFileName},     // the server adds jetstream/ itself
		{"relative/js", "relative/js/" + LockFileName}, // relative stays relative
	} {
		if got := LockPath(c.store); got != c.want {
			t.Errorf("LockPath(%q) = %q, want %q", c.store, got, c.want)
		}
	}
}

// TestLockStoreUnwritable: a directory that cannot be created or written
// is ErrStoreDir with the cause.
func TestLockStoreUnwritable(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := LockStore(filepath.Join(file, "jetstream"), Holder{PID: 1})
	if !errors.Is(err, ErrStoreDir) || !errors.Is(err, syscall.ENOTDIR) {
		t.Fatalf("under a file: %v", err)
	}
	if os.Geteuid() == 0 {
		return // root writes through permission bits
	}
	ro := t.TempDir()
	if err := os.Chmod(ro, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(ro, 0o700) })
	if _, err := LockStore(filepath.Join(ro, "jetstream"), Holder{PID: 1}); !errors.Is(err, ErrStoreDir) || !errors.Is(err, os.ErrPermission) {
		t.Fatalf("read-only: %v", err)
	}
}
