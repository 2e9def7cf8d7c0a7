package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/tools"
)

// TestExecApproval: with exec marked for approval (worker --exec-approval
// ask) a message's exec call ends the run with the call pending; nothing
// runs until the client answers "approve", and a refusal reaches the model
// as the call's result.
func TestExecApproval(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	root := t.TempDir()
	startMember(t, srv.URL, fleet.Config{WorkerID: "w1", WorkspaceRoot: root, Exec: true, ExecUnconfined: execUnconfined(t),
		ToolPolicy: tools.Policy{Approve: []string{"exec"}}})
	c, _ := lanefleet.New(natstest.Connect(t, srv.URL))
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	script := `#script {"replies":[{"toolCalls":[{"id":"x1","name":"exec","arguments":{"command":"touch approved"}}]},{"text":"done"}]}`

	for _, tc := range []struct {
		session, answer string
		runs            bool
	}{{"ops:approve", "approve", true}, {"ops:deny", "deny", false}} {
		res, err := waitResult(t, ctx, c, tc.session, script, lanefleet.WithModel("scripted/script"))
		if err != nil {
			t.Fatal(err)
		}
		p := res.Meta.PendingToolCalls
		if res.Meta.StopReason != "tool_calls" || len(p) != 1 || !p[0].Approval || p[0].Name != "exec" {
			t.Fatalf("%s: first run %+v", tc.session, res.Meta)
		}
		tok, _ := events.KeyToken(tc.session)
		marker := filepath.Join(root, tok, "approved")
		if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: the command ran before the answer", tc.session)
		}
		res, err = waitResult(t, ctx, c, tc.session, "", lanefleet.WithModel("scripted/script"), lanefleet.WithToolResults(events.ToolResult{ToolCallID: "x1", Text: tc.answer}))
		if err != nil || res.Payloads[0].Text != "done" {
			t.Fatalf("%s: second run %+v, %v", tc.session, res, err)
		}
		_, err = os.Stat(marker)
		if ran := err == nil; ran != tc.runs {
			t.Fatalf("%s: the command ran = %v, want %v", tc.session, ran, tc.runs)
		}
	}
}
