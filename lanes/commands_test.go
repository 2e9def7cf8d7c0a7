package lanes

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/queue"
)

// TestChatCommandKinds: what the planner makes of a message whose text is
// a chat command, with commands on and off.
func TestChatCommandKinds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   events.Inbound
		off  bool
		kind queue.Kind
		mode queue.Mode
		cmd  bool
	}{
		{name: "stop is a stop command", in: events.Inbound{Text: "/stop", Mode: "collect"}, kind: queue.KindStop, cmd: true},
		{name: "a settings command is a settings message", in: events.Inbound{Text: "/queue steer"}, kind: queue.KindSettings, cmd: true},
		{name: "a refused settings command reaches the handler", in: events.Inbound{Text: "/think hard"}, kind: queue.KindPrompt, mode: queue.ModeFollowup, cmd: true},
		{name: "a handler command runs as a follow-up whatever its mode", in: events.Inbound{Text: "/status", Mode: "interrupt"}, kind: queue.KindPrompt, mode: queue.ModeFollowup, cmd: true},
		{name: "new with text", in: events.Inbound{Text: "/new hi", Mode: "steer"}, kind: queue.KindPrompt, mode: queue.ModeFollowup, cmd: true},
		{name: "an unknown command is a prompt", in: events.Inbound{Text: "/foo", Mode: "steer"}, kind: queue.KindPrompt, mode: queue.ModeSteer},
		{name: "commands off", in: events.Inbound{Text: "/stop"}, off: true, kind: queue.KindPrompt, mode: queue.ModeFollowup},
		{name: "a heartbeat is never a command", in: events.Inbound{Text: "/status", Heartbeat: true}, kind: queue.KindPrompt, mode: queue.ModeFollowup},
		{name: "tool results are never a command", in: events.Inbound{Text: "/stop", ToolResults: []events.ToolResult{{ToolCallID: "c1"}}}, kind: queue.KindPrompt, mode: queue.ModeFollowup},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			orig := tc.in
			in, cmd := chatCommand(&tc.in, !tc.off)
			if (cmd != nil) != tc.cmd {
				t.Fatalf("command = %v, want one: %v", cmd, tc.cmd)
			}
			if tc.in.Text != orig.Text || tc.in.Stop != orig.Stop {
				t.Fatal("chatCommand modified the message")
			}
			m := msgOf(&jetstream.RawStreamMsg{Sequence: 1}, in, cmd, "", time.Now())
			if m.Kind != tc.kind || m.Mode != tc.mode {
				t.Fatalf("kind %v mode %q, want %v %q", m.Kind, m.Mode, tc.kind, tc.mode)
			}
		})
	}
}
