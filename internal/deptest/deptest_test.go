package deptest

import (
	"fmt"
	"strings"
	"testing"
)

func TestRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		rule Rule
		path string
		want bool
	}{
		// Contains matches anywhere in the path.
		{Contains("nats-io"), "github.com/nats-io/nats.go", true},
		{Contains("nats-io"), "github.com/lanefleet/lanefleet/guard", false},
		// Prefix matches string prefixes, including longer last elements.
		{Prefix("example.com/m/lanes"), "example.com/m/lanes", true},
		{Prefix("example.com/m/lanes"), "example.com/m/lanes/queue", true},
		{Prefix("example.com/m/lanes"), "example.com/m/lanesx", true},
		{Prefix("example.com/m/lanes"), "example.com/m/kvstore", false},
		// Suffix "/lanes" is the lanes package only, not its subpackages.
		{Suffix("/lanes"), "example.com/m/lanes", true},
		{Suffix("/lanes"), "example.com/m/lanes/queue", false},
		// Except lets through what an allowed rule matches.
		{Prefix("example.com/m/").Except(Exact("example.com/m/leaf")), "example.com/m/leaf", false},
		{Prefix("example.com/m/").Except(Exact("example.com/m/leaf")), "example.com/m/lanes", true},
		// Exact matches the whole path only.
		{Exact("net"), "net", true},
		{Exact("net"), "net/http", false},
	}
	for _, tt := range tests {
		if got := tt.rule.match(tt.path); got != tt.want {
			t.Errorf("%s on %q = %v, want %v", tt.rule, tt.path, got, tt.want)
		}
	}
}

func TestChain(t *testing.T) {
	t.Parallel()
	pkgs := []pkg{
		{ImportPath: "x", Imports: []string{"y"}, DepOnly: true},
		{ImportPath: "y", DepOnly: true},
		{ImportPath: "b", Imports: []string{"x"}, DepOnly: true},
		{ImportPath: "a", Imports: []string{"b", "x"}},
	}
	tests := []struct{ target, want string }{
		// A root is its own chain.
		{"a", "a"},
		// The shortest chain is reported (a -> x, not a -> b -> x).
		{"x", "a -> x"},
		{"y", "a -> x -> y"},
		// An unreachable path is reported alone.
		{"z", "z"},
	}
	for _, tt := range tests {
		if got := chain(pkgs, tt.target); got != tt.want {
			t.Errorf("chain(%q) = %q, want %q", tt.target, got, tt.want)
		}
	}
}

// recorder is a testing.TB that records errors instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestNoImports(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go list")
	}
	// The package itself: no NATS.
	NoImports(t, Contains("nats-io"))

	// A forbidden dependency is reported with its import chain.
	r := &recorder{TB: t}
	NoImports(r, Exact("encoding/json"), Contains("nats-io"))
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "github.com/lanefleet/lanefleet/internal/deptest -> encoding/json") {
		t.Errorf("errors = %q, want one for encoding/json with its chain", r.errs)
	}
}
