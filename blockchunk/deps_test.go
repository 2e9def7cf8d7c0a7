package blockchunk

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoNATS keeps the package pure: nothing it imports, directly or not,
// may be NATS.
func TestNoNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.Contains(p, "nats-io") || strings.HasSuffix(p, "/lanes") {
			t.Errorf("imports %s", p)
		}
	}
}
