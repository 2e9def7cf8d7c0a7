package sanitize

import (
	"testing"

	"github.com/lanefleet/lanefleet/internal/deptest"
)

// TestPureDependencies keeps the sanitiser, its command and the session file
// package free of NATS and of any network code.
func TestPureDependencies(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the go command")
	}
	deptest.PackagesNoImports(t,
		[]string{"github.com/lanefleet/lanefleet/sanitize/...", "github.com/lanefleet/lanefleet/sessionfile"},
		deptest.Contains("nats"), deptest.Exact("net/http"), deptest.Exact("net"))
}
