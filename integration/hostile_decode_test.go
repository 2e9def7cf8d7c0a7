package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/natstest"
)

// TestHostileDecode (issue 10): 13 bytes of msgpack whose array declares
// 2^32-1 elements, and msgpack nested a million levels deep, published raw
// to a lane of a worker process. Each run ends with invalid_input and a dead
// letter, the process stays up and answers the lane's next message. Forged
// undecodable events on that message's run reach a Go client following it
// as errors it skips, and the worker (which reads the run's last event when
// it starts the run) carries on.
func TestHostileDecode(t *testing.T) {
	if testing.Short() {
		t.Skip("worker process test")
	}
	t.Parallel()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv.URL)
	js := newJS(t, nc)
	c, _ := lanefleet.New(nc)
	created, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.STREAM.CREATED." + events.InboundStream)
	if err != nil {
		t.Fatal(err)
	}
	worker, _ := startProcess(t, srv.URL, "target") // builds the binary first: no deadline before
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	waitForStream(t, ctx, js, events.InboundStream, created)

	const session = "hostile"
	bomb := []byte{0x81, 0xa6, 'i', 'm', 'a', 'g', 'e', 's', 0xdd, 0xff, 0xff, 0xff, 0xff}
	deep := append(bytes.Repeat([]byte{0x91}, 1<<20), 0xc0)
	for _, tt := range []struct {
		name string
		data []byte
		why  string
	}{
		{"allocation bomb", bomb, "array declares 4294967295 elements"},
		{"deep nesting", deep, "nest deeper than"},
	} {
		ack, err := js.Publish(ctx, events.InboundPrefix+session, tt.data)
		if err != nil {
			t.Fatalf("%s: publish: %v", tt.name, err)
		}
		_, err = c.Run(session, itoa(ack.Sequence)).Wait(ctx)
		var re *lanefleet.RunError
		if !errors.As(err, &re) || re.Kind != "invalid_input" || !strings.Contains(re.Message, tt.why) {
			t.Fatalf("%s: run ended with %v; want invalid_input saying %q", tt.name, err, tt.why)
		}
	}

	// Forged events on the run of the next message, before it is sent.
	in, err := js.Stream(ctx, events.InboundStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := in.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := itoa(info.State.LastSeq + 1)
	for _, forged := range [][]byte{bomb, deep} {
		m := nats.NewMsg(events.EventPrefix + session + "." + next)
		m.Data = forged
		m.Header.Set(events.HeaderContentType, events.ContentMsgpack)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.Send(ctx, session, "still there?")
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != next {
		t.Fatalf("the message got run %s, the forged events went to run %s", r.ID, next)
	}
	var (
		skipped int
		final   *events.Event
	)
	for ev, err := range r.Events(ctx) {
		var de *events.DecodeError
		if errors.As(err, &de) {
			skipped++
			continue
		}
		if err != nil {
			t.Fatalf("following the run: %v", err)
		}
		if ev.Terminal() {
			final = ev
		}
	}
	// The stored forged events are dropped by the lane service that
	// replays the run (forged ones arriving live reach the follower as
	// *events.DecodeError it skips); either way they end nothing.
	if skipped > 2 {
		t.Fatalf("the follower met %d undecodable events, more than the 2 forged ones", skipped)
	}
	if final == nil || final.Data.Result == nil || final.Data.Result.Meta.Error != nil || len(final.Data.Result.Payloads) == 0 {
		t.Fatalf("the next message's final event = %+v", final)
	}

	// Both attacks are dead letters; the same process did all of the above.
	dlq, err := js.Stream(ctx, events.DeadStream)
	if err != nil {
		t.Fatal(err)
	}
	dinfo, err := dlq.Info(ctx, jetstream.WithSubjectFilter(events.DeadPrefix+">"))
	if err != nil {
		t.Fatal(err)
	}
	if n := dinfo.State.Subjects[events.DeadPrefix+"invalid"]; n != 2 {
		t.Fatalf("dead letters = %v, want 2 on %sinvalid", dinfo.State.Subjects, events.DeadPrefix)
	}
	if state := processState(t, worker.Process.Pid); state == "Z" || state == "X" {
		t.Fatalf("the worker process is %s", state)
	}
}

// waitForStream returns once the stream whose creation advisories created
// receives exists (created first, or while waiting).
func waitForStream(t *testing.T, ctx context.Context, js jetstream.JetStream, name string, created *nats.Subscription) {
	t.Helper()
	if _, err := js.Stream(ctx, name); err == nil {
		return
	}
	if _, err := created.NextMsgWithContext(ctx); err != nil {
		t.Fatalf("the worker process never created %s: %v", name, err)
	}
}

// processState returns the state letter of a process from /proc (R, S, Z…),
// or "" where there is no /proc.
func processState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// pid (comm) state …: comm may hold spaces, the state follows its ")".
	_, rest, _ := strings.Cut(string(b), ") ")
	state, _, _ := strings.Cut(rest, " ")
	return state
}
