package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// Issue 19 item 4: a worker fails at start, with the reason, rather than
// logging ready and failing every turn.

// TestStartChecksModels: a models file entry no adapter could call, or a
// default or fallback model the worker cannot serve, stops the worker
// with the reason.
func TestStartChecksModels(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	dir := t.TempDir()
	file := func(name, data string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	noAPI := file("noapi.json", `{"providers":{"acme":{"baseUrl":"http://127.0.0.1:9/v1","models":[{"id":"m1"}]}}}`)
	noURL := file("nourl.json", `[{"provider":"acme","id":"m1","api":"openai-completions"}]`)
	good := file("good.json", `{"providers":{"acme":{"baseUrl":"http://127.0.0.1:9/v1","api":"openai-completions","models":[{"id":"m1"},{"id":"tiny","contextWindow":4096}]}}}`)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--models-file", noAPI, "--model", "acme/m1"}, []string{"acme/m1", `no "api"`, `provider "acme" is not built in`, noAPI}},
		{[]string{"--models-file", noURL, "--model", "acme/m1"}, []string{"acme/m1", `"baseUrl"`}},
		{[]string{"--models-file", good, "--model", "acme/m1", "--fallback", "nosuch/x"}, []string{"fallback", "unknown provider", "nosuch"}},
		{[]string{"--models-file", good, "--model", "acme/tiny"}, []string{"default model", "too small (4096 tokens)"}},
	} {
		w := localWorker(t, srv.URL, nil, c.args...)
		err := w.wait(t)
		out := w.logs.String()
		if err == nil || strings.Contains(out, `"message":"ready"`) {
			t.Errorf("%v: exit %v\n%s", c.args, err, out)
			continue
		}
		for _, want := range c.want {
			if !strings.Contains(out, want) {
				t.Errorf("%v: output does not say %q:\n%s", c.args, want, out)
			}
		}
	}
}

// TestDataDirLockedAcrossProcesses: a second worker on a data directory
// in use exits naming the first (pid, worker id, the address to join);
// once the first is killed (SIGKILL: nothing cleaned up), a new worker
// takes the directory over. A --listen in use and a data directory that
// cannot be written each stop a worker at once with their own reason.
func TestDataDirLockedAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	ports, err := embedded.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", ports[0])
	first := workerProcess(t, nil, "--data-dir", dir, "--listen", listen, "--id", "first")
	first.waitReady(t)

	second := workerProcess(t, nil, "--data-dir", dir, "--listen", fmt.Sprintf("127.0.0.1:%d", ports[1]), "--id", "second")
	err = second.wait(t)
	out := second.logs.String()
	for _, want := range []string{fmt.Sprintf("in use by pid %d", first.cmd.Process.Pid), "worker first", "--nats-url nats://" + listen} {
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("second worker on the same data dir: exit %v; output does not say %q:\n%s", err, want, out)
		}
	}

	// A busy --listen (the first worker's): its own error, at once.
	busy := workerProcess(t, nil, "--data-dir", t.TempDir(), "--listen", listen)
	if err := busy.wait(t); err == nil || !strings.Contains(busy.logs.String(), "address already in use") ||
		!strings.Contains(busy.logs.String(), "another worker or NATS server listens there") {
		t.Errorf("busy --listen: exit %v\n%s", err, busy.logs.String())
	}

	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.exited
	third := workerProcess(t, nil, "--data-dir", dir, "--listen", listen, "--id", "third")
	third.waitReady(t)
	if err := third.stop(t); err != nil {
		t.Errorf("third worker exit: %v", err)
	}

	// An unwritable data directory (here: under a file, which fails even
	// for root).
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bad := workerProcess(t, nil, "--data-dir", filepath.Join(f, "data"))
	if err := bad.wait(t); err == nil || !strings.Contains(bad.logs.String(), "--data-dir") || !strings.Contains(bad.logs.String(), "not writable") {
		t.Errorf("unwritable --data-dir: exit %v\n%s", err, bad.logs.String())
	}
}
