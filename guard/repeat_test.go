package guard

import "testing"

func TestRepeats(t *testing.T) {
	t.Parallel()
	type call struct {
		name   string
		args   map[string]any
		failed bool
		err    string
		n      int
		stop   bool
	}
	notFound := "Tool exec not found"
	tests := []struct {
		name  string
		limit int
		calls []call
	}{
		{"the same failure three times stops", 0, []call{
			{"exec", map[string]any{"command": "ls"}, true, notFound, 1, false},
			{"exec", map[string]any{"command": "ls"}, true, notFound, 2, false},
			{"exec", map[string]any{"command": "ls"}, true, notFound, 3, true},
		}},
		{"other calls in between do not reset it", 0, []call{
			{"exec", map[string]any{"command": "ls"}, true, notFound, 1, false},
			{"read", map[string]any{"path": "a"}, false, "", 0, false},
			{"exec", map[string]any{"command": "ls"}, true, notFound, 2, false},
			{"read", map[string]any{"path": "b"}, true, "ENOENT", 1, false},
			{"exec", map[string]any{"command": "ls"}, true, notFound, 3, true},
		}},
		{"other arguments are another call", 0, []call{
			{"exec", map[string]any{"command": "ls"}, true, notFound, 1, false},
			{"exec", map[string]any{"command": "ls -l"}, true, notFound, 1, false},
			{"exec", map[string]any{"command": "ls"}, true, notFound, 2, false},
		}},
		{"another error starts over", 0, []call{
			{"exec", map[string]any{"command": "ls"}, true, notFound, 1, false},
			{"exec", map[string]any{"command": "ls"}, true, notFound, 2, false},
			{"exec", map[string]any{"command": "ls"}, true, "timed out", 1, false},
			{"exec", map[string]any{"command": "ls"}, true, "timed out", 2, false},
		}},
		{"a success starts over", 0, []call{
			{"poll", nil, true, "not ready", 1, false},
			{"poll", nil, true, "not ready", 2, false},
			{"poll", nil, false, "", 0, false},
			{"poll", nil, true, "not ready", 1, false},
		}},
		{"key order does not matter", 2, []call{
			{"f", map[string]any{"a": 1, "b": 2}, true, "x", 1, false},
			{"f", map[string]any{"b": 2, "a": 1}, true, "x", 2, true},
		}},
		{"a limit of one stops at the first", 1, []call{
			{"f", nil, true, "x", 1, true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := NewRepeats(tt.limit)
			for i, c := range tt.calls {
				n, stop := r.Record(c.name, c.args, c.failed, c.err)
				if n != c.n || stop != c.stop {
					t.Fatalf("call %d (%s %v): n=%d stop=%v, want n=%d stop=%v", i, c.name, c.args, n, stop, c.n, c.stop)
				}
			}
		})
	}
	if NewRepeats(-1).Limit() != ToolRepeatsDefault {
		t.Error("a limit below one is the default")
	}
}
