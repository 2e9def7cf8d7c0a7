package runner

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/agentprompt"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/tools"
)

// contextWorkspace is a run's workspace whose context files (HEARTBEAT.md
// among them) go into the system prompt, as the fleet's tool source puts
// them.
type contextWorkspace struct{ dir string }

func (w contextWorkspace) Tools(context.Context, Input) (tools.Set, error) { return tools.List{}, nil }

func (w contextWorkspace) SystemPrompt(context.Context, Input, tools.Set, []provider.Tool) string {
	files, _ := agentprompt.LoadContextFiles(w.dir, agentprompt.ContextOptions{})
	return agentprompt.Build(agentprompt.Input{Workspace: w.dir, ContextFiles: files})
}

// TestHeartbeatReadsHeartbeatMD: a heartbeat that carries no text runs on
// the default heartbeat prompt, with the workspace's HEARTBEAT.md in the
// model's context; the model's HEARTBEAT_OK is suppressed: the final
// carries no reply and is marked heartbeatOk, and nothing is added to the
// transcript (the turn's usage still counts).
func TestHeartbeatReadsHeartbeatMD(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const task = "Check the deploy queue; report failed deploys."
	if err := os.WriteFile(filepath.Join(dir, agentprompt.HeartbeatFile), []byte(task+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	model := &keyed{fn: func(*provider.Request) (string, error) { return "HEARTBEAT_OK", nil }}
	r, err := New(Config{DefaultModel: "acme/m", Resolver: multiResolver{acme: model, window: 200000}, Tools: contextWorkspace{dir}})
	if err != nil {
		t.Fatal(err)
	}
	if err := (&events.Inbound{Heartbeat: true}).Validate(); err != nil {
		t.Fatalf("a heartbeat without text is refused: %v", err)
	}
	out, err := r.Run(t.Context(), Input{RunID: "hb", Inbound: &events.Inbound{Heartbeat: true}}, &sink{})
	if err != nil {
		t.Fatal(err)
	}
	if len(model.calls) != 1 {
		t.Fatalf("%d model calls", len(model.calls))
	}
	req := model.calls[0]
	if !strings.Contains(req.SystemPrompt, task) {
		t.Fatalf("HEARTBEAT.md is not in the system prompt:\n%s", req.SystemPrompt)
	}
	if n := len(req.Messages); n == 0 || req.Messages[n-1].Content.Text() != agentprompt.HeartbeatPrompt {
		t.Fatalf("the prompt is not the heartbeat prompt: %+v", req.Messages)
	}
	if res := out.Result; !res.Meta.HeartbeatOK || len(res.Payloads) != 0 || res.Meta.Error != nil {
		t.Fatalf("result %+v", res)
	}
	if len(out.Entries) != 0 {
		t.Fatalf("the transcript grows by %d entries", len(out.Entries))
	}
	if out.Usage.TotalTokens == 0 {
		t.Fatal("the heartbeat's usage is not counted")
	}
}

// TestHeartbeatAck: a heartbeat's reply that is only the token (with at
// most 300 characters besides, at its start or end) is suppressed and
// pruned; any other reply, and the token answering a message that is not
// a heartbeat, is delivered and kept as usual.
func TestHeartbeatAck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		heartbeat  bool
		reply      string
		suppressed bool
	}{
		{"the token", true, "HEARTBEAT_OK", true},
		{"the token in markup", true, "**HEARTBEAT_OK**", true},
		{"the token then a short note", true, "HEARTBEAT_OK — all quiet.", true},
		{"a short note then the token", true, "Nothing new. HEARTBEAT_OK", true},
		{"real text", true, "The deploy of api failed at 08:12.", false},
		{"the token inside text", true, "Deploy failed, so no HEARTBEAT_OK today.", false},
		{"the token with a long report", true, "HEARTBEAT_OK " + strings.Repeat("x", 301), false},
		{"not a heartbeat", false, "HEARTBEAT_OK", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			script, _ := json.Marshal(map[string]any{"replies": []map[string]string{{"text": tt.reply}}})
			in := &events.Inbound{Text: "#script " + string(script), Heartbeat: tt.heartbeat}
			out, err := newRunner(t, "scripted/script").Run(t.Context(), Input{RunID: "r", Inbound: in}, &sink{})
			if err != nil {
				t.Fatal(err)
			}
			res := out.Result
			if res.Meta.Error != nil {
				t.Fatalf("error %+v", res.Meta.Error)
			}
			if tt.suppressed {
				if !res.Meta.HeartbeatOK || len(res.Payloads) != 0 || len(out.Entries) != 0 {
					t.Fatalf("not suppressed: heartbeatOk %v, payloads %+v, %d entries", res.Meta.HeartbeatOK, res.Payloads, len(out.Entries))
				}
				return
			}
			if res.Meta.HeartbeatOK || len(res.Payloads) != 1 || res.Payloads[0].Text != tt.reply || len(out.Entries) != 2 {
				t.Fatalf("not delivered: heartbeatOk %v, payloads %+v, %d entries", res.Meta.HeartbeatOK, res.Payloads, len(out.Entries))
			}
		})
	}
}
