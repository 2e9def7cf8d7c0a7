package queue

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// msgs builds a lane: one Msg per spec, "<mode>:<prompt>@<ms>" (a
// heartbeat prompt "heartbeat <mode>:<prompt>@<ms>"), or the kinds
// "settings", "stop", "invalid", "duplicate" (an interrupt's, which cuts
// nothing) (@<ms> optional); Seq counts from 1.
func msgs(specs ...string) []Msg {
	out := make([]Msg, len(specs))
	for i, s := range specs {
		m := Msg{Seq: uint64(i + 1), At: at(i)}
		s, m.Heartbeat = strings.CutPrefix(s, "heartbeat ")
		var ms int
		if n, _ := fmt.Sscanf(s[lastAt(s):], "@%d", &ms); n == 1 {
			m.At, s = at(ms), s[:lastAt(s)]
		}
		switch s {
		case "settings":
			m.Kind = KindSettings
		case "stop":
			m.Kind = KindStop
		case "invalid":
			m.Kind = KindInvalid
		case "duplicate":
			m.Kind, m.Mode = KindDuplicate, ModeInterrupt
		default:
			mode, prompt, _ := cutColon(s)
			m.Mode, _ = ParseMode(mode)
			m.Prompt = prompt
		}
		out[i] = m
	}
	return out
}

func lastAt(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '@' {
			return i
		}
	}
	return len(s)
}

func cutColon(s string) (string, string, bool) {
	for i := range s {
		if s[i] == ':' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func seqs(ms []Msg) []uint64 {
	var out []uint64
	for _, m := range ms {
		out = append(out, m.Seq)
	}
	return out
}

func TestPlanTurn(t *testing.T) {
	t.Parallel()
	collect := Settings{Mode: ModeCollect, Debounce: time.Second, Cap: 3, Drop: DropSummarize}
	tests := []struct {
		name     string
		pending  []Msg
		complete bool
		lastEnd  int // ms; -1 = no turn ended yet
		now      int
		s        Settings
		verb     Verb
		run      uint64
		merged   []uint64
		dropped  []uint64
		through  uint64
		until    int
		merge    bool
	}{
		// One kind per verb at the head.
		{name: "invalid", pending: msgs("invalid"), verb: VerbInvalid, run: 1, through: 1},
		{name: "settings", pending: msgs("settings", "followup:a"), verb: VerbSettings, run: 1, through: 1},
		{name: "stop", pending: msgs("stop"), verb: VerbStop, run: 1, through: 1},
		{name: "duplicate", pending: msgs("duplicate", "followup:a"), verb: VerbDuplicate, run: 1, through: 1},
		{name: "followup runs alone", pending: msgs("followup:a", "followup:b"), verb: VerbRun, run: 1, through: 1},
		{name: "interrupt runs alone", pending: msgs("interrupt:a"), verb: VerbRun, run: 1, through: 1},
		// Reject refuses a prompt that arrived before the last turn ended,
		// and runs one that arrived after.
		{name: "reject busy", pending: msgs("reject:a@5"), lastEnd: 10, verb: VerbReject, run: 1, through: 1},
		{name: "reject idle", pending: msgs("reject:a@15"), lastEnd: 10, verb: VerbRun, run: 1, through: 1},
		// Collect reads until something closes the batch or the lane ends.
		{name: "collect reads on", pending: msgs("collect:a", "collect:b"), verb: VerbRead},
		{name: "collect idle lane", pending: msgs("collect:a", "collect:b"), complete: true, lastEnd: -1, s: collect,
			verb: VerbRun, run: 1, merged: []uint64{2}, through: 2, merge: true},
		{name: "collect of one", pending: msgs("collect:a"), complete: true, lastEnd: -1, s: collect, verb: VerbRun, run: 1, through: 1},
		// Queued behind a turn: wait for a debounce of quiet after the newest.
		{name: "collect debounce", pending: msgs("collect:a@0", "collect:b@400"), complete: true, lastEnd: 500, now: 600, s: collect,
			verb: VerbWait, until: 1400},
		{name: "collect quiet", pending: msgs("collect:a@0", "collect:b@400"), complete: true, lastEnd: 500, now: 1400, s: collect,
			verb: VerbRun, run: 1, merged: []uint64{2}, through: 2, merge: true},
		// No waiting at the cap, after a closer, or with no debounce.
		{name: "collect at cap", pending: msgs("collect:a@0", "collect:b@1", "collect:c@2"), complete: true, lastEnd: 500, now: 3, s: collect,
			verb: VerbRun, run: 1, merged: []uint64{2, 3}, through: 3, merge: true},
		{name: "collect closed", pending: msgs("collect:a@0", "followup:b@1"), lastEnd: 500, now: 3, s: collect,
			verb: VerbRun, run: 1, through: 1},
		{name: "collect no debounce", pending: msgs("collect:a@0"), complete: true, lastEnd: 500, s: Settings{Mode: ModeCollect},
			verb: VerbRun, run: 1, through: 1},
		// A settings message closes a batch, which then runs without it.
		{name: "collect closed by settings", pending: msgs("collect:a", "collect:b", "settings"), lastEnd: -1, s: collect,
			verb: VerbRun, run: 1, merged: []uint64{2}, through: 2, merge: true},
		// So does a duplicate, even of a cut: it cuts nothing.
		{name: "collect closed by a duplicate", pending: msgs("collect:a", "duplicate"), lastEnd: -1, s: collect,
			verb: VerbRun, run: 1, through: 1},
		// A cut behind the batch drops it.
		{name: "collect then interrupt", pending: msgs("collect:a", "collect:b", "interrupt:c"), lastEnd: -1, s: collect,
			verb: VerbInterrupted, run: 1, through: 1},
		{name: "collect then stop", pending: msgs("collect:a", "stop"), lastEnd: -1, s: collect,
			verb: VerbInterrupted, run: 1, through: 1},
		{name: "collect then rollback", pending: msgs("collect:a", "rollback:x"), lastEnd: -1, s: collect,
			verb: VerbInterrupted, run: 1, through: 1},
		// Over the cap: summarize drops the oldest into the prompt; the turn
		// runs as the oldest message kept.
		{name: "collect summarize", pending: msgs("collect:a", "collect:b", "collect:c", "collect:d"), complete: true, lastEnd: -1, s: collect,
			verb: VerbRun, run: 2, merged: []uint64{3, 4}, dropped: []uint64{1}, through: 4, merge: true},
		// drop new refuses the newest; one kept message alone runs as itself.
		{name: "collect drop new", pending: msgs("collect:a", "collect:b"), complete: true, lastEnd: -1,
			s: Settings{Mode: ModeCollect, Cap: 1, Drop: DropNew}, verb: VerbRun, run: 1, dropped: []uint64{2}, through: 2},
		// A heartbeat that arrived while a turn ran is dropped, whatever
		// its mode; on an idle lane it runs.
		{name: "heartbeat while busy", pending: msgs("heartbeat followup:tick@100"), lastEnd: 500, verb: VerbDrop, run: 1, through: 1},
		{name: "collect heartbeat while busy", pending: msgs("heartbeat collect:tick@100"), complete: true, lastEnd: 500, s: collect,
			verb: VerbDrop, run: 1, through: 1},
		{name: "heartbeat when idle", pending: msgs("heartbeat followup:tick@600"), lastEnd: 500, verb: VerbRun, run: 1, through: 1},
		{name: "heartbeat of a new owner", pending: msgs("heartbeat collect:tick@100"), complete: true, lastEnd: -1, s: collect,
			verb: VerbRun, run: 1, through: 1},
		// A heartbeat is not merged into a collect batch: it closes it.
		{name: "collect closed by a heartbeat", pending: msgs("collect:a", "collect:b", "heartbeat collect:tick"), lastEnd: -1, s: collect,
			verb: VerbRun, run: 1, merged: []uint64{2}, through: 2, merge: true},
		// drop old with one kept: no summary, no merge.
		{name: "collect drop old", pending: msgs("collect:a", "collect:b"), complete: true, lastEnd: -1,
			s: Settings{Mode: ModeCollect, Cap: 1, Drop: DropOld}, verb: VerbRun, run: 2, dropped: []uint64{1}, through: 2},
	}
	for _, tt := range tests {
		lastEnd := time.Time{}
		if tt.lastEnd >= 0 {
			lastEnd = at(tt.lastEnd)
		}
		p := PlanTurn(Input{Pending: tt.pending, Complete: tt.complete, Settings: tt.s, LastEnd: lastEnd, Now: at(tt.now)})
		var dropped []uint64
		for _, d := range p.Dropped {
			dropped = append(dropped, d.Item.Seq)
		}
		if p.Verb != tt.verb || p.Run.Seq != tt.run || !slices.Equal(seqs(p.Merged), tt.merged) ||
			!slices.Equal(dropped, tt.dropped) || p.Through != tt.through || p.Merge != tt.merge {
			t.Errorf("%s: got %s run %d merged %v dropped %v through %d merge %v", tt.name, p.Verb, p.Run.Seq, seqs(p.Merged), dropped, p.Through, p.Merge)
		}
		if tt.verb == VerbWait && !p.Until.Equal(at(tt.until)) {
			t.Errorf("%s: until %v, want %v", tt.name, p.Until, at(tt.until))
		}
	}
}

// TestPlanCollectPrompt: a merged prompt carries the overflow summary and
// the kept messages in order.
func TestPlanCollectPrompt(t *testing.T) {
	t.Parallel()
	p := PlanTurn(Input{Pending: msgs("collect:a", "collect:b", "collect:c", "collect:d"), Complete: true,
		Settings: Settings{Mode: ModeCollect, Cap: 3, Drop: DropSummarize}})
	want := "[Queued messages while agent was busy]\n\n[Queue overflow] Dropped 1 message due to cap.\nSummary:\n- a\n\n---\nQueued #1\nb\n\n---\nQueued #2\nc\n\n---\nQueued #3\nd"
	if p.Prompt != want || p.Dropped[0].Reason != ReasonCapSummarized {
		t.Fatalf("prompt %q dropped %+v", p.Prompt, p.Dropped)
	}
}

// TestPlanAccountsForEveryMessage: on random lanes, every message a turn
// consumes is its run, merged or dropped exactly once, the turn consumes a
// gapless prefix of the lane, and the lane drains.
func TestPlanAccountsForEveryMessage(t *testing.T) {
	t.Parallel()
	specs := []string{"followup:x", "collect:x", "collect:x", "collect:x", "steer:x", "reject:x", "interrupt:x", "settings", "stop", "invalid",
		"heartbeat collect:x", "heartbeat interrupt:x"}
	drops := []DropPolicy{DropOld, DropNew, DropSummarize}
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 2))
		var lane []string
		for range 1 + r.IntN(30) {
			lane = append(lane, specs[r.IntN(len(specs))])
		}
		all := msgs(lane...)
		s := Settings{Mode: ModeCollect, Cap: 1 + r.IntN(4), Drop: drops[r.IntN(3)], Debounce: time.Duration(r.IntN(2)) * time.Second}
		seen := map[uint64]int{}
		head := 0
		for head < len(all) {
			n := 1
			var p Plan
			for {
				p = PlanTurn(Input{Pending: all[head : head+n], Complete: head+n == len(all), Settings: s, LastEnd: at(r.IntN(40)), Now: at(100000)})
				if p.Verb != VerbRead {
					break
				}
				n++
			}
			if p.Verb == VerbWait {
				t.Fatalf("seed %d: waited at %d though the debounce is over", seed, head)
			}
			seen[p.Run.Seq]++
			for _, m := range p.Merged {
				seen[m.Seq]++
			}
			for _, d := range p.Dropped {
				seen[d.Item.Seq]++
			}
			if p.Verb == VerbInterrupted {
				// The owner drops the rest up to the cut (AfterCut).
				for _, m := range all[head+1:] {
					if AfterCut(m) == CutEnd {
						break
					}
					seen[m.Seq]++
					p.Through = m.Seq
				}
			}
			for i := head; i < len(all) && all[i].Seq <= p.Through; i++ {
				if seen[all[i].Seq] != 1 {
					t.Fatalf("seed %d: message %d accounted %d times (plan %+v)", seed, all[i].Seq, seen[all[i].Seq], p)
				}
			}
			head = int(p.Through)
		}
	}
}

func TestOnArrival(t *testing.T) {
	t.Parallel()
	tests := []struct {
		m    string
		busy bool
		want Arrival
	}{
		{"collect:a", false, ArriveRunNow},
		{"interrupt:a", false, ArriveRunNow},
		{"stop", false, ArriveRunNow},
		{"collect:a", true, ArriveQueue},
		{"followup:a", true, ArriveQueue},
		{"steer:a", true, ArriveQueue},  // joins at the next boundary (Steer)
		{"reject:a", true, ArriveQueue}, // refused at its turn (PlanTurn)
		{"settings", true, ArriveQueue},
		{"interrupt:a", true, ArriveCut},
		{"rollback:a", true, ArriveCut},
		{"stop", true, ArriveCut},
		{"invalid", true, ArriveQueue},
		{"duplicate", true, ArriveQueue}, // an interrupt's: its first cut already
		// A heartbeat on a busy lane is dropped, and never cuts.
		{"heartbeat followup:a", true, ArriveDrop},
		{"heartbeat interrupt:a", true, ArriveDrop},
		{"heartbeat collect:a", false, ArriveRunNow},
	}
	for _, tt := range tests {
		if got := OnArrival(msgs(tt.m)[0], tt.busy); got != tt.want {
			t.Errorf("OnArrival(%s, %v) = %s, want %s", tt.m, tt.busy, got, tt.want)
		}
	}
}

func TestSteer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		waiting []Msg
		shown   bool
		join    []uint64
		backlog []uint64
		scanned uint64
	}{
		{"steer joins", msgs("steer:a", "steer:b"), false, []uint64{1, 2}, nil, 2},
		{"backlog is shown and stays", msgs("steer-backlog:a"), false, nil, []uint64{1}, 1},
		// A steer message behind a steer-backlog one waits: the cursor
		// cannot pass the message that stays.
		{"steer behind backlog waits", msgs("steer-backlog:a", "steer:b"), false, nil, []uint64{1}, 1},
		{"steer after an earlier backlog waits", msgs("steer:a"), true, nil, nil, 0},
		{"backlog after an earlier backlog", msgs("steer-backlog:a"), true, nil, []uint64{1}, 1},
		// Order is kept: a follow-up ends the batch.
		{"followup ends it", msgs("steer:a", "followup:b", "steer:c"), false, []uint64{1}, nil, 1},
		{"invalid ends it", msgs("invalid", "steer:b"), false, nil, nil, 0},
		{"stop ends it", msgs("stop", "steer:b"), false, nil, nil, 0},
		{"duplicate ends it", msgs("duplicate", "steer:b"), false, nil, nil, 0},
		// A heartbeat is never steered into a turn.
		{"a heartbeat ends it", msgs("heartbeat steer:a", "steer:b"), false, nil, nil, 0},
	}
	for _, tt := range tests {
		sp := Steer(tt.waiting, 0, tt.shown)
		if !slices.Equal(seqs(sp.Join), tt.join) || !slices.Equal(seqs(sp.Backlog), tt.backlog) || sp.Scanned != tt.scanned ||
			sp.BacklogShown != (tt.shown || len(tt.backlog) > 0) {
			t.Errorf("%s: %+v", tt.name, sp)
		}
	}
}

func TestAfterCut(t *testing.T) {
	t.Parallel()
	for spec, want := range map[string]Cut{
		"followup:a": CutDrop, "collect:a": CutDrop, "steer:a": CutDrop, "reject:a": CutDrop, "invalid": CutDrop,
		"settings": CutApply, "interrupt:a": CutEnd, "rollback:a": CutEnd, "stop": CutEnd, "duplicate": CutDrop,
		"heartbeat interrupt:a": CutDrop,
	} {
		if got := AfterCut(msgs(spec)[0]); got != want {
			t.Errorf("AfterCut(%s) = %d, want %d", spec, got, want)
		}
	}
}

func TestModeOf(t *testing.T) {
	t.Parallel()
	if ModeOf("", "") != ModeFollowup || ModeOf("", ModeCollect) != ModeCollect || ModeOf(ModeSteer, ModeCollect) != ModeSteer {
		t.Fatal("ModeOf: own mode, then the stored one, then followup")
	}
}
