package integration

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	lanefleet "github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/internal/fleet"
)

// TestLaneFloodRefusesOnlyItsSender: a sender (role sender, bob) puts its
// session in collect mode with the longest debounce behind a slow turn and
// floods it. Its lane fills to the fleet's per-session cap and its next
// message is refused with ErrLaneFull, saying how many of its messages
// wait; another sender (alice) goes on sending and gets her replies; a
// debounce over the bound is refused before it is sent. (Before, the
// flood went on until the whole inbound stream refused everyone's
// messages.)
func TestLaneFloodRefusesOnlyItsSender(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet test")
	}
	t.Parallel()
	a := newAuthFleet(t, roleUsers(), "")
	_, v := a.start(t)
	startMember(t, a.url(), fleet.Config{WorkerID: "w1", User: "worker", Password: a.passwords["worker"],
		Limits: fleet.Limits{LaneMessages: 6}})
	ctx := t.Context()
	bob, err := lanefleet.New(a.connectAs(t, "bob").nc)
	if err != nil {
		t.Fatal(err)
	}
	alice, err := lanefleet.New(a.connectAs(t, "alice").nc)
	if err != nil {
		t.Fatal(err)
	}

	hour := time.Hour
	if _, err := bob.SetQueueSettings(ctx, "bob", lanefleet.QueueSettings{Mode: "collect", Debounce: &hour}); err == nil || !strings.Contains(err.Error(), "debounceMs") {
		t.Fatalf("an hour's debounce: %v, want refused", err)
	}
	minute := time.Minute
	set, err := bob.SetQueueSettings(ctx, "bob", lanefleet.QueueSettings{Mode: "collect", Debounce: &minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := set.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	slow := `#script {"replies":[{"text":"slow","chunks":600,"delayMs":100}]}`
	if _, err := bob.Send(ctx, "bob", slow, lanefleet.WithModel("scripted/script"), lanefleet.WithMode("followup"), lanefleet.WithoutFollow()); err != nil {
		t.Fatal(err)
	}
	var refused error
	accepted := 0
	for i := 0; i < 100 && refused == nil; i++ {
		if _, refused = bob.Send(ctx, "bob", fmt.Sprintf("flood %d", i), lanefleet.WithoutFollow()); refused == nil {
			accepted++
		}
	}
	if !errors.Is(refused, lanefleet.ErrLaneFull) || accepted == 0 || accepted > 5 {
		t.Fatalf("after %d flood messages: %v, want ErrLaneFull", accepted, refused)
	}
	b, err := bob.Backlog(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	// The refusal counts what waited then; the slow message may have
	// started since, one fewer waiting now.
	m := regexp.MustCompile(`(\d+) messages of session "bob" wait for their turns`).FindStringSubmatch(refused.Error())
	if m == nil {
		t.Fatalf("refusal %q does not say how many messages wait", refused)
	}
	if n, _ := strconv.Atoi(m[1]); n < b.Waiting || n > b.Waiting+1 {
		t.Fatalf("refusal %q says %d wait; the backlog says %d now", refused, n, b.Waiting)
	}

	t.Logf("accepted %d, then: %v", accepted, refused)
	// Everyone else goes on.
	for i := range 3 {
		run, err := alice.Send(ctx, "alice", fmt.Sprintf("hi %d", i))
		if err != nil {
			t.Fatalf("alice's message %d: %v", i, err)
		}
		res, err := run.Wait(ctx)
		if err != nil || len(res.Payloads) == 0 || res.Payloads[0].Text != fmt.Sprintf("echo: hi %d", i) {
			t.Fatalf("alice's run %d: %+v %v", i, res, err)
		}
	}
	if got := v.list(); len(got) != 0 {
		t.Fatalf("permission violations: %q", got)
	}
}
