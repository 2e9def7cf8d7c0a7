package lanes

import (
	"github.com/lanefleet/lanefleet/chatcmd"
	"github.com/lanefleet/lanefleet/events"
)

// chatCommand reads a decoded message as a chat command when the worker
// answers them (on): it returns what the lane acts on and the command
// (nil = the message is none). /stop becomes a stop command and a
// command that stores settings (/queue collect, /model p/m, …) a
// settings message, so each takes the path those messages take (a stop
// cuts the running turn on arrival; settings are stored fenced, exactly
// between the messages before and after them, and applied behind a cut
// turn); any other command stays as it is and reaches the handler as
// Turn.Command. Messages that carry tool results, heartbeats, and
// settings or stop messages are never commands. in is not modified.
func chatCommand(in *events.Inbound, on bool) (*events.Inbound, *chatcmd.Command) {
	if !on || in.Stop || in.IsSettings() || in.Heartbeat || len(in.ToolResults) > 0 {
		return in, nil
	}
	c, ok := chatcmd.Parse(in.Text)
	if !ok {
		return in, nil
	}
	switch {
	case c.Name == chatcmd.Stop:
		return &events.Inbound{V: in.V, ID: in.ID, Session: in.Session, Sent: in.Sent, Stop: true}, &c
	case c.IsChange():
		return &events.Inbound{V: in.V, ID: in.ID, Session: in.Session, Sent: in.Sent, QueueSettings: c.Queue, RunSettings: c.Run}, &c
	}
	return in, &c
}
