package sanitize

import (
	"os/exec"
	"strings"
	"testing"
)

// TestPureDependencies keeps the sanitiser, its command and the session file
// package free of NATS and of any network code.
func TestPureDependencies(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the go command")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go command not found")
	}
	out, err := exec.CommandContext(t.Context(), gobin, "list", "-deps",
		"github.com/lanefleet/lanefleet/sanitize/...", "github.com/lanefleet/lanefleet/sessionfile").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "nats") || dep == "net/http" || dep == "net" {
			t.Errorf("depends on %s", dep)
		}
	}
}
