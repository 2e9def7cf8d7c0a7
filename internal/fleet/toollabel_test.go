package fleet

import "testing"

// TestToolLabel: a tool allowed by a --remote-tools glob is counted under
// the glob, so an MCP server's tools add one label, not one per tool.
func TestToolLabel(t *testing.T) {
	t.Parallel()
	o := newObserver(Config{RemoteTools: []string{"weather", "github__*"}}, nil)
	for name, want := range map[string]string{
		"read":                 "read",
		"weather":              "weather",
		"github__search_issue": "github__*",
		"gitlab__search":       "unknown",
	} {
		if got := o.toolLabel(name); got != want {
			t.Errorf("toolLabel(%q) = %q, want %q", name, got, want)
		}
	}
}
