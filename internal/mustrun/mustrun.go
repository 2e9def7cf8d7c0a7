// Package mustrun turns the skips of the suites CI must run into failures,
// so that a green CI means they ran: the sandbox's confinement tests (which
// skip where the platform cannot confine a command) and the comparisons
// with JavaScript itself (which skip where node is not installed).
//
// LANEFLEET_REQUIRE lists the suites a run requires, comma-separated:
// "sandbox", "node", or "all". .ci/run sets it; a developer's machine
// leaves it unset and the suites skip as before.
package mustrun

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// Env is the variable that lists the required suites.
const Env = "LANEFLEET_REQUIRE"

// The suites.
const (
	Sandbox = "sandbox" // commands confined by package sandbox
	Node    = "node"    // comparisons with node's JavaScript
)

// Required reports whether LANEFLEET_REQUIRE requires suite.
func Required(suite string) bool {
	list := strings.Split(os.Getenv(Env), ",")
	for i := range list {
		list[i] = strings.TrimSpace(list[i])
	}
	return slices.Contains(list, suite) || slices.Contains(list, "all")
}

// Skip skips t with reason, unless the suite is required: then t fails,
// saying why the suite cannot run here.
func Skip(t testing.TB, suite, reason string) {
	t.Helper()
	if Required(suite) {
		t.Fatalf("%s=%s requires the %s suite, which cannot run here: %s", Env, os.Getenv(Env), suite, reason)
		return
	}
	t.Skip(reason)
}
