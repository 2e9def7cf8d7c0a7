package lanes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/chatcmd"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/lanes/queue"
)

// collected is one inbound message read off the lane.
type collected struct {
	raw *jetstream.RawStreamMsg
	in  *events.Inbound // nil when it does not decode
	msg queue.Msg       // what the planner knows of it
	// dupOf is the inbound sequence (run) of the message this one
	// duplicates (msg.Kind is then queue.KindDuplicate); 0 = none.
	dupOf uint64
	// cmd is the chat command the message's text is (nil = none; see
	// chatCommand): in is then what the lane acts on.
	cmd *chatcmd.Command
}

func (c collected) runID() string { return strconv.FormatUint(c.raw.Sequence, 10) }

// dropped is a message a turn consumes without answering it.
type dropped struct {
	c      collected
	kind   string // events.KindDropped, events.KindInterrupted, kindSettings, or invalid_input (settings refused)
	reason string
}

// kindSettings marks a settings message applied on the way (ConsumedRun.Kind).
const kindSettings = "settings"

// plan is what one turn takes off the lane: queue.PlanTurn's plan with the
// messages it names. The cursor moves past through when the turn commits;
// every message up to it is the turn's own, merged into it, or dropped, and
// each of their runs gets a final event.
type plan struct {
	verb    queue.Verb
	run     collected       // the message whose run carries the turn
	in      *events.Inbound // what the turn runs: run's message, or a collect batch merged
	merged  []collected     // other messages the turn answers: a collect batch, then steered ones
	dropped []dropped       // messages the turn consumed without answering them
	backlog []collected     // steer-backlog messages shown to the turn; each still runs on its own
	through uint64          // the last inbound sequence the turn consumed
}

// consumed lists the messages the turn consumed besides its own.
func (p *plan) consumed() []events.ConsumedRun {
	var out []events.ConsumedRun
	for _, c := range p.merged {
		out = append(out, events.ConsumedRun{RunID: c.runID()})
	}
	for _, d := range p.dropped {
		out = append(out, events.ConsumedRun{RunID: d.c.runID(), Kind: d.kind, Reason: d.reason})
	}
	// In sequence order: the run of the last message consumed is ended
	// last, so when it has its final event every other one has too.
	slices.SortFunc(out, func(a, b events.ConsumedRun) int {
		x, _ := strconv.ParseUint(a.RunID, 10, 64)
		y, _ := strconv.ParseUint(b.RunID, 10, 64)
		return cmp.Compare(x, y)
	})
	return out
}

// jsonOf reports whether the consumed message of run id published JSON (its
// events are then JSON too).
func (p *plan) jsonOf(run string) bool {
	for _, c := range p.merged {
		if c.runID() == run {
			return isJSON(c.raw)
		}
	}
	for _, d := range p.dropped {
		if d.c.runID() == run {
			return isJSON(d.c.raw)
		}
	}
	return false
}

// read decodes a message read off the lane and says what the planner
// knows of it. Its id (Lanefleet-Msg-Id) is noted: a message whose id an
// earlier message of the lane used within the window is a duplicate.
func (o *owner) read(raw *jetstream.RawStreamMsg) collected {
	in, err := o.decode(raw)
	var cmd *chatcmd.Command
	if err != nil {
		in = nil
	} else {
		in, cmd = chatCommand(in, o.cfg.chatCommands(o.key))
	}
	c := collected{raw: raw, in: in, cmd: cmd, msg: msgOf(raw, in, cmd, o.storedMode(), o.now())}
	if c.dupOf = o.lane.ids.Note(raw.Header.Get(events.HeaderLaneMsgID), raw.Sequence, raw.Time); c.dupOf != 0 {
		c.msg.Kind = queue.KindDuplicate
	}
	return c
}

// newest is when the stream stored the latest message of the plan.
func (p *plan) newest() time.Time {
	t := p.run.raw.Time
	for _, c := range p.merged {
		t = later(t, c.raw.Time)
	}
	for _, d := range p.dropped {
		t = later(t, d.c.raw.Time)
	}
	return t
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// msgOf is what the planner knows of an inbound message (in nil: it does
// not decode; cmd: the chat command it is, see chatCommand), read at now,
// in a session whose stored mode is stored. A chat command the handler
// answers runs as a follow-up whatever its mode: it is never merged,
// steered, refused or cut.
func msgOf(raw *jetstream.RawStreamMsg, in *events.Inbound, cmd *chatcmd.Command, stored queue.Mode, now time.Time) queue.Msg {
	m := queue.Msg{Seq: raw.Sequence, At: raw.Time}
	if now.Before(m.At) {
		m.At = now // a skewed clock never stretches a debounce
	}
	switch {
	case in == nil:
		m.Kind = queue.KindInvalid
	case in.IsSettings():
		m.Kind = queue.KindSettings
	case in.Stop:
		m.Kind = queue.KindStop
	case cmd != nil:
		m.Mode, m.Prompt = queue.ModeFollowup, in.Text
	default:
		own, _ := queue.ParseMode(in.Mode)
		m.Mode, m.Prompt, m.Heartbeat = queue.ModeOf(own, stored), in.Text, in.Heartbeat
	}
	return m
}

// storedMode is the session's stored queue mode ("" = none).
func (o *owner) storedMode() queue.Mode {
	q := o.lane.settings.Queue()
	if q == nil {
		return ""
	}
	m, _ := queue.ParseMode(q.Mode)
	return m
}

// planTurn plans the turn that starts at head (queue.PlanTurn): it reads
// the messages behind head and waits for a collect batch's debounce as
// the planner asks, then names the messages of its plan.
func (o *owner) planTurn(ctx context.Context, head collected) (*plan, error) {
	pending := []collected{head}
	msgs := []queue.Msg{head.msg}
	complete := false
	var w *laneWatch
	defer func() { w.close() }()
	for {
		qp := queue.PlanTurn(queue.Input{Pending: msgs, Complete: complete, Settings: queue.Resolve(overridesOf(o.lane.settings.Queue())),
			LastEnd: o.lane.lastEnd, Now: o.now()})
		switch qp.Verb {
		case queue.VerbRead:
			next, err := o.next(ctx, pending[len(pending)-1].raw.Sequence)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				complete = true
				continue
			}
			if err != nil {
				return nil, err
			}
			c := o.read(next)
			pending, msgs = append(pending, c), append(msgs, c.msg)
		case queue.VerbWait:
			if w == nil {
				var err error
				if w, err = o.watchLane(); err != nil {
					return nil, err
				}
			}
			if err := w.wait(ctx, qp.Until.Sub(o.now()), o.shutdown); err != nil {
				return nil, err
			}
			complete = false
		default:
			return o.planOf(qp, pending), nil
		}
	}
}

// planOf names the messages of a planner's plan; pending holds every
// message it can name.
func (o *owner) planOf(qp queue.Plan, pending []collected) *plan {
	bySeq := make(map[uint64]collected, len(pending))
	for _, c := range pending {
		bySeq[c.raw.Sequence] = c
	}
	p := &plan{verb: qp.Verb, run: bySeq[qp.Run.Seq], through: qp.Through}
	p.in = p.run.in
	for _, m := range qp.Merged {
		p.merged = append(p.merged, bySeq[m.Seq])
	}
	for _, d := range qp.Dropped {
		reason := fmt.Sprintf("%s; run %s answered the messages kept", d.Reason, p.run.runID())
		if d.Reason == queue.ReasonCapSummarized {
			reason = fmt.Sprintf("%s; its summary line is in the prompt of run %s", d.Reason, p.run.runID())
		}
		p.dropped = append(p.dropped, dropped{c: bySeq[d.Item.Seq], kind: events.KindDropped, reason: reason})
	}
	if qp.Merge {
		p.in = mergeInbound(append([]collected{p.run}, p.merged...), qp.Prompt)
	}
	return p
}

// mergeInbound makes one inbound message of a collect batch: the merged
// prompt, every image and tool result, and the run settings (model,
// thinking, tools) of the last message, as the reference does.
func mergeInbound(batch []collected, prompt string) *events.Inbound {
	merged := *batch[len(batch)-1].in
	merged.ID = batch[0].in.ID
	merged.Text = prompt
	merged.Images, merged.ToolResults = nil, nil
	for _, c := range batch {
		merged.Images = append(merged.Images, c.in.Images...)
		merged.ToolResults = append(merged.ToolResults, c.in.ToolResults...)
	}
	return &merged
}
