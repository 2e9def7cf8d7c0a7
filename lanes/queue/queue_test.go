package queue

import (
	"errors"
	"fmt"
	"github.com/lanefleet/lanefleet/internal/jstext"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

var t0 = time.UnixMilli(1750000000000)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestParseMode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		raw  string
		want Mode
		ok   bool
	}{
		{"queue", ModeSteer, true},        // reference alias of steer
		{" STEERING ", ModeSteer, true},   // trimmed, case-insensitive
		{"followups", ModeFollowup, true}, // plural alias
		{"enqueue", ModeFollowup, true},   // LangGraph name
		{"coalesce", ModeCollect, true},   // reference alias of collect
		{"steer+backlog", ModeSteerBacklog, true},
		{"steer_backlog", ModeSteerBacklog, true},
		{"abort", ModeInterrupt, true},   // reference alias of interrupt
		{"reject", ModeReject, true},     // LangGraph name
		{"rollback", ModeRollback, true}, // LangGraph name
		{"", "", false},                  // empty is unset
		{"drop", "", false},              // unknown
	}
	for _, tt := range tests {
		got, ok := ParseMode(tt.raw)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseMode(%q) = %q, %v; want %q, %v", tt.raw, got, ok, tt.want, tt.ok)
		}
	}
	for raw, want := range map[string]DropPolicy{"Newest": DropNew, "old": DropOld, "summary": DropSummarize} {
		if got, ok := ParseDropPolicy(raw); !ok || got != want {
			t.Errorf("ParseDropPolicy(%q) = %q, %v", raw, got, ok)
		}
	}
}

func TestDecide(t *testing.T) {
	t.Parallel()
	idle := Busy{}
	running := Busy{Active: true}
	streaming := Busy{Active: true, Streaming: true}
	queued := Busy{Queued: true}
	tests := []struct {
		name      string
		mode      Mode
		busy      Busy
		heartbeat bool
		want      Decision
	}{
		// Idle lane: every mode runs the message now.
		{"idle collect", ModeCollect, idle, false, Decision{Action: ActionRunNow}},
		{"idle interrupt", ModeInterrupt, idle, false, Decision{Action: ActionRunNow}},
		{"idle reject", ModeReject, idle, false, Decision{Action: ActionRunNow}},
		// Busy queueing modes queue a follow-up.
		{"busy followup", ModeFollowup, running, false, Decision{Action: ActionEnqueue}},
		{"busy collect", ModeCollect, running, false, Decision{Action: ActionEnqueue}},
		// Queued follow-ups keep order even when no turn runs.
		{"queued followup", ModeFollowup, queued, false, Decision{Action: ActionEnqueue}},
		// Steer injects while the run streams; otherwise it falls back to a
		// follow-up.
		{"steer streaming", ModeSteer, streaming, false, Decision{Action: ActionSteer}},
		{"steer not streaming", ModeSteer, running, false, Decision{Action: ActionEnqueue}},
		// steer-backlog injects and keeps the message.
		{"steer-backlog streaming", ModeSteerBacklog, streaming, false, Decision{Action: ActionSteerAndEnqueue}},
		// Interrupt aborts the run, clears the queue and runs next.
		{"interrupt running", ModeInterrupt, Busy{Active: true, Queued: true}, false, Decision{Action: ActionInterrupt, Abort: true, ClearQueue: true}},
		// Interrupt with only queued messages clears them, nothing to abort.
		{"interrupt queued", ModeInterrupt, queued, false, Decision{Action: ActionInterrupt, ClearQueue: true}},
		// Rollback also discards the interrupted turn.
		{"rollback running", ModeRollback, running, false, Decision{Action: ActionInterrupt, Abort: true, Discard: true}},
		// Reject refuses while busy, with a reason.
		{"reject running", ModeReject, running, false, Decision{Action: ActionReject, Reason: ReasonRejectedBusy}},
		// Heartbeats never interrupt or steer; busy heartbeats are dropped.
		{"heartbeat busy", ModeInterrupt, running, true, Decision{Action: ActionDrop, Reason: ReasonHeartbeatBusy}},
		{"heartbeat steer", ModeSteer, streaming, true, Decision{Action: ActionDrop, Reason: ReasonHeartbeatBusy}},
		{"heartbeat reject", ModeReject, running, true, Decision{Action: ActionDrop, Reason: ReasonHeartbeatBusy}},
		{"heartbeat idle", ModeCollect, idle, true, Decision{Action: ActionRunNow}},
		// Empty mode is the default (collect).
		{"default mode", "", running, false, Decision{Action: ActionEnqueue}},
	}
	for _, tt := range tests {
		if got := Decide(tt.mode, tt.busy, tt.heartbeat); got != tt.want {
			t.Errorf("%s: Decide = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestSummaryLine(t *testing.T) {
	t.Parallel()
	// Whitespace runs (including newlines and NBSP) collapse to one space.
	if got := SummaryLine("  a \n\t b\u00a0 c "); got != "a b c" {
		t.Errorf("collapse: %q", got)
	}
	// 160 units stay; 161 are cut to 159 plus "…".
	if got := SummaryLine(strings.Repeat("x", 160)); got != strings.Repeat("x", 160) {
		t.Errorf("160: %q", got)
	}
	if got := SummaryLine(strings.Repeat("x", 161)); got != strings.Repeat("x", 159)+"…" {
		t.Errorf("161: %q", got)
	}
	// Emoji count two units and are never split.
	got := SummaryLine(strings.Repeat("😀", 81))
	if got != strings.Repeat("😀", 79)+"…" {
		t.Errorf("emoji: %q (%d units)", got, jstext.Len(got))
	}
	// Whitespace before the cut is trimmed before the ellipsis.
	if got := SummaryLine(strings.Repeat("x", 158) + " yyy"); got != strings.Repeat("x", 158)+"…" {
		t.Errorf("trim: %q", got)
	}
}

func TestLaneCollect(t *testing.T) {
	t.Parallel()
	l := NewLane(Settings{Mode: ModeCollect, Debounce: time.Second, Cap: 3, Drop: DropSummarize})
	for i, p := range []string{"a", "b", "c", "d"} {
		out := l.Offer(Item{Seq: uint64(i + 1), Prompt: p}, true, false, at(i*100))
		if out.Action != ActionEnqueue || !out.Queued {
			t.Fatalf("offer %s: %+v", p, out)
		}
		// The fourth message evicts the first, summarised.
		if p == "d" && (len(out.Dropped) != 1 || out.Dropped[0].Item.Prompt != "a" || out.Dropped[0].Reason != ReasonCapSummarized) {
			t.Fatalf("offer d dropped %+v", out.Dropped)
		}
	}
	// Debounce: not ready until 1 s after the last message.
	if _, ok := l.Next(at(1299)); ok {
		t.Fatal("drained before the debounce")
	}
	turn, ok := l.Next(at(1300))
	if !ok {
		t.Fatal("not drained after the debounce")
	}
	want := "[Queued messages while agent was busy]\n\n[Queue overflow] Dropped 1 message due to cap.\nSummary:\n- a\n\n---\nQueued #1\nb\n\n---\nQueued #2\nc\n\n---\nQueued #3\nd"
	if turn.Kind != TurnCollected || turn.Prompt != want || len(turn.Items) != 3 {
		t.Fatalf("turn %+v", turn)
	}
	if _, ok := l.Next(at(5000)); ok || l.Len() != 0 {
		t.Fatal("queue not empty after the collected turn")
	}
}

func TestLaneCollectCrossRoutes(t *testing.T) {
	t.Parallel()
	l := NewLane(Settings{Mode: ModeCollect})
	tg := Route{Channel: "telegram", To: "42"}
	sl := Route{Channel: "slack", To: "C1"}
	l.Enqueue(Item{Seq: 1, Prompt: "a", Route: tg}, at(0))
	l.Enqueue(Item{Seq: 2, Prompt: "b", Route: sl}, at(0))
	l.Enqueue(Item{Seq: 3, Prompt: "c", Route: tg}, at(0))
	// Mixed routes: one message per turn, in order, for the whole drain.
	for _, want := range []string{"a", "b", "c"} {
		turn, ok := l.Next(at(2000))
		if !ok || turn.Kind != TurnSingle || turn.Prompt != want {
			t.Fatalf("want single %q, got %+v", want, turn)
		}
	}
	// After the drain, same-route messages are merged again.
	l.Enqueue(Item{Seq: 4, Prompt: "d", Route: tg}, at(3000))
	l.Enqueue(Item{Seq: 5, Prompt: "e"}, at(3000)) // unrouted: ignored by the route check
	turn, ok := l.Next(at(4000))
	if !ok || turn.Kind != TurnCollected || turn.Route != tg || len(turn.Items) != 2 {
		t.Fatalf("want a collected turn, got %+v", turn)
	}
	// A partly routed message (no recipient) counts as a different route.
	l.Enqueue(Item{Seq: 6, Prompt: "f", Route: tg}, at(5000))
	l.Enqueue(Item{Seq: 7, Prompt: "g", Route: Route{Channel: "telegram"}}, at(5000))
	if turn, _ := l.Next(at(6000)); turn.Kind != TurnSingle {
		t.Fatalf("partly routed: %+v", turn)
	}
}

func TestLaneFollowupSummaryFirst(t *testing.T) {
	t.Parallel()
	l := NewLane(Settings{Mode: ModeFollowup, Cap: 2, Drop: DropSummarize})
	for i, p := range []string{"one", "two", "three", "four"} {
		l.Enqueue(Item{Seq: uint64(i + 1), Prompt: p}, at(0))
	}
	var got []string
	for {
		turn, ok := l.Next(at(1000))
		if !ok {
			break
		}
		got = append(got, string(turn.Kind)+":"+turn.Prompt)
	}
	want := []string{
		"summary:[Queue overflow] Dropped 2 messages due to cap.\nSummary:\n- one\n- two",
		"single:three",
		"single:four",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("turns %q, want %q", got, want)
	}
}

func TestLaneRefusals(t *testing.T) {
	t.Parallel()
	l := NewLane(Settings{Mode: ModeFollowup, Cap: 1, Drop: DropNew})
	if out := l.Offer(Item{Seq: 1, ID: "m1", Prompt: "a"}, true, false, at(0)); !out.Queued {
		t.Fatalf("first: %+v", out)
	}
	// The same client message id again is a duplicate.
	out := l.Offer(Item{Seq: 2, ID: "m1", Prompt: "a"}, true, false, at(1))
	if out.Queued || len(out.Dropped) != 1 || out.Dropped[0].Reason != ReasonDuplicate {
		t.Fatalf("duplicate: %+v", out)
	}
	// Full queue with drop policy new refuses the newcomer.
	out = l.Offer(Item{Seq: 3, ID: "m3", Prompt: "b"}, true, false, at(2))
	if out.Queued || len(out.Dropped) != 1 || out.Dropped[0].Reason != ReasonCapRefused || out.Dropped[0].Item.Seq != 3 {
		t.Fatalf("cap: %+v", out)
	}
	// Interrupt clears the queue and reports every cleared message.
	l.SetSettings(Settings{Mode: ModeInterrupt})
	out = l.Offer(Item{Seq: 4, Prompt: "stop"}, true, true, at(3))
	if out.Action != ActionInterrupt || !out.Abort || len(out.Dropped) != 1 || out.Dropped[0].Reason != ReasonInterrupted || l.Len() != 0 {
		t.Fatalf("interrupt: %+v", out)
	}
	// Reject while busy.
	l.SetSettings(Settings{Mode: ModeReject})
	out = l.Offer(Item{Seq: 5, Prompt: "x"}, true, false, at(4))
	if out.Action != ActionReject || len(out.Dropped) != 1 || out.Dropped[0].Reason != ReasonRejectedBusy {
		t.Fatalf("reject: %+v", out)
	}
}

func TestCollect(t *testing.T) {
	t.Parallel()
	items := func(n int) []Item {
		var out []Item
		for i := 1; i <= n; i++ {
			out = append(out, Item{Seq: uint64(10 + i), Prompt: fmt.Sprint("m", i), At: at(i)})
		}
		return out
	}
	// Collect mode merges everything; the cursor may pass all of it.
	b, ok := Collect(items(3), Settings{Mode: ModeCollect})
	if !ok || b.Turn.Kind != TurnCollected || len(b.Turn.Items) != 3 || b.Through != 13 {
		t.Fatalf("collect: %+v", b)
	}
	// Followup mode takes one message; the cursor passes only it.
	b, _ = Collect(items(3), Settings{Mode: ModeFollowup})
	if b.Turn.Prompt != "m1" || b.Through != 11 {
		t.Fatalf("followup: %+v", b)
	}
	// Over the cap with summarize: the summary turn accounts for the
	// evicted prefix.
	b, _ = Collect(items(4), Settings{Mode: ModeFollowup, Cap: 2, Drop: DropSummarize})
	if b.Turn.Kind != TurnSummary || len(b.Dropped) != 2 || b.Through != 12 {
		t.Fatalf("summary: %+v", b)
	}
	// Over the cap with drop new: the refused newest messages are dropped
	// (the owner deletes them) but the cursor stops before the unserved
	// message in between.
	b, _ = Collect(items(4), Settings{Mode: ModeFollowup, Cap: 2, Drop: DropNew})
	if b.Turn.Prompt != "m1" || len(b.Dropped) != 2 || b.Dropped[0].Item.Seq != 13 || b.Through != 11 {
		t.Fatalf("drop new: %+v", b)
	}
	if _, ok := Collect(nil, Settings{}); ok {
		t.Fatal("empty pending made a turn")
	}
}

// TestLaneAccountsForEveryMessage drives random lanes and checks that each
// offered message ends in exactly one place: run now, steered, a turn, or
// a Dropped entry (a summarised message also appears in a summary).
func TestLaneAccountsForEveryMessage(t *testing.T) {
	t.Parallel()
	modes := []Mode{ModeSteer, ModeFollowup, ModeCollect, ModeSteerBacklog, ModeInterrupt, ModeReject, ModeRollback}
	drops := []DropPolicy{DropOld, DropNew, DropSummarize}
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		l := NewLane(Settings{Mode: modes[r.IntN(len(modes))], Cap: 1 + r.IntN(4), Drop: drops[r.IntN(3)], Debounce: time.Duration(r.IntN(3)) * time.Second})
		seen := map[uint64]int{}
		now := 0
		for i := 1; i <= 40; i++ {
			now += r.IntN(1500)
			it := Item{Seq: uint64(i), ID: fmt.Sprint(r.IntN(30)), Prompt: fmt.Sprint("p", i), Heartbeat: r.IntN(10) == 0}
			if r.IntN(5) == 0 {
				l.SetSettings(Settings{Mode: modes[r.IntN(len(modes))], Cap: l.Settings().Cap, Drop: l.Settings().Drop})
			}
			out := l.Offer(it, r.IntN(2) == 0, r.IntN(2) == 0, at(now))
			switch out.Action {
			case ActionRunNow, ActionInterrupt, ActionSteer:
				seen[it.Seq]++
			}
			for _, d := range out.Dropped {
				if d.Reason == "" {
					t.Fatalf("seed %d: drop without reason", seed)
				}
				seen[d.Item.Seq]++
			}
			for {
				turn, ok := l.Next(at(now))
				if !ok {
					break
				}
				for _, x := range turn.Items {
					seen[x.Seq]++
				}
			}
		}
		for {
			turn, ok := l.Next(at(now + 1e7))
			if !ok {
				break
			}
			for _, x := range turn.Items {
				seen[x.Seq]++
			}
		}
		for i := uint64(1); i <= 40; i++ {
			if seen[i] != 1 {
				t.Fatalf("seed %d: message %d accounted %d times", seed, i, seen[i])
			}
		}
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	zero := time.Duration(0)
	two := 2 * time.Second
	// First set value wins per field; the rest fall back to defaults.
	got := Resolve(Overrides{Cap: 5}, Overrides{Mode: ModeSteer, Debounce: &zero}, Overrides{Mode: ModeFollowup, Debounce: &two, Drop: DropOld})
	want := Settings{Mode: ModeSteer, Debounce: 0, Cap: 5, Drop: DropOld}
	if got != want {
		t.Errorf("Resolve = %+v, want %+v", got, want)
	}
	if got := Resolve(); got != DefaultSettings() {
		t.Errorf("Resolve() = %+v", got)
	}
}

func TestParseDirective(t *testing.T) {
	t.Parallel()
	d, err := ParseDirective("/queue collect debounce:2s cap:7.9 drop:oldest")
	if err != nil {
		t.Fatal(err)
	}
	if d.Reset || d.Set.Mode != ModeCollect || *d.Set.Debounce != 2*time.Second || d.Set.Cap != 7 || d.Set.Drop != DropOld {
		t.Errorf("parsed %+v", d)
	}
	// A bare number is milliseconds.
	if d, err := ParseDirective("debounce:1500"); err != nil || *d.Set.Debounce != 1500*time.Millisecond {
		t.Errorf("ms: %+v %v", d, err)
	}
	if d, err := ParseDirective("/queue reset"); err != nil || !d.Reset {
		t.Errorf("reset: %+v %v", d, err)
	}
	for _, bad := range []string{"/queue sometimes", "cap:0", "drop:all", "debounce:-1s", "color:red"} {
		if _, err := ParseDirective(bad); !errors.Is(err, ErrDirective) {
			t.Errorf("%q: err = %v, want ErrDirective", bad, err)
		}
	}
}

func TestDedupe(t *testing.T) {
	t.Parallel()
	tg := Route{Channel: "telegram", To: "1"}
	tests := []struct {
		name string
		mode DedupeMode
		a, b Item
		dup  bool
	}{
		// Same id and route: duplicate (the default).
		{"same id", "", Item{ID: "x", Route: tg}, Item{ID: "x", Route: tg}, true},
		// Same id on another route: not a duplicate.
		{"other route", "", Item{ID: "x", Route: tg}, Item{ID: "x"}, false},
		// Empty ids never match.
		{"empty id", DedupeMessageID, Item{Prompt: "p"}, Item{Prompt: "p"}, false},
		// Prompt mode compares the text.
		{"prompt", DedupePrompt, Item{ID: "1", Prompt: "p"}, Item{ID: "2", Prompt: "p"}, true},
		// None never dedupes.
		{"none", DedupeNone, Item{ID: "x"}, Item{ID: "x"}, false},
	}
	for _, tt := range tests {
		l := NewLane(Settings{Mode: ModeFollowup, Dedupe: tt.mode})
		l.Enqueue(tt.a, at(0))
		ok, dropped := l.Enqueue(tt.b, at(1))
		if ok == tt.dup || (tt.dup && (len(dropped) != 1 || dropped[0].Reason != ReasonDuplicate)) {
			t.Errorf("%s: queued=%v dropped=%+v", tt.name, ok, dropped)
		}
	}
}
