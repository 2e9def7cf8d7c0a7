package queue

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/lanefleet/lanefleet/internal/conformance"
)

type queueCase struct {
	Op                 string   `json:"op"`
	Raw                string   `json:"raw"`
	Cap                int      `json:"cap"`
	DropPolicy         string   `json:"dropPolicy"`
	Queued             []string `json:"queued"`
	Incoming           string   `json:"incoming"`
	Items              []string `json:"items"`
	Summary            string   `json:"summary"`
	IsActive           bool     `json:"isActive"`
	HasQueuedFollowups bool     `json:"hasQueuedFollowups"`
	IsHeartbeat        bool     `json:"isHeartbeat"`
	ShouldFollowup     bool     `json:"shouldFollowup"`
	QueueMode          string   `json:"queueMode"`
}

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance.Run(t, "queue", playQueueCase)
}

// TestActiveRunActions plays queue.json cases written for this package
// from runtime spec §19 step 3 (testdata/active-run-action.json): a
// heartbeat on a busy session is dropped, interrupt runs now, steer that
// could not steer is a follow-up.
func TestActiveRunActions(t *testing.T) {
	t.Parallel()
	for _, c := range conformance.LoadFile(t, filepath.Join("testdata", "active-run-action.json")) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			playQueueCase(t, c)
		})
	}
}

func playQueueCase(t *testing.T, cs conformance.Case) {

	raw, err := json.Marshal(conformance.Decode(t, cs.Input))
	if err != nil {
		t.Fatal(err)
	}
	var in queueCase
	conformance.Strict(t, raw, &in)
	var got map[string]any
	switch in.Op {
	case "normalizeMode":
		var v any
		if m, ok := ParseMode(in.Raw); ok {
			v = string(m)
		}
		got = map[string]any{"mode": v}
	case "normalizeDrop":
		var v any
		if p, ok := ParseDropPolicy(in.Raw); ok {
			v = string(p)
		}
		got = map[string]any{"drop": v}
	case "enqueue":
		drop, ok := ParseDropPolicy(in.DropPolicy)
		if !ok {
			drop = DropOld // the reference evicts without a summary for any other policy
		}
		s := Settings{Mode: ModeFollowup, Cap: in.Cap, Drop: drop}
		var p Pending
		now := time.UnixMilli(conformance.Now)
		for _, q := range in.Queued {
			p.Items = append(p.Items, Item{Prompt: q})
		}
		accepted, _ := p.Add(Item{Prompt: in.Incoming}, s, now)
		queued := []string{}
		for _, it := range p.Items {
			queued = append(queued, it.Prompt)
		}
		var prompt any
		if sp := p.SummaryPrompt(s); sp != "" {
			prompt = sp
		}
		got = map[string]any{
			"accepted":      accepted,
			"queued":        queued,
			"droppedCount":  p.DroppedCount,
			"summaryLines":  append([]string{}, p.SummaryLines...),
			"summaryPrompt": prompt,
		}
	case "collectPrompt":
		got = map[string]any{"prompt": CollectPrompt(in.Items, in.Summary)}
	case "activeRunAction":
		mode, ok := ParseMode(in.QueueMode)
		if !ok {
			t.Fatalf("unknown queue mode %q", in.QueueMode)
		}
		if queues := mode == ModeFollowup || mode == ModeCollect || mode == ModeSteerBacklog; in.ShouldFollowup != queues {
			t.Fatalf("shouldFollowup %v disagrees with mode %s", in.ShouldFollowup, mode)
		}
		busy := in.IsActive || in.HasQueuedFollowups
		action := OnArrival(Msg{Kind: KindPrompt, Mode: mode, Heartbeat: in.IsHeartbeat}, busy)
		if action == ArriveCut {
			// The reference runs it now, behind the run it aborted.
			action = ArriveRunNow
		}
		got = map[string]any{"action": string(action)}
	default:
		t.Fatalf("unknown op %q: the harness must test every case it is given", in.Op)
	}
	conformance.Check(t, got, conformance.Decode(t, cs.Expected))
}
