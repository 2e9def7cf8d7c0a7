package registry_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoNATS keeps the provider layer pure: nothing it links may be NATS.
func TestNoNATS(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "github.com/lanefleet/lanefleet/provider/...").CombinedOutput()
	if err != nil {
		t.Skipf("go list unavailable: %v: %s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.Contains(dep, "nats-io") {
			t.Errorf("provider packages depend on %s", dep)
		}
	}
}
