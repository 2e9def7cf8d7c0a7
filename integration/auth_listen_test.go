package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/internal/embedded"
)

// TestListenWithoutAuthRefused: a worker asked to listen on every
// interface without authentication exits non-zero and says what to do;
// with --insecure-listen it starts. A --listen that contradicts the server
// configuration file is refused too.
func TestListenWithoutAuthRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	ports, err := embedded.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	open := fmt.Sprintf("0.0.0.0:%d", ports[0])

	w := workerProcess(t, nil, "--listen", open, "--data-dir", t.TempDir())
	if err := w.wait(t); err == nil {
		t.Fatal("the worker listened on every interface without authentication")
	}
	out := w.logs.String()
	for _, want := range []string{"without authentication", "--server-config", "--insecure-listen", "127.0.0.1"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}

	w = workerProcess(t, nil, "--listen", open, "--data-dir", t.TempDir(), "--insecure-listen")
	w.waitReady(t)
	if err := w.stop(t); err != nil {
		t.Fatalf("insecure worker exit: %v", err)
	}

	conf := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "port: %d\n", ports[1]), 0o600); err != nil {
		t.Fatal(err)
	}
	w = workerProcess(t, nil, "--server-config", conf, "--data-dir", t.TempDir(), "--listen", fmt.Sprintf("127.0.0.1:%d", ports[0]))
	if err := w.wait(t); err == nil || !strings.Contains(w.logs.String(), "disagree") {
		t.Fatalf("a --listen port other than the file's: %v\n%s", err, w.logs.String())
	}
}
