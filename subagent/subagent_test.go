package subagent

import (
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/message"
)

func TestChildKey(t *testing.T) {
	t.Parallel()
	cases := []struct {
		parent, target, want string
		depth                int
	}{
		{"acme:a", "", "acme:a:subagent:x", 1},
		{"acme:a:subagent:y", "", "acme:a:subagent:y:subagent:x", 2},
		{"agent:main:chat", "", "agent:main:chat:subagent:x", 1},
		{"agent:main:chat", "main", "agent:main:chat:subagent:x", 1},
		{"agent:main:chat", "ops", "agent:ops:chat:subagent:x", 1},                       // another agent: its key, same rest
		{"agent:main:chat:subagent:y", "ops", "agent:ops:chat:subagent:y:subagent:x", 2}, // depth kept
		{"acme:a", "ops", "", 0},                                                         // no agent in the key: own agent only
		{"acme:" + strings.Repeat("k", events.MaxKeyBytes), "", "", 0},                   // too long
	}
	for _, c := range cases {
		got, err := ChildKey(c.parent, c.target, "x")
		if got != c.want || (err != nil) != (c.want == "") {
			t.Errorf("ChildKey(%q, %q) = %q, %v; want %q", c.parent, c.target, got, err, c.want)
		}
		if c.want != "" && Depth(got) != c.depth {
			t.Errorf("Depth(%q) = %d, want %d", got, Depth(got), c.depth)
		}
	}
	a, again := ID("acme:a", "7.1.c"), ID("acme:a", "7.1.c")
	if a != again || a == ID("acme:b", "7.1.c") || len(a) != 16 {
		t.Error("ID is not stable per (parent, call) or not 16 hex digits")
	}
}

// TestCompletion: a child owes its parent a completion once, when it has
// no child of its own pending; its text says it is a sub-agent's, its id
// depends on the spawn's nonce and the run, and the child's whole use
// rides with it.
func TestCompletion(t *testing.T) {
	t.Parallel()
	parent := &events.Parent{Session: "acme:a", Run: "7", Label: "hunter", Nonce: "n1"}
	use := &events.UsageMeta{Total: 30, Cost: &events.CostMeta{Total: 0.25}}
	ok := &events.Result{Payloads: []events.Payload{{Text: "found it"}, {Text: "in main.go"}}}
	failed := &events.Result{Payloads: []events.Payload{{Text: "boom", IsError: true}}, Meta: events.Meta{Error: &events.RunError{Kind: "poison_message", Message: "boom"}}}
	cases := []struct {
		name string
		st   *events.SessionState
		res  *events.Result
		owed bool
		text string
	}{
		{"no parent", &events.SessionState{}, ok, false, ""},
		{"delivered", &events.SessionState{Parent: &events.Parent{Session: "acme:a", Run: "7", Delivered: true}}, ok, false, ""},
		{"children pending", &events.SessionState{Parent: parent, Children: []events.Child{{Session: "c"}}}, ok, false, ""},
		{"no result (no-op turn)", &events.SessionState{Parent: parent}, nil, false, ""},
		{"reply", &events.SessionState{Parent: parent, Usage: use}, ok, true, "completed. Use it for your task; answer the user in your own words.]\n\nfound it\n\nin main.go"},
		{"error", &events.SessionState{Parent: parent}, failed, true, "failed. Use it"},
		{"empty reply", &events.SessionState{Parent: parent}, &events.Result{}, true, "(It ended without a reply.)"},
	}
	for _, c := range cases {
		to, id, in, owed := Completion(testKey, "acme:a:subagent:x", "3", c.st, c.res, false)
		if owed != c.owed {
			t.Errorf("%s: owed %v", c.name, owed)
			continue
		}
		if !owed {
			continue
		}
		if to != "acme:a" || id != MsgID(testKey, "n1", "acme:a:subagent:x", "3") || in.ID != id || in.Mode != "followup" || in.Subagent == nil ||
			!strings.HasPrefix(in.Text, "[Sub-agent result: this is not the user speaking. Your sub-agent \"hunter\" (session acme:a:subagent:x, run 3) ") ||
			!strings.Contains(in.Text, c.text) {
			t.Errorf("%s: %q %q %+v", c.name, to, id, in)
		}
		if err := in.Validate(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		if !CompletionSealed(testKey, "acme:a", in) {
			t.Errorf("%s: the completion is not sealed for its parent", c.name)
		}
		if c.st.Usage != nil && in.Subagent.Usage != use {
			t.Errorf("%s: usage %+v", c.name, in.Subagent.Usage)
		}
	}
	if MsgID(testKey, "n1", "c", "3") == MsgID(testKey, "n2", "c", "3") || MsgID(testKey, "n1", "c", "3") == MsgID(testKey, "n1", "c", "4") ||
		MsgID(testKey, "n1", "c", "3") == MsgID([]byte("another fleet's key"), "n1", "c", "3") {
		t.Error("the id does not depend on the key, the nonce and the run")
	}
	long := Text(&events.SubagentResult{Session: "c", Run: "1"}, strings.Repeat("é", MaxResultBytes))
	if len(long) > MaxResultBytes+300 || !strings.HasSuffix(long, "é […cut]") {
		t.Errorf("a long reply is not cut on a rune: %d bytes", len(long))
	}
}

// TestState: a spawned child is pending until its completion is received
// once; the child's use rolls up then, and a second completion changes
// nothing.
func TestState(t *testing.T) {
	t.Parallel()
	var st events.SessionState
	if !Adopt(&st, &events.Inbound{Parent: &events.Parent{Session: "p", Run: "1", Delivered: true}}) || st.Parent.Delivered {
		t.Fatalf("adopt: %+v", st.Parent)
	}
	if Adopt(&st, &events.Inbound{Parent: &events.Parent{Session: "q", Run: "2"}}) || st.Parent.Session != "p" {
		t.Fatal("a second spawn message replaced the parent")
	}
	Add(&st, []events.Child{{Session: "c1"}, {Session: "c2"}})
	Add(&st, []events.Child{{Session: "c1"}})
	if len(st.Children) != 2 || !Pending(&st, "c1") || Pending(&st, "c3") {
		t.Fatalf("children %+v", st.Children)
	}
	u := &events.UsageMeta{Total: 10}
	if !Received(&st, &events.SubagentResult{Session: "c1", Usage: u}) || Received(&st, &events.SubagentResult{Session: "c1", Usage: u}) {
		t.Fatal("a completion was received twice, or not once")
	}
	Received(&st, &events.SubagentResult{Session: "c2", Usage: u})
	if st.Children != nil || st.ChildUsage.Total != 20 || st.Usage.Total != 20 {
		t.Fatalf("after both: %+v %+v %+v", st.Children, st.ChildUsage, st.Usage)
	}
}

// TestSpawned: the children a turn's entries started are its accepted
// sessions_spawn results; failed calls and other tools' are not.
func TestSpawned(t *testing.T) {
	t.Parallel()
	res := func(name string, isErr bool, d any) message.Entry {
		return message.Entry{Type: "message", Message: &message.Message{Role: message.RoleToolResult, ToolName: name, IsError: isErr, Details: d}}
	}
	ok := map[string]any{"status": "accepted", "childSessionKey": "acme:a:subagent:x", "runId": "4", "label": "l"}
	entries := []message.Entry{
		res(ToolSpawn, false, ok),
		res(ToolSpawn, true, ok),
		res("sessions_send", false, ok),
		res(ToolSpawn, false, map[string]any{"status": "accepted", "childSessionKey": "", "runId": "5"}),
		res(ToolSpawn, false, "not a map"),
	}
	got := Spawned(entries, "7", 99)
	if len(got) != 1 || got[0] != (events.Child{Session: "acme:a:subagent:x", Run: "4", ParentRun: "7", Label: "l", Spawned: 99}) {
		t.Errorf("%+v", got)
	}
}

// TestStopPassesOn: a stop marks every pending child stopped once (a
// second stop marks nothing new) without touching the state it copied
// from; a completion of a marked child is recognised, one of another is
// not; a stopped child's completion says it was stopped, sealed as any.
func TestStopPassesOn(t *testing.T) {
	t.Parallel()
	orig := []events.Child{{Session: "acme:a:subagent:x", Label: "x"}, {Session: "acme:a:subagent:y"}}
	st := &events.SessionState{Children: orig}
	if got := Stop(st); len(got) != 2 || !st.Children[0].Stopped || !st.Children[1].Stopped || orig[0].Stopped {
		t.Fatalf("stop marked %+v; state %+v; the copied-from children %+v", got, st.Children, orig)
	}
	if got := Stop(st); got != nil {
		t.Fatalf("a second stop marked %+v", got)
	}
	if c, ok := StoppedChild(st, &events.Inbound{Subagent: &events.SubagentResult{Session: "acme:a:subagent:x"}}); !ok || c.Label != "x" {
		t.Fatal("a stopped child's completion is not recognised")
	}
	if _, ok := StoppedChild(st, &events.Inbound{Subagent: &events.SubagentResult{Session: "acme:a:subagent:z"}}); ok {
		t.Fatal("a completion of a child not pending is taken for a stopped one's")
	}
	if _, ok := StoppedChild(&events.SessionState{Children: orig}, &events.Inbound{Subagent: &events.SubagentResult{Session: "acme:a:subagent:x"}}); ok {
		t.Fatal("a child not stopped is taken for a stopped one")
	}
	child := &events.SessionState{Parent: &events.Parent{Session: "acme:a", Run: "7", Label: "x", Nonce: "n"}}
	res := &events.Result{Payloads: []events.Payload{{Text: "Interrupted.", IsError: true}},
		Meta: events.Meta{Error: &events.RunError{Kind: events.KindInterrupted, Message: "stopped"}}}
	_, _, in, ok := Completion(testKey, "acme:a:subagent:x", "3", child, res, true)
	if !ok || in.Subagent.Status != events.SubagentStopped || !strings.Contains(in.Text, `Your sub-agent "x" (session acme:a:subagent:x, run 3) was stopped.`) ||
		!CompletionSealed(testKey, "acme:a", in) || in.Validate() != nil {
		t.Fatalf("a stopped child's completion: %+v %+v (valid: %v)", in, in.Subagent, in.Validate())
	}
	id := StopID(testKey, "acme:a", "9", "acme:a:subagent:x")
	for _, other := range []string{StopID(testKey, "acme:a", "9", "acme:a:subagent:y"), StopID(testKey, "acme:a", "10", "acme:a:subagent:x"),
		StopID([]byte("another fleet's key"), "acme:a", "9", "acme:a:subagent:x")} {
		if other == id {
			t.Fatal("stop ids are not one per fleet, stop and child")
		}
	}
	if again := StopID(testKey, "acme:a", "9", "acme:a:subagent:x"); again != id {
		t.Fatal("a stop's id changes between publishes")
	}
}
