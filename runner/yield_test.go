package runner

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/tools/sessions"
)

// spawnLog is the session tools' Backend at the fleet's edge: it takes
// spawns and numbers their runs (the fleet's publish onto the child's
// lane).
type spawnLog struct {
	mu     sync.Mutex
	spawns []string
}

func (*spawnLog) List(context.Context, []string, []string, int) ([]sessions.Info, error) {
	return nil, nil
}

func (*spawnLog) History(context.Context, string, sessions.HistoryQuery, func(uint64, []message.Entry) bool) (sessions.HistoryRead, error) {
	return sessions.HistoryRead{}, nil
}

func (*spawnLog) Send(context.Context, string, string, string) (string, error) { return "1", nil }

func (b *spawnLog) Spawn(_ context.Context, key string, _ *events.Inbound, _ string) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.spawns = append(b.spawns, key)
	return strconv.Itoa(len(b.spawns)), nil
}

// TestYieldEndsTheTurn: a reply that calls sessions_yield ends the turn
// once its calls have their results (every call of the reply runs, the
// yield's neighbours too): no further model call, the reply's text is the
// run's, and the stop reason says it yielded. A re-run that replays the
// yield from the step journal ends there too. Before sessions_yield ended
// the turn, the second reply of each script was asked for and answered.
func TestYieldEndsTheTurn(t *testing.T) {
	t.Parallel()
	const never = `{"text":"a second model call: the turn did not end at the yield"}`
	tests := []struct {
		name, script string
		spawns       int
		calls        int // model calls
		stop, text   string
	}{
		{"spawn twice and yield", `{"replies":[{"text":"Two helpers are on it.","toolCalls":[` +
			`{"name":"sessions_spawn","arguments":{"task":"a","label":"a"}},{"name":"sessions_spawn","arguments":{"task":"b"}},{"name":"sessions_yield"}]},` + never + `]}`,
			2, 1, events.StopYielded, "Two helpers are on it."},
		{"a call after the yield in the same reply still runs", `{"replies":[{"toolCalls":[{"name":"sessions_yield"},{"name":"sessions_spawn","arguments":{"task":"late"}}]},` + never + `]}`,
			1, 1, events.StopYielded, ""},
		{"a yield in a later reply of the turn", `{"replies":[{"toolCalls":[{"name":"sessions_spawn","arguments":{"task":"a"}}]},{"text":"Waiting.","toolCalls":[{"name":"sessions_yield"}]},` + never + `]}`,
			1, 2, events.StopYielded, "Waiting."},
		{"no yield: the turn goes on to the model's answer", `{"replies":[{"toolCalls":[{"name":"sessions_spawn","arguments":{"task":"a"}}]},{"text":"Done myself."}]}`,
			1, 2, "stop", "Done myself."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := &spawnLog{}
			set, err := sessions.Tools(b, sessions.Policy{}, "acme:lead", "7", nil)
			if err != nil {
				t.Fatal(err)
			}
			rec := &recorder{}
			r, err := New(Config{DefaultModel: "scripted/script", Resolver: rec, Tools: workspaceTools{set}, Retry: RetryPolicy{MaxRetries: -1}})
			if err != nil {
				t.Fatal(err)
			}
			steps := &memSteps{}
			in := Input{SessionKey: "acme:lead", RunID: "7", Inbound: &events.Inbound{Text: "#script " + tt.script}, Steps: steps}
			out, err := r.Run(t.Context(), in, &sink{})
			if err != nil {
				t.Fatal(err)
			}
			check := func(what string, out *Output, calls, want int) {
				t.Helper()
				res := out.Result
				text := ""
				for _, p := range res.Payloads {
					text += p.Text
				}
				if res.Meta.Error != nil || res.Meta.StopReason != tt.stop || text != tt.text || calls != want {
					t.Fatalf("%s: stop %q, text %q, error %+v after %d model calls; want %q, %q after %d",
						what, res.Meta.StopReason, text, res.Meta.Error, calls, tt.stop, tt.text, want)
				}
				// Every call of every reply has its result: the transcript
				// is whole where the turn stopped.
				calls2, results := 0, 0
				for _, e := range out.Entries {
					if m := e.Message; m != nil {
						calls2 += len(m.ToolCalls())
						if m.Role == message.RoleToolResult {
							results++
						}
					}
				}
				if calls2 != results {
					t.Fatalf("%s: %d tool calls, %d results", what, calls2, results)
				}
			}
			check("the run", out, len(rec.reqs), tt.calls)
			if len(b.spawns) != tt.spawns {
				t.Fatalf("%d spawns, want %d", len(b.spawns), tt.spawns)
			}
			// A re-run after its worker died replays every recorded step
			// and makes no model call the first run did not make.
			rec.reqs = nil
			again, err := r.Run(t.Context(), in, &sink{})
			if err != nil {
				t.Fatal(err)
			}
			want := 0 // the yield's results are journaled: nothing is asked again
			if tt.stop != events.StopYielded {
				want = 1 // a final answer is not journaled: its re-run asks again
			}
			check("the re-run", again, len(rec.reqs), want)
		})
	}
}
