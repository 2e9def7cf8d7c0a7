package integration

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	lanefleet "github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/message"
)

// TestMessageIDsAreTheSessions: a sender (bob) who knows another session's
// next message id stores it first on his own lane, as Nats-Msg-Id and as
// Lanefleet-Msg-Id; alice's message with that id is still stored on her
// lane and runs, exactly once, and a resend of it (a client that did not
// learn the outcome) runs nothing: its run points at the first, whose
// result Wait returns. (Before, JetStream's stream-wide de-duplication
// took alice's message for bob's, and it vanished.)
func TestMessageIDsAreTheSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	a := newAuthFleet(t, roleUsers(), "")
	_, v := a.start(t)
	startMember(t, a.url(), fleet.Config{WorkerID: "w1", User: "worker", Password: a.passwords["worker"]})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	bob := a.connectAs(t, "bob")
	m := nats.NewMsg(events.InboundPrefix + "bob")
	m.Data = []byte(`{"text":"mine first"}`)
	m.Header.Set(events.HeaderContentType, events.ContentJSON)
	m.Header.Set(events.HeaderMsgID, "alice-42")
	m.Header.Set(events.HeaderLaneMsgID, "alice-42")
	if _, err := bob.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}

	alice, err := lanefleet.New(a.connectAs(t, "alice").nc)
	if err != nil {
		t.Fatal(err)
	}
	run, err := alice.Send(ctx, "alice", "hello", lanefleet.WithMessageID("alice-42"))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := run.Wait(ctx); err != nil || res.Payloads[0].Text != "echo: hello" {
		t.Fatalf("alice's run %s: %+v, %v", run.ID, res, err)
	}
	again, err := alice.Send(ctx, "alice", "hello", lanefleet.WithMessageID("alice-42"))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := again.Wait(ctx); err != nil || res.Payloads[0].Text != "echo: hello" || again.ID == run.ID {
		t.Fatalf("the resend's run %s: %+v, %v", again.ID, res, err)
	}
	entries, err := alice.History(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	var prompts int
	for _, e := range entries {
		if e.Message != nil && e.Message.Role == message.RoleUser {
			prompts++
		}
	}
	if prompts != 1 {
		t.Fatalf("alice's transcript holds %d prompts, want her message once", prompts)
	}
	if got := v.list(); len(got) != 0 {
		t.Fatalf("permission violations: %q", got)
	}
}
