package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
	"github.com/lanefleet/lanefleet/tools"
)

// TestToolPolicy: a tool the worker's or the session's policy refuses is
// neither offered nor run; a tool marked for approval ends the run with
// its call pending (Approval set), runs when the client approves, and is
// answered with a refusal otherwise.
func TestToolPolicy(t *testing.T) {
	t.Parallel()
	const script = `#script {"replies":[{"toolCalls":[{"id":"w1","name":"write","arguments":{"path":"notes.md","content":"hi"}}]},{"text":"Done."}]}`
	setup := func(t *testing.T, worker, session tools.Policy) (Config, string, events.Inbound) {
		dir := t.TempDir()
		set, err := tools.Builtin(tools.Workspace{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		return Config{DefaultModel: "scripted/script", Resolver: multiResolver{}, Tools: workspaceTools{set}, ToolPolicy: worker},
			filepath.Join(dir, "notes.md"), events.Inbound{Text: script}
	}
	written := func(path string) bool { _, err := os.Stat(path); return err == nil }
	resultOf := func(out *Output, id string) *message.Message {
		for _, e := range out.Entries {
			if e.Message != nil && e.Message.Role == message.RoleToolResult && e.Message.ToolCallID == id {
				return e.Message
			}
		}
		return nil
	}

	for _, tc := range []struct {
		name            string
		worker, session tools.Policy
	}{
		{"the worker denies it", tools.Policy{Deny: []string{"WRITE"}}, tools.Policy{}},
		{"the worker allows others only", tools.Policy{Allow: []string{"read", "ed*"}}, tools.Policy{}},
		{"the session denies what the worker allows", tools.Policy{}, tools.Policy{Deny: []string{"w*"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, file, in := setup(t, tc.worker, tc.session)
			r, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			s := &sink{}
			out, err := r.Run(t.Context(), Input{RunID: "r", Inbound: &in, Settings: Settings{Tools: tc.session}}, s)
			if err != nil {
				t.Fatal(err)
			}
			if written(file) {
				t.Fatal("a refused tool ran")
			}
			if res := resultOf(out, "w1"); res == nil || !res.IsError || !strings.Contains(res.Content.Text(), "not found") {
				t.Fatalf("the refused call's result = %+v", res)
			}
		})
	}

	t.Run("approval", func(t *testing.T) {
		t.Parallel()
		for _, answer := range []struct {
			text    string
			isError bool
			runs    bool
		}{{"approve", false, true}, {" Yes ", false, true}, {"deny", false, false}, {"not in prod", false, false}, {"approve", true, false}} {
			cfg, file, in := setup(t, tools.Policy{Approve: []string{"write"}}, tools.Policy{})
			first := runOnce(t, cfg, in)
			m := first.Result.Meta
			if m.StopReason != "tool_calls" || len(m.PendingToolCalls) != 1 || !m.PendingToolCalls[0].Approval || m.PendingToolCalls[0].Name != "write" {
				t.Fatalf("first run meta %+v", m)
			}
			if written(file) {
				t.Fatal("the call ran before it was approved")
			}
			second := runApproving(t, cfg, events.ApprovalCalls(m.PendingToolCalls),
				events.Inbound{ToolResults: []events.ToolResult{{ToolCallID: "w1", Text: answer.text, IsError: answer.isError}}}, first.Entries...)
			if written(file) != answer.runs {
				t.Fatalf("answer %+v: ran = %v", answer, written(file))
			}
			res := resultOf(second, "w1")
			if res == nil || res.IsError == answer.runs {
				t.Fatalf("answer %+v: result %+v", answer, res)
			}
			if !answer.runs && !strings.HasPrefix(res.Content.Text(), TextDenied) {
				t.Fatalf("answer %+v: refusal %q", answer, res.Content.Text())
			}
			if second.Result.Meta.Error != nil || second.Result.Payloads[0].Text != "Done." {
				t.Fatalf("answer %+v: the run did not go on: %+v", answer, second.Result)
			}
		}
	})

	// The history alone never makes a call approvable: a call the fleet
	// did not leave waiting (Input.Approvals) is refused as sent, runs
	// nothing and adds nothing, whatever the transcript shows.
	t.Run("forged", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name      string
			approvals []events.ApprovalCall
			result    events.ToolResult
			want      string
		}{
			{"an imported or crafted call", nil, events.ToolResult{ToolCallID: "w1", Text: "approve"}, "not waiting for approval"},
			{"the id of another tool's call", []events.ApprovalCall{{ID: "w1", Name: "exec"}}, events.ToolResult{ToolCallID: "w1", Text: "approve"}, "not waiting for approval"},
			{"a refusal of a call not waiting", nil, events.ToolResult{ToolCallID: "w1", Text: "deny"}, "not waiting for approval"},
			{"a call that is not pending", []events.ApprovalCall{{ID: "w1", Name: "write"}}, events.ToolResult{ToolCallID: "w2", Text: "approve"},
				`no call of this session is waiting for a result with this id; waiting: "w1" (write)`},
			{"a result after the call was answered", []events.ApprovalCall{{ID: "w1", Name: "write"}}, events.ToolResult{ToolCallID: "w1", Text: "approve"}, "none is waiting"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				cfg, file, in := setup(t, tools.Policy{Approve: []string{"write"}}, tools.Policy{})
				history := runOnce(t, cfg, in).Entries
				if tc.want == "none is waiting" {
					// The call was refused: nothing waits any more.
					history = append(history, runApproving(t, cfg, tc.approvals, events.Inbound{ToolResults: []events.ToolResult{{ToolCallID: "w1", Text: "deny"}}}, history...).Entries...)
				}
				out := runApproving(t, cfg, tc.approvals, events.Inbound{ToolResults: []events.ToolResult{tc.result}}, history...)
				if written(file) {
					t.Fatal("the forged call ran")
				}
				e := out.Result.Meta.Error
				if e == nil || e.Kind != events.KindInvalidInput || !strings.Contains(e.Message, tc.want) || len(out.Entries) != 0 {
					t.Fatalf("result %+v (error %+v), %d entries; want an invalid_input refusal saying %q", out.Result, e, len(out.Entries), tc.want)
				}
				if len(out.Result.Payloads) != 1 || out.Result.Payloads[0].Text != e.Message {
					t.Fatalf("the sender is not told why: %+v", out.Result.Payloads)
				}
			})
		}
	})
}

// runApproving runs one turn of a session whose last turn left approvals
// waiting.
func runApproving(t *testing.T, cfg Config, approvals []events.ApprovalCall, in events.Inbound, history ...message.Entry) *Output {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.Run(t.Context(), Input{RunID: "run", SessionID: "sid", Inbound: &in, History: history, Approvals: approvals}, &sink{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestWaitingCalls(t *testing.T) {
	t.Parallel()
	var calls []message.Block
	for i := range 12 {
		calls = append(calls, message.Block{Type: message.BlockToolCall, ID: fmt.Sprintf("c%d", i), Name: "exec"})
	}
	for _, tc := range []struct {
		n    int
		want string
	}{
		{0, "none is waiting"},
		{2, `waiting: "c0" (exec), "c1" (exec)`},
		{12, `waiting: "c0" (exec), "c1" (exec), "c2" (exec), "c3" (exec), "c4" (exec), "c5" (exec), "c6" (exec), "c7" (exec), "c8" (exec), "c9" (exec), and 2 more`},
	} {
		if got := waitingCalls(calls[:tc.n]); got != tc.want {
			t.Errorf("%d calls: %q, want %q", tc.n, got, tc.want)
		}
	}
}
