package integration

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/fleet"
	"github.com/lanefleet/lanefleet/permission"
	"github.com/lanefleet/lanefleet/provider"
	"github.com/lanefleet/lanefleet/schedule"
	"github.com/lanefleet/lanefleet/tools"
	"github.com/lanefleet/lanefleet/tools/remote"
)

// forecastTool reports progress twice before it answers, so its server
// answers one call with several messages.
type forecastTool struct{}

func (forecastTool) Spec() provider.Tool {
	return provider.Tool{Name: "forecast", Description: "Tomorrow's weather", Parameters: map[string]any{"type": "object"}}
}

func (forecastTool) Call(_ context.Context, c tools.Call) (tools.Result, error) {
	if c.Update != nil {
		c.Update(tools.TextResult("looking at the sky"))
		c.Update(tools.TextResult("asking the clouds"))
	}
	return tools.TextResult("sunny"), nil
}

// roleUsers is one user per role.
func roleUsers() []permission.User {
	return []permission.User{
		{Grant: permission.Grant{Role: permission.Worker, User: "worker"}},
		{Grant: permission.Grant{Role: permission.Sender, User: "alice", Sessions: []string{"alice", "agent:main:alice"}}},
		{Grant: permission.Grant{Role: permission.Sender, User: "bob", Sessions: []string{"bob"}}},
		{Grant: permission.Grant{Role: permission.Viewer, User: "auditor", Sessions: []string{"agent:main:alice"}}},
		{Grant: permission.Grant{Role: permission.ToolServer, User: "tools", Tools: []string{"forecast"}}},
		{Grant: permission.Grant{Role: permission.Admin, User: "root"}},
	}
}

// TestRolesRunATurn: the permissions `worker permissions` prints load in
// nats-server and are enough for each role's work: a worker under the
// worker role runs a turn that calls a tool served under the tool-server
// role (which answers with partial results and a reply), a sender follows
// the run live, a viewer reads it, an admin reads the buckets, and the
// server logs no permission violation on the way.
func TestRolesRunATurn(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	a := newAuthFleet(t, roleUsers(), "")
	_, v := a.start(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("permission violations: %q", v.list())
		}
	})

	toolServer := a.connectAs(t, "tools")
	svc, err := remote.Serve(toolServer.nc, remote.ServiceConfig{}, forecastTool{})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	startMember(t, a.url(), fleet.Config{WorkerID: "w1", User: "worker", Password: a.passwords["worker"], NoBuiltinTools: true,
		RemoteTools: []string{"forecast"}})

	alice, auditor := a.connectAs(t, "alice"), a.connectAs(t, "auditor")
	session := "agent:main:alice"
	live, view := subscribeEvents(t, alice, session), subscribeEvents(t, auditor, session)
	script := `#script {"replies":[{"toolCalls":[{"id":"f1","name":"forecast","arguments":{}}]},{"text":"Sunny it is."}]}`
	run := sendRaw(t, alice, session, events.Inbound{Text: script, Model: "scripted/script"})

	evs := live.run(t, run)
	var updates int
	var result string
	for _, ev := range evs {
		if ev.Stream == events.StreamTool && ev.Data.Phase == events.PhaseUpdate {
			updates++
		}
		if ev.Stream == events.StreamTool && ev.Data.Phase == events.PhaseResult {
			b, _ := json.Marshal(ev.Data.Payload)
			result = string(b)
		}
	}
	final := evs[len(evs)-1]
	if final.Data.Result == nil || len(final.Data.Result.Payloads) == 0 || final.Data.Result.Payloads[0].Text != "Sunny it is." {
		t.Fatalf("final event %+v", final.Data)
	}
	if !strings.Contains(result, "sunny") || updates == 0 {
		t.Fatalf("tool result %s after %d updates", result, updates)
	}
	if got := view.run(t, run); len(got) != len(evs) {
		t.Fatalf("the viewer saw %d events, the sender %d", len(got), len(evs))
	}

	// A turn long enough for the owner's heartbeats (lease renewals and
	// the trigger's InProgress, every third of the 5 s lease), then one
	// interrupted by the next message, then a message that is
	// dead-lettered.
	slow := `#script {"replies":[{"text":"slow and steady","chunks":8,"delayMs":600}]}`
	run = sendRaw(t, alice, session, events.Inbound{Text: slow, Model: "scripted/script"})
	if evs := live.run(t, run); evs[len(evs)-1].Data.Result.Payloads[0].Text != "slow and steady" {
		t.Fatalf("slow turn: %+v", evs[len(evs)-1].Data)
	}
	cut := sendRaw(t, alice, session, events.Inbound{Text: slow, Model: "scripted/script"})
	for streaming := false; !streaming; { // the cut turn is streaming its reply
		m := <-live.ch
		if strings.HasSuffix(m.Subject, ".fence") { // the owner's claim on the run, not an event
			continue
		}
		ev, err := events.DecodeEvent(m.Header.Get(events.HeaderContentType), m.Data)
		if err != nil || m.Subject != live.prefix+cut {
			t.Fatalf("event on %s: %v", m.Subject, err)
		}
		streaming = ev.Stream == events.StreamAssistant
	}
	next := sendRaw(t, alice, session, events.Inbound{Text: "stop that", Mode: "interrupt"})
	cutEvs := live.run(t, cut)
	if e := cutEvs[len(cutEvs)-1]; e.Data.Result == nil || e.Data.Result.Meta.Error == nil || e.Data.Result.Meta.Error.Kind != events.KindInterrupted {
		t.Fatalf("interrupted turn ended with %+v", e.Data.Result.Meta)
	}
	live.run(t, next)
	bad := sendRaw(t, alice, session, events.Inbound{Text: "x", Mode: "no-such-mode"})
	live.run(t, bad)

	root := a.connectAs(t, "root")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for _, bucket := range []string{permission.LanesBucket, permission.AuthBucket, permission.RunsBucket} {
		if _, err := root.js.KeyValue(ctx, bucket); err != nil {
			t.Errorf("admin: bucket %s: %v", bucket, err)
		}
	}
	dlq, err := root.js.Stream(ctx, events.DeadStream)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := dlq.Info(ctx); err != nil || info.State.Msgs != 1 {
		t.Fatalf("dead letters: %v, %v", info, err)
	}
	// Schedules: the admin adds one, the worker role fires it.
	admin, err := lanefleet.New(root.nc)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := admin.AddSchedule(ctx, lanefleet.NewSchedule{Session: "agent:main:sched", Every: time.Second, Message: events.Inbound{Text: "tick"}})
	if err != nil {
		t.Fatal(err)
	}
	schedules, err := root.js.KeyValue(ctx, permission.SchedulesBucket)
	if err != nil {
		t.Fatal(err)
	}
	w, err := schedules.Watch(ctx, sc.ID)
	if err != nil {
		t.Fatal(err)
	}
	for fired := false; !fired; {
		select {
		case <-w.Updates():
		case <-ctx.Done():
			t.Fatal("the schedule never fired")
		}
		got, err := admin.Schedule(ctx, sc.ID)
		if err != nil {
			t.Fatal(err)
		}
		fired = len(got.History) > 0 && got.History[0].Outcome == schedule.Fired
	}
	_ = w.Stop()
	if vs := v.list(); len(vs) > 0 {
		t.Fatalf("the server logged permission violations:\n%s", strings.Join(vs, "\n"))
	}
	// A sender may not add one. The client finds the bucket refused only
	// when its request gives up (the server answers a denied request with
	// nothing): the request is cancelled once the server has told the
	// connection of the violation, not left to wait out ctx's 30 s.
	sender, err := lanefleet.New(alice.nc)
	if err != nil {
		t.Fatal(err)
	}
	refused, stopAdd := context.WithCancel(ctx)
	defer stopAdd()
	added := make(chan error, 1)
	go func() {
		_, err := sender.AddSchedule(refused, lanefleet.NewSchedule{Session: session, Every: time.Second, Message: events.Inbound{Text: "x"}})
		added <- err
	}()
	alice.denied(t, "a sender adding a schedule", "$JS.API.STREAM.INFO.KV_"+permission.SchedulesBucket)
	stopAdd()
	if err := <-added; !errors.Is(err, lanefleet.ErrPermission) {
		t.Fatalf("a sender added a schedule: %v", err)
	}
}
