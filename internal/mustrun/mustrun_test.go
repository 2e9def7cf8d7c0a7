package mustrun

import (
	"testing"
)

// recorder is a testing.TB that records a skip or a failure.
type recorder struct {
	testing.TB
	skipped, failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Skip(...any)           { r.skipped = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true }

// TestSkip: a suite skips unless LANEFLEET_REQUIRE names it (or "all").
func TestSkip(t *testing.T) {
	for _, c := range []struct {
		env   string
		suite string
		fails bool
	}{
		{"", Sandbox, false},
		{"node", Sandbox, false},
		{"node, sandbox", Sandbox, true},
		{"all", Node, true},
		{"sandboxes", Sandbox, false},
	} {
		t.Run(c.env+"/"+c.suite, func(t *testing.T) {
			t.Setenv(Env, c.env)
			r := &recorder{TB: t}
			Skip(r, c.suite, "not here")
			if r.failed != c.fails || r.skipped == c.fails {
				t.Errorf("failed %v skipped %v; want failed %v", r.failed, r.skipped, c.fails)
			}
		})
	}
}
